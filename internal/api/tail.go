package api

import (
	"bytes"
	"io"
)

// TailWriter holds back what is written to it, keeping only its last N
// lines, until Release; from then on it passes writes through. It is what
// `gangway logs --tail N` asks the node (or, in a torchrun job's rank
// filter, the server) for: the last N lines of what is retained, then,
// when following, everything after. Not safe for concurrent use.
type TailWriter struct {
	w        io.Writer
	n        int
	lines    [][]byte // the last n whole lines, oldest first
	held     []byte   // a line not yet ended
	released bool
}

// NewTailWriter keeps the last n lines written to it for w; n <= 0 keeps
// everything (it passes writes through from the start).
func NewTailWriter(w io.Writer, n int) *TailWriter {
	return &TailWriter{w: w, n: n, released: n <= 0}
}

func (t *TailWriter) Write(p []byte) (int, error) {
	if t.released {
		return t.w.Write(p)
	}
	data := append(t.held, p...)
	for {
		i := bytes.IndexByte(data, '\n')
		if i < 0 {
			break
		}
		t.keep(data[:i+1])
		data = data[i+1:]
	}
	t.held = append([]byte(nil), data...)
	return len(p), nil
}

func (t *TailWriter) keep(line []byte) {
	if len(t.lines) == t.n {
		copy(t.lines, t.lines[1:])
		t.lines = t.lines[:t.n-1]
	}
	t.lines = append(t.lines, append([]byte(nil), line...))
}

// Release writes the lines kept (and a last unfinished one, which counts
// among the n) and passes every later write through. Calling it again
// does nothing.
func (t *TailWriter) Release() error {
	if t.released {
		return nil
	}
	t.released = true
	lines := t.lines
	if len(t.held) > 0 {
		if len(lines) == t.n {
			lines = lines[1:]
		}
		lines = append(lines, t.held)
	}
	t.lines, t.held = nil, nil
	_, err := t.w.Write(bytes.Join(lines, nil))
	return err
}

// PrefixLines appends lines, whole lines each ended by a newline, to dst,
// each after prefix (as api.StderrMark or `[rank N] `).
func PrefixLines(dst, prefix, lines []byte) []byte {
	for len(lines) > 0 {
		i := bytes.IndexByte(lines, '\n') + 1
		if i == 0 {
			i = len(lines)
		}
		dst = append(append(dst, prefix...), lines[:i]...)
		lines = lines[i:]
	}
	return dst
}
