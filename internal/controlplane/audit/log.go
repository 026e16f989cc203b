// Package audit is the control plane's audit log, as Kubernetes' is: every
// mutating request (who, what, when, from where, and how it ended) is
// appended as one JSON line to a file that rotates by size, and the last
// records are kept in memory for GET /v1/audit.
//
// Log is the record keeper; Middleware records HTTP requests into it, and
// Annotate lets an inner layer (authentication) say who the caller was.
// Appending never waits for the disk: one writer goroutine, started by
// Open and stopped by Close, writes what Append queued.
//
// It imports the standard library and internal/api.
package audit

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/gangway/gangway/internal/api"
)

// Defaults of Config, as kube-apiserver's --audit-log-maxsize=100 and a
// few --audit-log-maxbackup.
const (
	DefaultMaxBytes   = 100 << 20
	DefaultMaxBackups = 5
	// DefaultMaxPending bounds the records queued for a disk that does not
	// keep up; beyond it records are dropped (and counted), not queued.
	DefaultMaxPending = 100000
)

// ErrBehind is Failures' reason when records were dropped because the
// writer had MaxPending records queued already.
var ErrBehind = errors.New("audit: the writer fell behind; records dropped")

// Config says where a Log writes and what it keeps.
type Config struct {
	// Path is the file records are appended to, one JSON line each
	// (created 0600, its folder 0700). Empty: memory only.
	Path string
	// Keep is how many of the latest records Recent can return.
	Keep int
	// MaxBytes is the size at which the file is rotated: it becomes
	// Path.1, Path.1 becomes Path.2 and so on. 0: DefaultMaxBytes.
	MaxBytes int64
	// MaxBackups is how many rotated files are kept. 0: DefaultMaxBackups.
	MaxBackups int
	// MaxPending is how many records may wait for the writer. 0:
	// DefaultMaxPending.
	MaxPending int
}

// Log keeps audit records: the latest in a ring, all in a file.
type Log struct {
	cfg Config

	mu sync.Mutex // guards the fields below
	// ring holds the latest cfg.Keep records; next is where the next one
	// goes and full says whether it has wrapped.
	ring []api.AuditRecord
	next int
	full bool
	// pending are records the writer has yet to write.
	pending []api.AuditRecord
	failed  int64
	lastErr error
	closed  bool

	// wake tells the writer that pending has records (capacity 1).
	wake chan struct{}
	// stop is closed by Close; done is closed by the writer when it exits.
	stop, done chan struct{}

	// Owned by the writer goroutine (by Open before it starts).
	file *os.File
	size int64
}

// Open opens an audit log that appends to path and keeps the last keep
// records in memory, with Config's defaults.
func Open(path string, keep int) (*Log, error) {
	return OpenConfig(Config{Path: path, Keep: keep})
}

// OpenConfig opens an audit log as c says. With a Path it starts the
// writer goroutine, which Close stops.
func OpenConfig(c Config) (*Log, error) {
	if c.Keep < 0 || c.MaxBytes < 0 || c.MaxBackups < 0 || c.MaxPending < 0 {
		return nil, errors.New("audit: Keep, MaxBytes, MaxBackups and MaxPending cannot be negative")
	}
	if c.MaxBytes == 0 {
		c.MaxBytes = DefaultMaxBytes
	}
	if c.MaxBackups == 0 {
		c.MaxBackups = DefaultMaxBackups
	}
	if c.MaxPending == 0 {
		c.MaxPending = DefaultMaxPending
	}
	l := &Log{cfg: c, ring: make([]api.AuditRecord, c.Keep), wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	if c.Path == "" {
		close(l.done)
		return l, nil
	}
	if err := os.MkdirAll(filepath.Dir(c.Path), 0o700); err != nil {
		return nil, fmt.Errorf("audit: open %s: %w", c.Path, err)
	}
	if err := l.openFile(); err != nil {
		return nil, err
	}
	go l.write()
	return l, nil
}

// Append records rec (its Time set to now when zero). It never waits for
// the disk: the record goes into the ring and the writer's queue. A record
// the writer cannot write, or that finds the queue full, is counted in
// Failures. Safe for concurrent use; after Close it is ignored.
func (l *Log) Append(rec api.AuditRecord) {
	if rec.Time.IsZero() {
		rec.Time = time.Now()
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return
	}
	if len(l.ring) > 0 {
		l.ring[l.next] = rec
		l.next++
		if l.next == len(l.ring) {
			l.next, l.full = 0, true
		}
	}
	if l.cfg.Path == "" {
		return
	}
	if len(l.pending) >= l.cfg.MaxPending {
		l.failed++
		l.lastErr = ErrBehind
		return
	}
	l.pending = append(l.pending, rec)
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// Filter selects records for Recent. Zero fields select everything.
type Filter struct {
	// Who keeps only the records of this caller.
	Who string
	// Since keeps only records at or after this time.
	Since time.Time
	// Limit keeps only the last Limit records that match.
	Limit int
}

// Recent returns the records in memory that f selects, oldest first.
func (l *Log) Recent(f Filter) []api.AuditRecord {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []api.AuditRecord
	// Walk newest to oldest so that Limit stops early, then reverse.
	n := l.next
	if l.full {
		n = len(l.ring)
	}
	for i := 0; i < n; i++ {
		r := l.ring[(l.next-1-i+len(l.ring))%len(l.ring)]
		if f.Limit > 0 && len(out) == f.Limit {
			break
		}
		if f.Who != "" && r.Who != f.Who || r.Time.Before(f.Since) {
			continue
		}
		out = append(out, r)
	}
	for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
		out[i], out[j] = out[j], out[i]
	}
	return out
}

// Failures says how many records could not be written to the file and the
// last reason.
func (l *Log) Failures() (count int64, last error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.failed, l.lastErr
}

// Close writes what is queued, closes the file and stops the writer,
// waiting for it. Later Appends are ignored; Recent still answers.
func (l *Log) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		<-l.done
		return nil
	}
	l.closed = true
	l.mu.Unlock()
	if l.cfg.Path == "" {
		return nil
	}
	close(l.stop)
	<-l.done
	if l.file == nil { // a rotation could not reopen it; counted already
		return nil
	}
	var err error
	if serr := l.file.Sync(); serr != nil {
		err = fmt.Errorf("audit: sync %s: %w", l.cfg.Path, serr)
	}
	if cerr := l.file.Close(); cerr != nil && err == nil {
		err = fmt.Errorf("audit: close %s: %w", l.cfg.Path, cerr)
	}
	return err
}

