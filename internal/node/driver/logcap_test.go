package driver

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// startBounded starts sh -c script with its output kept in files of
// fileBytes, at most files of them (0: the defaults).
func startBounded(t *testing.T, s *Supervisor, script string, fileBytes int64, files int) (*Handle, string) {
	t.Helper()
	seq++
	dir := filepath.Join(t.TempDir(), "task")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	h, err := s.Start(Spec{Key: "j/1/" + strconv.Itoa(seq), Command: []string{"sh", "-c", script},
		Env: []string{"PATH=" + os.Getenv("PATH"), "X=42"}, Dir: dir, StateDir: dir, LogFileBytes: fileBytes, LogFiles: files})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	return h, dir
}

// seqOutput is what `seq 1 n` prints.
func seqOutput(n int) string {
	var b strings.Builder
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&b, "%d\n", i)
	}
	return b.String()
}

// readAll reads everything dir retains of stream, through OpenLog.
func readAll(t *testing.T, dir, stream string) string {
	t.Helper()
	r, err := OpenLog(dir, stream)
	if err != nil {
		t.Fatalf("OpenLog: %v", err)
	}
	defer r.Close()
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestFloodedLogKeepsItsNewestOutputWithinTheBound(t *testing.T) {
	s, _ := newSup(t)
	const n = 100000 // 588,895 bytes: over a hundred times the bound
	for _, c := range []struct {
		name      string
		fileBytes int64
		files     int
	}{
		{"3 files of 1 KiB", 1024, 3},
		{"one file of 4 KiB", 4096, 1},
		{"10 files of 333 bytes", 333, 10},
	} {
		t.Run(c.name, func(t *testing.T) {
			h, dir := startBounded(t, s, "seq 1 "+strconv.Itoa(n)+"; seq 1 5 >&2", c.fileBytes, c.files)
			if e := wait(t, h); e.Code != 0 {
				t.Fatalf("exit %+v", e)
			}
			// The copier splits at the bound, so there is no slack: at most
			// files × fileBytes, and the current file is never empty after
			// a rotation's worth of output.
			all, _ := filepath.Glob(filepath.Join(dir, "stdout.log*"))
			var names []string // the logs; their time indexes (logtimes.go) are rotated with them
			for _, name := range all {
				if !strings.HasSuffix(name, ".times") {
					names = append(names, name)
				} else if !slices.Contains(all, strings.TrimSuffix(name, ".times")) {
					t.Errorf("%s: the index of no retained file", name)
				}
			}
			var total int64
			for _, name := range names {
				fi, err := os.Stat(name)
				if err != nil {
					t.Fatal(err)
				}
				if fi.Size() > c.fileBytes {
					t.Errorf("%s: %d bytes, over %d", name, fi.Size(), c.fileBytes)
				}
				total += fi.Size()
			}
			if len(names) > c.files {
				t.Errorf("%d files %v; want at most %d", len(names), names, c.files)
			}
			if max := c.fileBytes * int64(c.files); total > max || total <= max-c.fileBytes {
				t.Errorf("%d bytes on disk; want (%d, %d]", total, max-c.fileBytes, max)
			}
			got, want := readAll(t, dir, "stdout"), seqOutput(n)
			if int64(len(got)) != total || !strings.HasSuffix(want, got) {
				t.Errorf("the retained log (%d bytes) is not the newest output: ...%q", len(got), got[max(0, len(got)-40):])
			}
			if got := readAll(t, dir, "stderr"); got != seqOutput(5) {
				t.Errorf("stderr = %q", got)
			}
		})
	}
}

// TestFollowAcrossRotations follows a log while the rank writes several
// rotations' worth between the follower's reads: the follower sees every
// line, in order, once.
func TestFollowAcrossRotations(t *testing.T) {
	s, _ := newSup(t)
	gates := t.TempDir()
	const steps, per = 6, 300 // ~1.3 KiB a step: five rotations of 256 bytes
	script := fmt.Sprintf(`i=1; step=1
while [ $step -le %d ]; do
	while [ ! -e %s/$step ]; do sleep 0.01; done
	seq $i $((i+%d-1)); i=$((i+%d)); step=$((step+1))
done`, steps, gates, per, per)
	// 40 files of 256 bytes hold more than a step: nothing is dropped
	// before the follower has read it.
	h, dir := startBounded(t, s, script, 256, 40)
	var r *LogReader
	for {
		var err error
		if r, err = OpenLog(dir, "stdout"); err == nil {
			break
		} else if !errors.Is(err, os.ErrNotExist) {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	defer r.Close()
	var got bytes.Buffer
	buf := make([]byte, 100) // small reads: the follower lags the rotations
	follow := func(until int) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for !strings.HasSuffix(got.String(), "\n"+strconv.Itoa(until)+"\n") {
			n, err := r.Read(buf)
			got.Write(buf[:n])
			if err == io.EOF {
				if more, err := r.Next(); err != nil {
					t.Fatal(err)
				} else if !more {
					if time.Now().After(deadline) {
						t.Fatalf("follower stuck after %d bytes", got.Len())
					}
					time.Sleep(2 * time.Millisecond)
				}
			} else if err != nil {
				t.Fatal(err)
			}
		}
	}
	for step := 1; step <= steps; step++ {
		if err := os.WriteFile(filepath.Join(gates, strconv.Itoa(step)), nil, 0o644); err != nil {
			t.Fatal(err)
		}
		follow(step * per)
	}
	wait(t, h)
	if want := seqOutput(steps * per); got.String() != want {
		t.Errorf("followed %d bytes; want %d (every line once, in order)", got.Len(), len(want))
	}
	if rotated, _ := filepath.Glob(filepath.Join(dir, "stdout.log.*")); len(rotated) < 2*steps {
		t.Errorf("only %d rotations: the test does not follow across several", len(rotated))
	}
}

// TestSupervisorDeathKeepsBoundingLogs kills the supervisor under a rank
// that writes without pause: the rank dies with it (its lease holder), and
// what it wrote stays within the bound, whole lines in order.
func TestSupervisorDeathKeepsBoundingLogs(t *testing.T) {
	s, dir := newSup(t)
	h, tdir := startBounded(t, s, "i=0; while :; do i=$((i+1)); echo $i; done", 1024, 3)
	waitFile(t, filepath.Join(tdir, "stdout.log.2"), "")
	killSupervisor(t, dir)
	if e := wait(t, h); e != unknownExit {
		t.Fatalf("exit = %+v; want %+v (the rank died with its supervisor)", e, unknownExit)
	}
	got := readAll(t, tdir, "stdout")
	if len(got) > 3*1024 {
		t.Fatalf("%d bytes retained; want at most 3072", len(got))
	}
	lines := strings.Split(strings.TrimSpace(got), "\n")
	for i := 2; i < len(lines)-1; i++ { // the first and the last may be cut
		a, _ := strconv.Atoi(lines[i-1])
		b, _ := strconv.Atoi(lines[i])
		if b != a+1 {
			t.Fatalf("line %q follows %q", lines[i], lines[i-1])
		}
	}
}

// TestUnwritableLogDropsOutputWithoutBlockingTheRank copies into a log
// that refuses every write (/dev/full, as a full disk): the writer is not
// held up beyond the pipe, and the failure is logged once.
func TestUnwritableLogDropsOutputWithoutBlockingTheRank(t *testing.T) {
	path := filepath.Join(t.TempDir(), "stdout.log")
	if err := os.Symlink("/dev/full", path); err != nil {
		t.Fatal(err)
	}
	sink, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer sink.Close()
	var log bytes.Buffer
	ls, w, err := newLogStream(path, 1<<20, 2, nil, int(sink.Fd()), &log)
	if err != nil {
		t.Fatal(err)
	}
	wf := os.NewFile(uintptr(w), "pipe")
	wrote := make(chan error, 1)
	go func() {
		// Sixteen times the pipe: it ends only if the copier drains.
		_, err := wf.Write(make([]byte, 1<<20))
		wf.Close()
		wrote <- err
	}()
	for !ls.pump(pumpBudget) {
		time.Sleep(time.Millisecond)
	}
	if err := <-wrote; err != nil {
		t.Fatalf("the writer: %v", err)
	}
	if n := strings.Count(log.String(), "dropping output"); n != 1 {
		t.Errorf("the supervisor's log says %d times that it drops output; want once:\n%s", n, log.String())
	}
}

// TestClosedStreamLeavesTheEpollSet: a rank that closes its stdout
// (exec >file) while it lives keeps the pipe's read end open as fd 3 or 4,
// so closing the copier's end alone would leave the pipe in the epoll set,
// reporting a hang-up on every wait: the copier would spin for the rank's
// whole life.
func TestClosedStreamLeavesTheEpollSet(t *testing.T) {
	sink, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer sink.Close()
	c, err := newCopier() // not run: the test waits on its epoll set itself
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(c.wake)
	defer unix.Close(c.epfd)
	ls, w, err := newLogStream(filepath.Join(t.TempDir(), "stdout.log"), 1<<20, 2, nil, int(sink.Fd()), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	rankHeld, err := unix.Dup(int(ls.key)) // the rank's fd 3
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(rankHeld)
	if err := c.add(ls); err != nil {
		t.Fatal(err)
	}
	unix.Write(w, []byte("hi\n"))
	unix.Close(w) // the rank's exec >file
	for !ls.pump(pumpBudget) {
	}
	evs := make([]unix.EpollEvent, 4)
	n, err := unix.EpollWait(c.epfd, evs, 0)
	if err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Errorf("the epoll set still reports %d event(s) (events %#x) for a closed stream: the copier would spin", n, evs[0].Events)
	}
}
