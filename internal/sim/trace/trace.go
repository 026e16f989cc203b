package trace

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// Job is one job of a trace, in the units the simulator uses.
type Job struct {
	// ID names the job; unique within a trace.
	ID string
	// Submit is when the job arrived, in seconds after the first job of
	// the trace (after any time-window filter).
	Submit float64
	// Duration is how long the job runs on its GPUs when nothing
	// interrupts it, in seconds.
	Duration float64
	// GPUs is the number of GPUs the job asks for; 0 for CPU-only pods.
	GPUs int
	// GPUMilli is the share of each GPU it needs, in thousandths: 1000
	// for whole GPUs, less for a GPU-sharing pod (then GPUs is 1).
	GPUMilli int
	// CPUMilli and MemoryMiB are host resources; 0 when the trace has none.
	CPUMilli  int64
	MemoryMiB int64
	// GPUModels lists the GPU models the job may run on; empty means any.
	GPUModels []string
	// Queue is the tenant line (Philly's virtual cluster); User the owner.
	Queue string
	User  string
	// Line is the job's line in its source file, for messages.
	Line int
}

// Node is one machine of a node list.
type Node struct {
	Name      string
	GPUs      int
	GPUModel  string
	CPUMilli  int64
	MemoryMiB int64
	Line      int
}

// Trace is a list of jobs sorted by Submit (ties keep file order).
type Trace struct {
	Jobs []Job
	// Start is the wall-clock instant of Submit 0; zero when the format
	// has no wall-clock times.
	Start time.Time
	// Skipped counts rows that were well-formed but left out: outside
	// the time window, or asking for no GPU where the reader keeps only
	// GPU jobs.
	Skipped int
}

// Options filter what a reader keeps.
type Options struct {
	// From and To bound submit times, both inclusive; zero means open.
	// They apply to formats with wall-clock times (Philly, Helios,
	// generic with RFC 3339 times).
	From, To time.Time
	// KeepCPUJobs keeps jobs that ask for no GPU; they are dropped by
	// default, as the Helios simulator does.
	KeepCPUJobs bool
}

func (o Options) inWindow(t time.Time) bool {
	if !o.From.IsZero() && t.Before(o.From) {
		return false
	}
	if !o.To.IsZero() && t.After(o.To) {
		return false
	}
	return true
}

// ParseError is a malformed row or field.
type ParseError struct {
	Source string
	Line   int
	Column int    // 1-based byte column; 0 when unknown
	Field  string // column or key name; empty for row-level errors
	Err    error
}

func (e *ParseError) Error() string {
	var b strings.Builder
	if e.Source != "" {
		b.WriteString(e.Source)
		b.WriteByte(':')
	}
	fmt.Fprintf(&b, "%d", e.Line)
	if e.Column > 0 {
		fmt.Fprintf(&b, ":%d", e.Column)
	}
	b.WriteString(": ")
	if e.Field != "" {
		b.WriteString(e.Field)
		b.WriteString(": ")
	}
	b.WriteString(e.Err.Error())
	return b.String()
}

func (e *ParseError) Unwrap() error { return e.Err }

// ErrEmpty is returned when a trace has a header but no job survives.
var ErrEmpty = errors.New("trace: no jobs")

// Format names a trace file format.
type Format string

// The formats Read understands.
const (
	FormatPhilly     Format = "philly"
	FormatHelios     Format = "helios"
	FormatOpenbPods  Format = "openb"
	FormatOpenbNodes Format = "openb-nodes"
	FormatCSV        Format = "csv"
	FormatJSONL      Format = "jsonl"
)

// Formats lists the job-trace formats Read accepts.
func Formats() []Format {
	return []Format{FormatPhilly, FormatHelios, FormatOpenbPods, FormatCSV, FormatJSONL}
}

// Detect guesses a format from the first line of a file.
func Detect(head []byte) (Format, error) {
	line, _, _ := bytes.Cut(head, []byte("\n"))
	line = bytes.TrimSpace(bytes.TrimPrefix(line, []byte("\xef\xbb\xbf")))
	if len(line) == 0 {
		return "", errors.New("empty first line: cannot tell the trace format")
	}
	if line[0] == '{' {
		return FormatJSONL, nil
	}
	cols := map[string]bool{}
	for _, c := range strings.Split(string(line), ",") {
		cols[strings.TrimSpace(c)] = true
	}
	switch {
	case cols["timestamp"] && cols["num_gpus"] && cols["duration"]:
		return FormatPhilly, nil
	case cols["submit_time"] && cols["gpu_num"] && cols["duration"]:
		return FormatHelios, nil
	case cols["num_gpu"] && cols["gpu_milli"] && cols["creation_time"]:
		return FormatOpenbPods, nil
	case cols["sn"] && cols["gpu"] && cols["model"]:
		return FormatOpenbNodes, nil
	case cols["submit"] && cols["duration"] && cols["gpus"]:
		return FormatCSV, nil
	}
	return "", fmt.Errorf("unknown trace header %q: expected Philly (timestamp,duration,num_gpus,...), Helios (submit_time,gpu_num,duration,...), openb (name,...,num_gpu,gpu_milli,...) or generic (submit,duration,gpus,...)", truncate(string(line), 120))
}

// Read reads a job trace of the given format; an empty format is detected
// from the first line. src names the input in error messages.
func Read(r io.Reader, src string, f Format, opt Options) (*Trace, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	if f == "" {
		head, err := br.Peek(4096)
		if err != nil && err != io.EOF && !errors.Is(err, bufio.ErrBufferFull) {
			return nil, fmt.Errorf("read %s: %w", src, err)
		}
		f, err = Detect(head)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", src, err)
		}
	}
	switch f {
	case FormatPhilly:
		return ReadPhilly(br, src, opt)
	case FormatHelios:
		return ReadHelios(br, src, opt)
	case FormatOpenbPods:
		return ReadOpenbPods(br, src, opt)
	case FormatCSV:
		return ReadCSV(br, src, opt)
	case FormatJSONL:
		return ReadJSONL(br, src, opt)
	case FormatOpenbNodes:
		return nil, fmt.Errorf("%s is a node list, not a job trace", src)
	}
	return nil, fmt.Errorf("unknown trace format %q (want one of %v)", f, Formats())
}

// finish sorts jobs by submit time (stable), makes times relative to the
// first job, and checks something is left. abs holds each job's absolute
// submit time; with wallClock they are Unix seconds and set t.Start.
func finish(t *Trace, abs []float64, wallClock bool) (*Trace, error) {
	idx := make([]int, len(t.Jobs))
	for i := range idx {
		idx[i] = i
	}
	slices.SortStableFunc(idx, func(a, b int) int {
		switch {
		case abs[a] < abs[b]:
			return -1
		case abs[a] > abs[b]:
			return 1
		}
		return 0
	})
	jobs := make([]Job, len(t.Jobs))
	for k, i := range idx {
		jobs[k] = t.Jobs[i]
		jobs[k].Submit = abs[i]
	}
	if len(jobs) == 0 {
		return nil, ErrEmpty
	}
	first := jobs[0].Submit
	for i := range jobs {
		jobs[i].Submit -= first
	}
	if wallClock {
		t.Start = time.Unix(0, 0).UTC().Add(time.Duration(first * float64(time.Second)))
	}
	t.Jobs = jobs
	return t, nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
