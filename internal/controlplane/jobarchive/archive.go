// Package jobarchive keeps gangway's job archive: the finished jobs
// retention deletes from the store, each appended as one JSON line
// (api.JobDetail, as describe shows it) to a file that rotates by size:
// FILE, then FILE.1 (the newest rotated), FILE.2, ... A job written again
// after its archiving is archived again, so the last record of an ID wins.
//
// An index in memory (job ID → file and byte range of its last record,
// about 100 bytes a job) makes a look-up read one record. It is built by
// one scan of every file on the first use after a start (about 1 s per GB)
// and kept up to date by Append; one Archive per file, in one process.
//
// It imports api.
package jobarchive

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/gangway/gangway/internal/api"
)

// Config says where the archive lies and how it rotates.
type Config struct {
	// Path is the file appended to; rotated files are Path.1, Path.2, ...
	Path string
	// MaxBytes: an append that would take Path past this rotates it first
	// (a single append larger than it still goes whole into one file).
	// 0: never rotate.
	MaxBytes int64
	// Keep is how many rotated files are kept; older ones are deleted.
	// 0: keep every one.
	Keep int
}

// Validate checks the configuration, naming the server's flags.
func (c Config) Validate() error {
	switch {
	case c.MaxBytes < 0:
		return fmt.Errorf("--job-archive-max-size %d: must not be negative (0: never rotate)", c.MaxBytes)
	case c.Keep < 0:
		return fmt.Errorf("--job-archive-keep %d: must not be negative (0: keep every rotated file)", c.Keep)
	case c.Path == "" && (c.MaxBytes > 0 || c.Keep > 0):
		return errors.New("--job-archive-max-size and --job-archive-keep need --job-archive FILE")
	}
	return nil
}

// Archive is a job archive with its index. Its methods are safe to call
// from several goroutines.
type Archive struct {
	cfg Config

	mu     sync.Mutex // guards the fields below
	loaded bool
	// segs are the files, the current one (n 0) first, then the rotated
	// ones oldest last, by n (gaps are left by a rotation cut short).
	segs  []*segment
	index map[string]loc
	// bad are the lines whose job ID could not be read, checked by
	// substring when a look-up finds nothing else.
	bad []loc
}

// segment is one file of the archive.
type segment struct {
	n    int   // suffix: 0 for Path, k for Path.k
	size int64 // bytes of whole lines in it
	gone bool  // deleted by rotation
}

// loc is where a record lies.
type loc struct {
	seg *segment
	off int64
	len int64
}

// New returns the archive of cfg. It reads nothing until first used.
func New(cfg Config) *Archive {
	return &Archive{cfg: cfg}
}

// Path is the file appended to.
func (a *Archive) Path() string { return a.cfg.Path }

func (a *Archive) name(s *segment) string {
	if s.n == 0 {
		return a.cfg.Path
	}
	return a.cfg.Path + "." + strconv.Itoa(s.n)
}

// loadLocked builds the index by reading every file, oldest first, once.
func (a *Archive) loadLocked() error {
	if a.loaded {
		return nil
	}
	segs := []*segment{{n: 0}}
	matches, err := filepath.Glob(a.cfg.Path + ".*")
	if err != nil {
		return fmt.Errorf("job archive %s: %w", a.cfg.Path, err)
	}
	for _, m := range matches {
		if n, err := strconv.Atoi(strings.TrimPrefix(m, a.cfg.Path+".")); err == nil && n > 0 && strconv.Itoa(n) == strings.TrimPrefix(m, a.cfg.Path+".") {
			segs = append(segs, &segment{n: n})
		}
	}
	slices.SortFunc(segs, func(x, y *segment) int { return x.n - y.n })
	a.index = map[string]loc{}
	a.bad = nil
	for i := len(segs) - 1; i >= 0; i-- {
		if err := a.scan(segs[i]); err != nil {
			return err
		}
	}
	a.segs = segs
	a.loaded = true
	return nil
}

// scan indexes the whole lines of s's file; a torn last line (an append
// cut short by a crash) is left out of s.size.
func (a *Archive) scan(s *segment) error {
	f, err := os.Open(a.name(s))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("job archive: %w", err)
	}
	defer f.Close()
	r := bufio.NewReaderSize(f, 1<<20)
	var off int64
	for {
		b, err := readLine(r)
		if errors.Is(err, io.EOF) {
			s.size = off
			return nil
		}
		if err != nil {
			return fmt.Errorf("job archive %s: %w", a.name(s), err)
		}
		l := loc{seg: s, off: off, len: int64(len(b))}
		if id, ok := recordID(b); ok {
			a.index[id] = l
		} else if len(bytes.TrimSpace(b)) > 0 {
			a.bad = append(a.bad, l)
		}
		off += int64(len(b))
	}
}

