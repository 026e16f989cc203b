package agent

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"time"

	"github.com/gangway/gangway/internal/api"
	"github.com/gangway/gangway/internal/node/driver"
)

func (a *Agent) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/logs", a.serveLogs)
	mux.HandleFunc("GET /v1/peer/contact", a.servePeerContact)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "ok") })
	return mux
}

// serveLogs streams what a rank's stdout or stderr retains, the rotated
// files oldest first; with follow=1 it keeps streaming, across rotations,
// until the rank has exited and the log is drained. With tail=N, of what
// is retained when asked only the last N lines are sent (then, when
// following, everything written after).
func (a *Agent) serveLogs(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	key := q.Get("task")
	if _, _, _, err := api.ParseTaskKey(key); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	tail := 0
	if v := q.Get("tail"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			http.Error(w, fmt.Sprintf("tail %q: want a number of lines, 0 or more", v), http.StatusBadRequest)
			return
		}
		tail = n
	}
	stream := q.Get("stream")
	follow := q.Get("follow") == "1" || q.Get("follow") == "true"
	var lo lineOpts
	lo.timestamps = q.Get("timestamps") == "1" || q.Get("timestamps") == "true"
	if v := q.Get("since"); v != "" {
		t, err := time.Parse(time.RFC3339Nano, v)
		if err != nil {
			http.Error(w, fmt.Sprintf("since %q: want an RFC 3339 time", v), http.StatusBadRequest)
			return
		}
		lo.since = t
	}
	streams := []logStream{{api.LogStreamStdout, ""}, {api.LogStreamStderr, api.StderrMark}}
	switch stream {
	case "", api.LogStreamStdout:
		stream, streams = api.LogStreamStdout, streams[:1]
	case api.LogStreamStderr:
		streams = []logStream{{api.LogStreamStderr, ""}}
	case api.LogStreamBoth:
		a.serveLines(w, r, key, follow, tail, streams, lo)
		return
	default:
		http.Error(w, fmt.Sprintf("stream %q: want stdout, stderr or both", stream), http.StatusBadRequest)
		return
	}
	if lo.timestamps || !lo.since.IsZero() {
		a.serveLines(w, r, key, follow, tail, streams, lo)
		return
	}
	f, err := driver.OpenLog(a.taskDir(key), stream)
	if errors.Is(err, os.ErrNotExist) {
		http.Error(w, fmt.Sprintf("no %s log for %s on node %s", stream, key, a.cfg.Name), http.StatusNotFound)
		return
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	defer f.Close()
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	flusher, _ := w.(http.Flusher)
	out := api.NewTailWriter(w, tail)
	defer out.Release()
	buf := make([]byte, 32<<10)
	for {
		n, err := f.Read(buf)
		if n > 0 {
			if _, werr := out.Write(buf[:n]); werr != nil {
				return
			}
			if flusher != nil {
				flusher.Flush()
			}
			continue
		}
		if err != nil && err != io.EOF {
			return
		}
		if !follow {
			return // what was retained when the request came
		}
		// Across a rotation: the rest of the file just read, then the
		// files written since.
		if more, err := f.Next(); err != nil {
			return
		} else if more {
			continue
		}
		// Caught up with what was retained: its tail goes out now.
		if out.Release() != nil {
			return
		}
		if flusher != nil {
			flusher.Flush()
		}
		if a.taskFinished(key) {
			// Read once more: the rank may have written before exiting.
			if more, _ := f.Next(); more {
				continue
			}
			if n, _ := f.Read(buf); n > 0 {
				_, _ = out.Write(buf[:n])
				continue
			}
			return
		}
		select {
		case <-r.Context().Done():
			return
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func (a *Agent) taskFinished(key string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	t := a.tasks[key]
	return t == nil || t.status.State.Terminal()
}

// logStream is one stream of a rank's log served by line, and the mark
// before each of its lines.
type logStream struct{ stream, mark string }

// lineOpts are what a by-line answer does to each line: put the time it
// was written before it (RFC 3339, nanoseconds, UTC, as kubectl logs
// --timestamps does), or leave it out when written before since.
type lineOpts struct {
	timestamps bool
	since      time.Time
}

// serveLines streams a rank's streams merged by line, each line after its
// stream's mark: what they retain when asked (stdout's lines, then
// stderr's: their times are kept per chunk, not finely enough to
// interleave them by), then, with follow, the lines of either as they are
// read, until the rank has exited and they are drained. With tail > 0, of
// what they retain when asked only the last tail lines are sent.
func (a *Agent) serveLines(w http.ResponseWriter, r *http.Request, key string, follow bool, tail int, streams []logStream, lo lineOpts) {
	var srcs []*lineSource
	for _, st := range streams {
		f, err := driver.OpenLog(a.taskDir(key), st.stream)
		if errors.Is(err, os.ErrNotExist) && follow && !a.taskFinished(key) {
			// Not made yet: a follower that went on without it would
			// never see that stream's lines. It asks again.
			http.Error(w, fmt.Sprintf("no %s log for %s on node %s yet", st.stream, key, a.cfg.Name), http.StatusNotFound)
			return
		}
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		defer f.Close()
		srcs = append(srcs, &lineSource{r: f, mark: []byte(st.mark), opts: lo})
	}
	if len(srcs) == 0 {
		http.Error(w, fmt.Sprintf("no stdout or stderr log for %s on node %s", key, a.cfg.Name), http.StatusNotFound)
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	flusher, _ := w.(http.Flusher)
	if flusher != nil {
		flusher.Flush() // the headers: a follower waits for its first line
	}
	tw := api.NewTailWriter(w, tail)
	defer tw.Release()
	out := &lineGuard{w: tw}
	buf := make([]byte, 32<<10)
	for {
		if !follow || a.taskFinished(key) {
			// Nothing more will be written (or nothing more is asked
			// for): each stream to its end in turn, its last line too.
			for _, s := range srcs {
				for {
					if _, err := s.pump(out, buf); err != nil {
						return
					}
					if more, err := s.r.Next(); !follow || err != nil || !more {
						break
					}
				}
				if s.finish(out) != nil {
					return
				}
			}
			return
		}
		read, more := false, false
		for _, s := range srcs {
			n, err := s.pump(out, buf)
			if err != nil {
				return
			}
			m, err := s.r.Next() // across a rotation
			if err != nil {
				return
			}
			read, more = read || n, more || m
		}
		if read && flusher != nil {
			flusher.Flush()
		}
		if read || more {
			continue
		}
		// Caught up with what was retained: its tail goes out now.
		if tw.Release() != nil {
			return
		}
		if flusher != nil {
			flusher.Flush()
		}
		select {
		case <-r.Context().Done():
			return
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// lineGuard ends a line left unfinished (stdout's last, without a
// newline) before anything else is written after it.
type lineGuard struct {
	w    io.Writer
	open bool
}

func (g *lineGuard) Write(p []byte) (int, error) {
	if g.open && len(p) > 0 {
		g.open = false
		if _, err := g.w.Write([]byte("\n")); err != nil {
			return 0, err
		}
	}
	return g.w.Write(p)
}

// maxHeldLine bounds the unfinished line a lineSource holds back: a longer
// one is passed on as a line of its own.
const maxHeldLine = 64 << 10

// lineSource hands on one stream's log by whole lines, each after mark,
// so that lines of two streams interleave without breaking one another.
type lineSource struct {
	r      *driver.LogReader
	mark   []byte
	opts   lineOpts
	held   []byte    // a line read but not yet ended
	heldAt time.Time // when held's first byte was written
	ats    []time.Time
}

// pump writes the whole lines readable now to w and reports whether it
// read anything; the error is a write's or a read's.
func (s *lineSource) pump(w io.Writer, buf []byte) (bool, error) {
	read := false
	for {
		n, at, err := s.r.ReadTimed(buf)
		if n > 0 {
			read = true
			held := len(s.held)
			if held == 0 {
				s.heldAt = at(0)
			}
			data := append(s.held, buf[:n]...)
			end := bytes.LastIndexByte(data, '\n') + 1
			if end == 0 && len(data) > maxHeldLine {
				data, end = append(data, '\n'), len(data)+1
			}
			// Each whole line's time: its first byte's.
			s.ats = s.ats[:0]
			if s.timed() {
				for i, lineAt := 0, s.heldAt; i < end; {
					s.ats = append(s.ats, lineAt)
					i += bytes.IndexByte(data[i:end], '\n') + 1
					if i < len(data) && i >= held && i-held < n {
						lineAt = at(i - held)
					}
				}
				if end < len(data) && end >= held {
					s.heldAt = at(end - held)
				}
			}
			if werr := s.write(w, data[:end]); werr != nil {
				return read, werr
			}
			s.held = append([]byte(nil), data[end:]...)
			continue
		}
		if err == io.EOF {
			return read, nil
		}
		if err != nil {
			return read, err
		}
	}
}

// timed reports whether lines need their times.
func (s *lineSource) timed() bool { return s.opts.timestamps || !s.opts.since.IsZero() }

// write writes whole lines, each after the mark (and, timed, the k-th
// after s.ats[k], or left out when before since).
func (s *lineSource) write(w io.Writer, lines []byte) error {
	if s.timed() {
		var out []byte
		for k := 0; len(lines) > 0; k++ {
			i := bytes.IndexByte(lines, '\n') + 1
			if i == 0 {
				i = len(lines)
			}
			at := s.heldAt
			if k < len(s.ats) {
				at = s.ats[k]
			}
			if s.opts.since.IsZero() || !at.Before(s.opts.since) {
				if s.opts.timestamps {
					out = at.UTC().AppendFormat(out, time.RFC3339Nano)
					out = append(out, ' ')
				}
				out = append(append(out, s.mark...), lines[:i]...)
			}
			lines = lines[i:]
		}
		_, err := w.Write(out)
		return err
	}
	if len(s.mark) == 0 {
		_, err := w.Write(lines)
		return err
	}
	_, err := w.Write(api.PrefixLines(nil, s.mark, lines))
	return err
}

// finish writes the unfinished last line once nothing more will come:
// stdout's as it is (it may end without a newline), stderr's ended.
func (s *lineSource) finish(out *lineGuard) error {
	if len(s.held) == 0 {
		return nil
	}
	if len(s.mark) > 0 {
		s.held = append(s.held, '\n')
	}
	s.ats = append(s.ats[:0], s.heldAt)
	err := s.write(out, s.held)
	out.open = s.held[len(s.held)-1] != '\n'
	s.held = nil
	return err
}
