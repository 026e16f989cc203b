package chaos

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Events of a Record.
const (
	// EvStart: a rank's wrapper is about to start the rank's command.
	EvStart = "start"
	// EvExit: the command ended; the wrapper is about to exit.
	EvExit = "exit"
	// EvGone: written by the harness, not by a rank: the wrapper's process
	// disappeared without an exit record (SIGKILL to its process group).
	EvGone = "gone"
)

// Record is one line of the ranks' shared log (JSON lines). Ranks write
// start and exit records themselves, through the chaos-rank wrapper; the
// harness adds gone records for ranks that died too hard to write one.
type Record struct {
	Ev string `json:"ev"`
	// Time is the wall clock when the record was written (ns precision).
	Time time.Time `json:"t"`
	// Host is the node the rank ran on ($GANGWAY_NODE).
	Host string `json:"host,omitempty"`
	// PID is the wrapper's pid: the rank's process, leader of its group.
	PID int `json:"pid"`
	// Job, Name, Attempt and Rank say which rank this is
	// ($GANGWAY_JOB_ID, $GANGWAY_JOB_NAME, $GANGWAY_ATTEMPT, $RANK).
	Job     string `json:"job,omitempty"`
	Name    string `json:"name,omitempty"`
	Attempt int    `json:"attempt,omitempty"`
	Rank    int    `json:"rank"`

	// Exit records: the command's exit code (128+N when signal N killed
	// it, Signal naming it), the "final_loss=" it printed if any, and the
	// signals the wrapper itself received meanwhile.
	Code      *int     `json:"code,omitempty"`
	Signal    string   `json:"signal,omitempty"`
	FinalLoss *float64 `json:"final_loss,omitempty"`
	Got       []string `json:"got,omitempty"`

	// AliveUntil, on gone records: the last time the harness saw the
	// process alive. It died after that and before Time.
	AliveUntil time.Time `json:"alive_until,omitzero"`
}

// key names one rank of one attempt.
func (r *Record) key() rankKey { return rankKey{r.Job, r.Attempt, r.Rank} }

type rankKey struct {
	job           string
	attempt, rank int
}

func (k rankKey) String() string { return fmt.Sprintf("%s/%d/%d", k.job, k.attempt, k.rank) }

// appendRecord appends r to the log at path as one line, in one write to a
// file opened O_APPEND, so that lines of concurrent writers never mix.
func appendRecord(path string, r Record) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o666)
	if err != nil {
		return err
	}
	_, err = f.Write(append(b, '\n'))
	return errors.Join(err, f.Close())
}

// ReadRecords reads a ranks' log. A last line without its newline (a
// writer caught mid-write) is left out; a malformed line is an error.
func ReadRecords(path string) ([]Record, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	recs, _, err := parseRecords(b)
	return recs, err
}

// parseRecords decodes the complete lines of b and returns how many bytes
// they took.
func parseRecords(b []byte) ([]Record, int, error) {
	var out []Record
	used := 0
	for {
		i := bytes.IndexByte(b[used:], '\n')
		if i < 0 {
			return out, used, nil
		}
		line := b[used : used+i]
		used += i + 1
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		var r Record
		if err := json.Unmarshal(line, &r); err != nil {
			return out, used, fmt.Errorf("ranks' log: %q: %w", line, err)
		}
		out = append(out, r)
	}
}

