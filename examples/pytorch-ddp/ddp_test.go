package pytorchddp_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

const python = "/usr/bin/python3"

// tolerance bounds the relative difference between the final losses of an
// uninterrupted run and a killed-and-resumed one with the same world size.
// train.py trains in float64 on one thread with deterministic kernels and
// gloo reduces in a fixed order for a given world size, so the runs are
// expected to agree to the last bit; the slack covers a BLAS that rounds
// differently between processes.
const tolerance = 1e-9

func needTorch(t *testing.T) {
	t.Helper()
	if err := exec.Command(python, "-c", "import torch").Run(); err != nil {
		t.Skip("needs Debian's python3-torch: apt-get install python3-torch")
	}
}

func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	return port
}

type rank struct {
	cmd            *exec.Cmd
	stdout, stderr bytes.Buffer
}

// start launches world ranks of train.py the way gangway does: one process
// per rank, everything in the environment.
func start(t *testing.T, ctx context.Context, world int, args []string, ckpt, progress, resume string) []*rank {
	t.Helper()
	port := freePort(t)
	ranks := make([]*rank, world)
	for r := range world {
		rk := &rank{cmd: exec.CommandContext(ctx, python, append([]string{"train.py"}, args...)...)}
		rk.cmd.Env = append(os.Environ(),
			"RANK="+strconv.Itoa(r), "LOCAL_RANK="+strconv.Itoa(r),
			"WORLD_SIZE="+strconv.Itoa(world), "LOCAL_WORLD_SIZE="+strconv.Itoa(world),
			"NODE_RANK=0", "NNODES=1", "MASTER_ADDR=127.0.0.1", "MASTER_PORT="+port,
			"CUDA_VISIBLE_DEVICES=", "GANGWAY_JOB_ID=ddp-test", "GANGWAY_ATTEMPT=1",
			"GANGWAY_NODE_ADDR=127.0.0.1", "GANGWAY_CHECKPOINT_DIR="+ckpt,
			"GANGWAY_RESUME_FROM="+resume, "GANGWAY_PROGRESS_FILE="+progress,
			"OMP_NUM_THREADS=1",
		)
		rk.cmd.Stdout, rk.cmd.Stderr = &rk.stdout, &rk.stderr
		rk.cmd.WaitDelay = 5 * time.Second
		if err := rk.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		ranks[r] = rk
		t.Cleanup(func() { // a test that failed half-way leaves no process behind
			if rk.cmd.ProcessState == nil {
				rk.cmd.Process.Kill()
				rk.cmd.Wait()
			}
		})
	}
	return ranks
}

// wait waits for every rank and returns their exit errors.
func wait(ranks []*rank) []error {
	errs := make([]error, len(ranks))
	var wg sync.WaitGroup
	for i, rk := range ranks {
		wg.Go(func() { errs[i] = rk.cmd.Wait() })
	}
	wg.Wait()
	return errs
}

func mustSucceed(t *testing.T, ranks []*rank, errs []error) {
	t.Helper()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v\nstdout:\n%s\nstderr:\n%s", r, err, ranks[r].stdout.String(), ranks[r].stderr.String())
		}
	}
}

func finalLoss(t *testing.T, stdout string) float64 {
	t.Helper()
	for line := range strings.Lines(stdout) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "final_loss="); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("parse %q: %v", line, err)
			}
			return f
		}
	}
	t.Fatalf("no final_loss= line in:\n%s", stdout)
	return 0
}

// newestCommitted applies gangway's convention: the highest step-named
// directory that holds a COMMITTED marker.
func newestCommitted(root string) (dir string, step int, ok bool) {
	entries, _ := os.ReadDir(root)
	for _, e := range entries {
		s, err := strconv.Atoi(e.Name())
		if err != nil || strconv.Itoa(s) != e.Name() {
			continue
		}
		if _, err := os.Stat(filepath.Join(root, e.Name(), "COMMITTED")); err != nil {
			continue
		}
		if !ok || s > step {
			dir, step, ok = filepath.Join(root, e.Name()), s, true
		}
	}
	return dir, step, ok
}

type progressLine struct {
	Step   int     `json:"step"`
	Loss   float64 `json:"loss"`
	Tokens int     `json:"tokens"`
	Final  bool    `json:"final"`
}

