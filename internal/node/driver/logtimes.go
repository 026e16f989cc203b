package driver

import (
	"encoding/binary"
	"io"
	"os"
	"sort"
	"time"

	"golang.org/x/sys/unix"
)

// Log times: each log file (stdout.log, stdout.log.1, …) has a time index
// beside it (stdout.log.times, stdout.log.1.times, renamed with it), so
// that `gangway logs --timestamps` and `--since` can say when each line
// was written while the files themselves stay the rank's bytes, moved by
// splice(2) without the supervisor ever seeing them. A record is 16
// bytes, little-endian: the offset in the file of a chunk the copier
// moved and when (Unix nanoseconds); a byte's time is its chunk's. The
// copier moves a chunk as soon as the pipe is readable, so that is when
// the rank wrote it, to within the copier's wake-up; records closer than
// markEvery to the last are left out, which bounds the index to 1.6 KB a
// second of a rank's constant output and makes a line's time at most
// markEvery early. A file without an index (written by a supervisor from
// before this) reads as written at its modification time.

// markEvery is how close in time two records of one index may be.
const markEvery = 10 * time.Millisecond

const timeRecord = 16

// timesName is the time index of the log file path.
func timesName(path string) string { return path + ".times" }

// markLocked records that the chunk of n bytes at off was moved now.
func (ls *logStream) markLocked(off, n int64) {
	if ls.times < 0 || n <= 0 {
		return
	}
	now := time.Now()
	if !ls.markedAt.IsZero() && now.Sub(ls.markedAt) < markEvery {
		return
	}
	var rec [timeRecord]byte
	binary.LittleEndian.PutUint64(rec[:8], uint64(off))
	binary.LittleEndian.PutUint64(rec[8:], uint64(now.UnixNano()))
	if _, err := unix.Write(ls.times, rec[:]); err != nil {
		// No times for the rest of this file rather than wrong ones.
		ls.closeTimesLocked()
		return
	}
	ls.markedAt = now
}

func (ls *logStream) closeTimesLocked() {
	if ls.times >= 0 {
		unix.Close(ls.times)
		ls.times = -1
	}
}

// timeIndex reads one log file's index, more of it as the file grows.
// nil-safe: a nil one reads every byte as written at the log file's
// modification time.
type timeIndex struct {
	log  *os.File // the log file, for its modification time
	f    *os.File // the index; nil when there is none
	offs []int64
	ats  []int64
	tail []byte // a record read in part
}

// openTimeIndex opens the index at path of the log file log (open).
func openTimeIndex(log *os.File, path string) *timeIndex {
	ti := &timeIndex{log: log}
	if f, err := OpenRegular(path); err == nil {
		ti.f = f
	}
	return ti
}

// at is when the byte at off was written.
func (ti *timeIndex) at(off int64) time.Time {
	if ti == nil {
		return time.Time{}
	}
	if ti.f != nil && (len(ti.offs) == 0 || off > ti.offs[len(ti.offs)-1]) {
		ti.load()
	}
	i := sort.Search(len(ti.offs), func(i int) bool { return ti.offs[i] > off }) - 1
	if i < 0 {
		if st, err := ti.log.Stat(); err == nil {
			return st.ModTime()
		}
		return time.Time{}
	}
	return time.Unix(0, ti.ats[i])
}

// load reads the records written since the last load.
func (ti *timeIndex) load() {
	b, err := io.ReadAll(ti.f)
	if err != nil {
		return
	}
	b = append(ti.tail, b...)
	for len(b) >= timeRecord {
		ti.offs = append(ti.offs, int64(binary.LittleEndian.Uint64(b[:8])))
		ti.ats = append(ti.ats, int64(binary.LittleEndian.Uint64(b[8:16])))
		b = b[timeRecord:]
	}
	ti.tail = append([]byte(nil), b...)
}

func (ti *timeIndex) close() {
	if ti != nil && ti.f != nil {
		ti.f.Close()
	}
}