// RankMain is the hidden `gangway chaos-rank --log FILE -- CMD [ARG...]`
// that wraps every rank the harness submits: it appends a start record to
// FILE, runs CMD as its child (in the wrapper's process group, the rank's,
// so a signal the agent sends the rank reaches both), passes CMD's output
// through, and
// appends an exit record with CMD's exit status and the "final_loss=" line
// the example trainer prints. It exits with CMD's status. A SIGKILL to the
// group leaves no exit record; the harness sees the process go instead.
//
// Signals the wrapper gets are recorded, not forwarded: the agent signals
// the whole process group, so CMD has them already.
func RankMain(args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	var logPath string
	for len(args) > 0 && args[0] != "--" {
		switch {
		case args[0] == "--log" && len(args) > 1:
			logPath, args = args[1], args[2:]
		case strings.HasPrefix(args[0], "--log="):
			logPath, args = strings.TrimPrefix(args[0], "--log="), args[1:]
		default:
			fmt.Fprintf(stderr, "chaos-rank: unexpected %q; usage: gangway chaos-rank --log FILE -- CMD [ARG...]\n", args[0])
			return 2
		}
	}
	if len(args) < 2 || logPath == "" {
		fmt.Fprintln(stderr, "chaos-rank: usage: gangway chaos-rank --log FILE -- CMD [ARG...]")
		return 2
	}
	cmdline := args[1:]
	num := func(name string) int { n, _ := strconv.Atoi(getenv(name)); return n }
	base := Record{
		Host: getenv("GANGWAY_NODE"), PID: os.Getpid(), Job: getenv("GANGWAY_JOB_ID"), Name: getenv("GANGWAY_JOB_NAME"),
		Attempt: num("GANGWAY_ATTEMPT"), Rank: num("RANK"),
	}

	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2)
	defer signal.Stop(sigs)
	var (
		gotMu sync.Mutex // guards got
		got   []string
	)
	sigDone := make(chan struct{})
	go func() {
		defer close(sigDone)
		for s := range sigs {
			gotMu.Lock()
			got = append(got, signalName(s.(syscall.Signal)))
			gotMu.Unlock()
		}
	}()

	start := base
	start.Ev, start.Time = EvStart, time.Now()
	if err := appendRecord(logPath, start); err != nil {
		// A rank the harness cannot see must not run.
		fmt.Fprintf(stderr, "chaos-rank: record the start: %v\n", err)
		return 2
	}
	cmd := exec.Command(cmdline[0], cmdline[1:]...)
	// The wrapper is the rank the supervisor started, and dies with it
	// (its lease holder); the real command must not outlive it either.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	scan := &lossScanner{w: stdout}
	cmd.Stdout, cmd.Stderr = scan, stderr
	cmd.WaitDelay = 2 * time.Second // a grandchild holding the pipes open must not hold the exit up
	code, sigName := 0, ""
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		ws, _ := ee.Sys().(syscall.WaitStatus)
		if ws.Signaled() {
			code, sigName = 128+int(ws.Signal()), signalName(ws.Signal())
		} else {
			code = ee.ExitCode()
		}
	default:
		fmt.Fprintf(stderr, "chaos-rank: %v\n", err)
		code = 127
	}
	scan.flush()
	signal.Stop(sigs)
	close(sigs)
	<-sigDone
	exit := base
	exit.Ev, exit.Time, exit.Code, exit.Signal, exit.FinalLoss, exit.Got = EvExit, time.Now(), &code, sigName, scan.loss, got
	if err := appendRecord(logPath, exit); err != nil {
		fmt.Fprintf(stderr, "chaos-rank: record the exit: %v\n", err)
	}
	return code
}

func signalName(s syscall.Signal) string {
	if n := unix.SignalName(s); n != "" {
		return n
	}
	return s.String()
}

// lossScanner passes output through and keeps the value of the last
// "final_loss=" line.
type lossScanner struct {
	w    io.Writer
	line []byte // an unfinished line
	loss *float64
}

func (s *lossScanner) Write(p []byte) (int, error) {
	n, err := s.w.Write(p)
	s.line = append(s.line, p...)
	for {
		i := bytes.IndexByte(s.line, '\n')
		if i < 0 {
			break
		}
		s.scan(s.line[:i])
		s.line = s.line[i+1:]
	}
	if len(s.line) > 4096 {
		s.line = s.line[:0] // not a line of interest
	}
	return n, err
}

func (s *lossScanner) flush() {
	s.scan(s.line)
	s.line = nil
}

func (s *lossScanner) scan(line []byte) {
	if v, ok := strings.CutPrefix(strings.TrimSpace(string(line)), "final_loss="); ok {
		if f, err := strconv.ParseFloat(v, 64); err == nil {
			s.loss = &f
		}
	}
}

// lineReader reads the records appended to a log since the last call.
type lineReader struct {
	path string
	off  int64
	rest []byte
}

// next returns the records completed since the last call.
func (l *lineReader) next() ([]Record, error) {
	f, err := os.Open(l.path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if _, err := f.Seek(l.off, io.SeekStart); err != nil {
		return nil, err
	}
	b, err := io.ReadAll(bufio.NewReader(f))
	if err != nil {
		return nil, err
	}
	l.off += int64(len(b))
	l.rest = append(l.rest, b...)
	recs, used, err := parseRecords(l.rest)
	l.rest = l.rest[used:]
	return recs, err
}