func readProgress(t *testing.T, path string) []progressLine {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var lines []progressLine
	sc := bufio.NewScanner(bytes.NewReader(b))
	for n := 1; sc.Scan(); n++ {
		var l progressLine
		dec := json.NewDecoder(bytes.NewReader(sc.Bytes()))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&l); err != nil {
			t.Fatalf("%s line %d %q: %v", path, n, sc.Text(), err)
		}
		lines = append(lines, l)
	}
	return lines
}

func TestDDPKillAndResume(t *testing.T) {
	needTorch(t)
	const world, steps, batch = 2, 40, 64
	common := []string{"--steps", strconv.Itoa(steps), "--batch", strconv.Itoa(batch), "--checkpoint-every", "10", "--log-every", "10"}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	// 1. An uninterrupted run, and 2. the same job killed once a
	// checkpoint is committed; the two run side by side to halve the time
	// spent importing torch.
	fullCkpt := t.TempDir()
	fullProgress := filepath.Join(t.TempDir(), "progress.jsonl")
	full := start(t, ctx, world, common, fullCkpt, fullProgress, "")
	ckpt := t.TempDir()
	progress := filepath.Join(t.TempDir(), "progress.jsonl")
	ranks := start(t, ctx, world, append(common, "--step-delay", "100ms"), ckpt, progress, "")
	for {
		if _, _, ok := newestCommitted(ckpt); ok {
			break
		}
		if ctx.Err() != nil {
			t.Fatal("no checkpoint was committed")
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, rk := range ranks {
		if err := rk.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
	}
	for r, err := range wait(ranks) {
		var exit *exec.ExitError
		if !errors.As(err, &exit) {
			t.Fatalf("rank %d after SIGTERM: %v, want a non-zero exit\nstdout:\n%s", r, err, ranks[r].stdout.String())
		}
	}
	if strings.Contains(ranks[0].stdout.String(), "final_loss=") {
		t.Fatal("the killed run finished before it was killed; nothing was tested")
	}

	mustSucceed(t, full, wait(full))
	want := finalLoss(t, full[0].stdout.String())
	lines := readProgress(t, fullProgress)
	if len(lines) != steps || lines[0].Step != 1 || !lines[steps-1].Final || lines[steps-1].Loss != want || lines[steps-1].Tokens != steps*batch {
		t.Fatalf("progress of the full run: %d lines, first %+v, last %+v", len(lines), lines[0], lines[len(lines)-1])
	}
	if !(lines[steps-1].Loss < lines[0].Loss) {
		t.Fatalf("loss did not fall: %v → %v", lines[0].Loss, lines[steps-1].Loss)
	}
	if _, step, ok := newestCommitted(fullCkpt); !ok || step != steps {
		t.Fatalf("full run's newest committed checkpoint: step %d ok %v, want %d", step, ok, steps)
	}

	dir, step, ok := newestCommitted(ckpt)
	if !ok || step >= steps {
		t.Fatalf("killed run's newest committed checkpoint: step %d ok %v", step, ok)
	}
	before := len(readProgress(t, progress))

	// 3. The next attempt resumes from it.
	ranks = start(t, ctx, world, common, ckpt, progress, dir)
	mustSucceed(t, ranks, wait(ranks))
	for r, rk := range ranks {
		if want := fmt.Sprintf("resumed from step %d", step); !strings.Contains(rk.stdout.String(), want) {
			t.Errorf("rank %d stdout lacks %q:\n%s", r, want, rk.stdout.String())
		}
	}
	got := finalLoss(t, ranks[0].stdout.String())
	t.Logf("uninterrupted final loss %v; killed after step %d and resumed: %v", want, step, got)
	if d := (got - want) / want; d > tolerance || d < -tolerance {
		t.Fatalf("resumed final loss %v differs from the uninterrupted %v by %.3g (> %g)", got, want, d, tolerance)
	}
	resumed := readProgress(t, progress)[before:]
	if len(resumed) != steps-step || resumed[0].Step != step+1 || !resumed[len(resumed)-1].Final {
		t.Fatalf("resumed progress: %d lines from %+v to %+v; want steps %d..%d, the last final",
			len(resumed), resumed[0], resumed[len(resumed)-1], step+1, steps)
	}
}
