package jobarchive

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/gangway/gangway/internal/api"
)

// Append writes ds, one line each, to the archive and fsyncs it, rotating
// the file first when the lines would take it past Config.MaxBytes. On an
// error nothing of ds is in the archive: the file is cut back to where it
// was, so no half line stays.
func (a *Archive) Append(ds []api.JobDetail) error {
	if len(ds) == 0 {
		return nil
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	ends := make([]int64, len(ds))
	for i := range ds {
		if err := enc.Encode(&ds[i]); err != nil {
			return fmt.Errorf("archive job %s: %w", ds[i].Job.ID, err)
		}
		ends[i] = int64(buf.Len())
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if err := a.loadLocked(); err != nil {
		return err
	}
	if fi, err := os.Stat(a.cfg.Path); (err != nil || fi.Size() < a.segs[0].size) && a.segs[0].size > 0 {
		// Cut or moved by someone else: what the index says of it is
		// wrong, and writing at its size would leave a hole.
		a.loaded = false
		if err := a.loadLocked(); err != nil {
			return err
		}
	}
	cur := a.segs[0]
	if a.cfg.MaxBytes > 0 && cur.size > 0 && cur.size+int64(buf.Len()) > a.cfg.MaxBytes {
		if err := a.rotateLocked(); err != nil {
			return err
		}
		cur = a.segs[0]
	}
	f, err := os.OpenFile(a.cfg.Path, os.O_WRONLY|os.O_CREATE, 0o644)
	if err != nil {
		return fmt.Errorf("job archive: %w", err)
	}
	// Whatever lies past the whole lines (a torn line of an append a crash
	// cut short) was never acknowledged: write over it.
	if err = f.Truncate(cur.size); err == nil {
		if _, err = f.WriteAt(buf.Bytes(), cur.size); err == nil {
			err = f.Sync() // durable before the jobs leave the store
		}
		if err != nil {
			_ = f.Truncate(cur.size)
		}
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("job archive %s: %w", a.cfg.Path, err)
	}
	var start int64
	for i := range ds {
		a.index[ds[i].Job.ID] = loc{seg: cur, off: cur.size + start, len: ends[i] - start}
		start = ends[i]
	}
	cur.size += int64(buf.Len())
	return nil
}

// rotateLocked renames Path.k to Path.k+1, the oldest first, and Path to
// Path.1, deleting the files past Config.Keep. Cut short by an error, it
// leaves every file where its segment says (a gap in the numbers at
// worst), and the next append tries again.
func (a *Archive) rotateLocked() error {
	for i := len(a.segs) - 1; i >= 1; i-- {
		s := a.segs[i]
		if a.cfg.Keep > 0 && s.n+1 > a.cfg.Keep {
			if err := os.Remove(a.name(s)); err != nil && !errors.Is(err, os.ErrNotExist) {
				return fmt.Errorf("job archive: rotate: %w", err)
			}
			s.gone = true
			a.segs = a.segs[:i]
			a.forgetLocked(s)
			continue
		}
		old := a.name(s)
		s.n++
		if err := os.Rename(old, a.name(s)); err != nil && !errors.Is(err, os.ErrNotExist) {
			s.n--
			return fmt.Errorf("job archive: rotate: %w", err)
		}
	}
	// A torn tail of Path goes along into Path.1, past its size: never
	// read.
	if err := os.Rename(a.cfg.Path, a.cfg.Path+".1"); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("job archive: rotate: %w", err)
	}
	a.segs[0].n = 1
	a.segs = append([]*segment{{n: 0}}, a.segs...)
	return nil
}

// forgetLocked drops the index entries of a deleted file.
func (a *Archive) forgetLocked(s *segment) {
	for id, l := range a.index {
		if l.seg == s {
			delete(a.index, id)
		}
	}
	kept := a.bad[:0]
	for _, l := range a.bad {
		if l.seg != s {
			kept = append(kept, l)
		}
	}
	a.bad = kept
}

// Jobs returns every job the archive holds, the last record of each, in
// the order of their first records. A damaged line is an error naming its
// file and line; a torn last line, being written, is skipped.
func (a *Archive) Jobs() ([]*api.Job, error) { return a.JobsSince(time.Time{}) }

// JobsSince is Jobs without reading the files last written before since
// (zero: it reads them all): a job is archived after it finished, so every
// job such a file holds finished before since. It may still return jobs
// that finished earlier, which the caller filters out.
func (a *Archive) JobsSince(since time.Time) ([]*api.Job, error) {
	a.mu.Lock()
	if err := a.loadLocked(); err != nil {
		a.mu.Unlock()
		return nil, err
	}
	// Open every file and note its size under the lock; read them after,
	// so that appends and rotations go on meanwhile.
	type open struct {
		f    *os.File
		name string
		size int64
	}
	var files []open
	for i := len(a.segs) - 1; i >= 0; i-- {
		s := a.segs[i]
		f, err := os.Open(a.name(s))
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			a.mu.Unlock()
			for _, o := range files {
				o.f.Close()
			}
			return nil, fmt.Errorf("job archive: %w", err)
		}
		if fi, err := f.Stat(); err == nil && !since.IsZero() && fi.ModTime().Before(since) {
			f.Close()
			continue
		}
		files = append(files, open{f, a.name(s), s.size})
	}
	a.mu.Unlock()
	defer func() {
		for _, o := range files {
			o.f.Close()
		}
	}()
	byID := map[string]int{}
	var out []*api.Job
	for _, o := range files {
		r := bufio.NewReaderSize(io.NewSectionReader(o.f, 0, o.size), 1<<20)
		for line := 1; ; line++ {
			b, err := readLine(r)
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return nil, fmt.Errorf("job archive %s: %w", o.name, err)
			}
			if len(bytes.TrimSpace(b)) == 0 {
				continue
			}
			var d struct {
				Job api.Job `json:"job"`
			}
			if err := json.Unmarshal(b, &d); err != nil {
				return nil, fmt.Errorf("job archive %s line %d: %w", o.name, line, err)
			}
			if i, ok := byID[d.Job.ID]; ok {
				out[i] = &d.Job
			} else {
				byID[d.Job.ID] = len(out)
				out = append(out, &d.Job)
			}
		}
	}
	return out, nil
}