// write is the writer goroutine: it takes the queue whenever woken and
// writes it, until stop; then it writes what is left and exits.
func (l *Log) write() {
	defer close(l.done)
	var buf []byte
	var batch []api.AuditRecord
	for {
		stopping := false
		select {
		case <-l.wake:
		case <-l.stop:
			stopping = true
		}
		l.mu.Lock()
		batch, l.pending = l.pending, batch[:0]
		l.mu.Unlock()
		buf = l.writeBatch(batch, buf[:0])
		clear(batch) // let the records' strings go
		if stopping {
			return
		}
	}
}

// writeBatch encodes and writes batch, rotating the file whenever the next
// record would take it over MaxBytes. It returns buf for reuse.
func (l *Log) writeBatch(batch []api.AuditRecord, buf []byte) []byte {
	var failed int64
	var lastErr error
	for _, rec := range batch {
		line, err := json.Marshal(rec)
		if err != nil { // cannot happen for these field types
			failed, lastErr = failed+1, fmt.Errorf("audit: encode: %w", err)
			continue
		}
		line = append(line, '\n')
		if l.size+int64(len(buf)+len(line)) > l.cfg.MaxBytes && l.size+int64(len(buf)) > 0 {
			if n, err := l.flush(buf); err != nil {
				failed, lastErr = failed+int64(n), err
			}
			buf = buf[:0]
			if err := l.rotate(); err != nil {
				lastErr = err
			}
		}
		buf = append(buf, line...)
	}
	if n, err := l.flush(buf); err != nil {
		failed, lastErr = failed+int64(n), err
	}
	if lastErr != nil {
		l.mu.Lock()
		l.failed += failed
		l.lastErr = lastErr
		l.mu.Unlock()
	}
	return buf
}

// flush writes buf to the file; on failure it says how many records (lines)
// were lost.
func (l *Log) flush(buf []byte) (lost int, err error) {
	if len(buf) == 0 {
		return 0, nil
	}
	if l.file == nil { // a rotation could not reopen it
		if err := l.openFile(); err != nil {
			return countLines(buf), err
		}
	}
	n, err := l.file.Write(buf)
	l.size += int64(n)
	if err != nil {
		return countLines(buf[n:]), fmt.Errorf("audit: write %s: %w", l.cfg.Path, err)
	}
	return 0, nil
}

// rotate closes the file, shifts Path.i to Path.i+1 (dropping the
// oldest), renames Path to Path.1 and opens a new Path.
func (l *Log) rotate() error {
	if l.file != nil {
		l.file.Close()
		l.file = nil
	}
	p := l.cfg.Path
	os.Remove(p + "." + strconv.Itoa(l.cfg.MaxBackups))
	for i := l.cfg.MaxBackups - 1; i >= 1; i-- {
		os.Rename(p+"."+strconv.Itoa(i), p+"."+strconv.Itoa(i+1)) // missing ones are fine
	}
	if err := os.Rename(p, p+".1"); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("audit: rotate %s: %w", p, err)
	}
	return l.openFile()
}

func (l *Log) openFile() error {
	f, err := os.OpenFile(l.cfg.Path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("audit: open %s: %w", l.cfg.Path, err)
	}
	fi, err := f.Stat()
	if err == nil && fi.Mode().Perm() != 0o600 {
		err = f.Chmod(0o600) // a file made by hand or an older version
	}
	if err != nil {
		f.Close()
		return fmt.Errorf("audit: open %s: %w", l.cfg.Path, err)
	}
	l.file, l.size = f, fi.Size()
	return nil
}

func countLines(b []byte) int {
	n := 0
	for _, c := range b {
		if c == '\n' {
			n++
		}
	}
	return n
}