// readLine reads one whole line of any length (a large gang's record is
// hundreds of kilobytes); at the end it returns io.EOF and no bytes, also
// when the last line has no newline (a torn line).
func readLine(r *bufio.Reader) ([]byte, error) {
	b, err := r.ReadSlice('\n')
	if errors.Is(err, bufio.ErrBufferFull) {
		buf := append([]byte(nil), b...)
		for errors.Is(err, bufio.ErrBufferFull) {
			b, err = r.ReadSlice('\n')
			buf = append(buf, b...)
		}
		b = buf
	}
	if errors.Is(err, io.EOF) {
		return nil, io.EOF
	}
	return b, err
}

// idPrefix is how every record Append writes begins.
const idPrefix = `{"job":{"id":"`

// recordID reads the job ID of a record: from its prefix when it has the
// form Append writes, else by decoding it.
func recordID(b []byte) (string, bool) {
	if rest, ok := bytes.CutPrefix(b, []byte(idPrefix)); ok {
		if i := bytes.IndexByte(rest, '"'); i > 0 && bytes.IndexByte(rest[:i], '\\') < 0 {
			return string(rest[:i]), true
		}
	}
	var d struct {
		Job struct {
			ID string `json:"id"`
		} `json:"job"`
	}
	if json.Unmarshal(b, &d) != nil || d.Job.ID == "" {
		return "", false
	}
	return d.Job.ID, true
}

// Lookup returns the last record of job id, or nil when the archive does
// not hold it (or does not exist yet). It reads one record; when that is
// not where the index says (someone cut or moved the files), it reads the
// files again and looks once more.
func (a *Archive) Lookup(id string) (*api.JobDetail, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if err := a.loadLocked(); err != nil {
		return nil, err
	}
	d, err := a.lookupLocked(id)
	if errors.Is(err, errStale) {
		a.loaded = false
		if err := a.loadLocked(); err != nil {
			return nil, err
		}
		d, err = a.lookupLocked(id)
	}
	if errors.Is(err, errStale) {
		return nil, fmt.Errorf("job archive: the record of job %s changed while it was read", id)
	}
	return d, err
}

// errStale: a record is not where the index says.
var errStale = errors.New("jobarchive: index out of date")

func (a *Archive) lookupLocked(id string) (*api.JobDetail, error) {
	l, ok := a.index[id]
	if !ok {
		return nil, a.damagedLocked(id)
	}
	b, err := a.readLocked(l)
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, os.ErrNotExist) {
		return nil, errStale
	}
	if err != nil {
		return nil, err
	}
	if got, ok := recordID(b); ok && got != id {
		return nil, errStale
	}
	var d api.JobDetail
	if err := json.Unmarshal(b, &d); err != nil {
		return nil, fmt.Errorf("job archive %s, the record of job %s at byte %d: %w", a.name(l.seg), id, l.off, err)
	}
	if d.Job.ID != id {
		return nil, errStale
	}
	return &d, nil
}

// damagedLocked returns an error when one of the lines whose ID could not
// be read names job id: a damaged record is not a miss.
func (a *Archive) damagedLocked(id string) error {
	needle := []byte(`"id":` + jsonString(id))
	for _, l := range a.bad {
		if l.seg.gone {
			continue
		}
		b, err := a.readLocked(l)
		if err != nil {
			return err
		}
		if bytes.Contains(b, needle) {
			return fmt.Errorf("job archive %s, the line at byte %d, names job %s but is damaged", a.name(l.seg), l.off, id)
		}
	}
	return nil
}

func (a *Archive) readLocked(l loc) ([]byte, error) {
	f, err := os.Open(a.name(l.seg))
	if err != nil {
		return nil, fmt.Errorf("job archive: %w", err)
	}
	defer f.Close()
	b := make([]byte, l.len)
	if _, err := f.ReadAt(b, l.off); err != nil {
		return nil, fmt.Errorf("job archive %s at byte %d: %w", a.name(l.seg), l.off, err)
	}
	return b, nil
}

func jsonString(s string) string {
	b, _ := json.Marshal(s) // a string: cannot fail
	return string(b)
}
