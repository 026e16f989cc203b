package trainer

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestWorldSizesAgree(t *testing.T) {
	t.Parallel()
	// Batch 30 does not divide by 4: shards differ in size, and the global
	// mean must still be the same.
	args := withArgs("--steps", "40")
	want := finalLoss(t, runJob(context.Background(), t, 1, args, nil)[0].stdout)
	if math.IsNaN(want) || want <= 0 {
		t.Fatalf("single-rank final loss %v", want)
	}
	for _, world := range []int{2, 3, 4} {
		t.Run(fmt.Sprintf("W=%d", world), func(t *testing.T) {
			t.Parallel()
			res := runJob(context.Background(), t, world, args, nil)
			mustSucceed(t, res)
			got := finalLoss(t, res[0].stdout)
			d := relDiff(got, want)
			t.Logf("W=%d final loss %v, W=1 %v, relative difference %.3g", world, got, want, d)
			if d > WorldSizeTolerance {
				t.Fatalf("W=%d final loss %v differs from W=1's %v by %.3g (> WorldSizeTolerance %g)", world, got, want, d, WorldSizeTolerance)
			}
			for r, rr := range res[1:] {
				if strings.Contains(rr.stdout, "final_loss=") {
					t.Errorf("rank %d printed final_loss; only rank 0 reports", r+1)
				}
			}
		})
	}
}

func TestTrainingLowersTheLoss(t *testing.T) {
	t.Parallel()
	progress := filepath.Join(t.TempDir(), "progress.jsonl")
	mustSucceed(t, runJob(context.Background(), t, 1, withArgs("--steps", "60"), jobEnv("", progress, "")))
	lines := readProgress(t, progress)
	first, last := *lines[0].Loss, *lines[len(lines)-1].Loss
	// The labels are linear in the inputs plus noise: an MLP learns a good
	// part of them in 60 steps. ln(4) ≈ 1.39 is chance.
	if !(last < 0.75*first) {
		t.Fatalf("loss went from %v to %v; training does not learn", first, last)
	}
}

func TestResumeMatchesUninterruptedRun(t *testing.T) {
	t.Parallel()
	const world = 2
	args := withArgs("--steps", "40", "--checkpoint-every", "10")
	want := finalLoss(t, runJob(context.Background(), t, world, args, nil)[0].stdout)

	t.Run("stopped early", func(t *testing.T) {
		t.Parallel()
		ckpt := t.TempDir()
		// The first attempt is told to stop at step 20: a clean "kill".
		mustSucceed(t, runJob(context.Background(), t, world, withArgs("--steps", "20", "--checkpoint-every", "10"), jobEnv(ckpt, "", "")))
		dir, step, ok, err := NewestCommitted(ckpt)
		must(t, err)
		if !ok || step != 20 {
			t.Fatalf("newest committed checkpoint: step %d ok %v, want 20", step, ok)
		}
		res := runJob(context.Background(), t, world, args, jobEnv(ckpt, "", dir))
		mustSucceed(t, res)
		if !strings.Contains(res[0].stdout, "resumed from step 20") {
			t.Errorf("rank 0 stdout does not say where it resumed:\n%s", res[0].stdout)
		}
		// Tolerance is the contract; in fact the runs are bitwise equal.
		if got := finalLoss(t, res[0].stdout); got != want || relDiff(got, want) > Tolerance {
			t.Fatalf("resumed final loss %v, uninterrupted %v", got, want)
		}
	})

	t.Run("cancelled mid-run", func(t *testing.T) {
		t.Parallel()
		ckpt := t.TempDir()
		progress := filepath.Join(t.TempDir(), "progress.jsonl")
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		watched := make(chan struct{})
		go func() { // the "node failure": cancel every rank once step 10 is committed
			defer close(watched)
			for ctx.Err() == nil {
				if _, step, ok, _ := NewestCommitted(ckpt); ok && step >= 10 {
					cancel()
					return
				}
				time.Sleep(time.Millisecond)
			}
		}()
		res := runJob(ctx, t, world, withArgs("--steps", "40", "--checkpoint-every", "10", "--step-delay", "3ms"), jobEnv(ckpt, progress, ""))
		cancel()
		<-watched
		for r, rr := range res {
			if rr.code != ExitFailed {
				t.Fatalf("rank %d of the killed run exited %d, want %d\nstderr: %s", r, rr.code, ExitFailed, rr.stderr)
			}
			if !strings.Contains(rr.stderr, "context canceled") {
				t.Errorf("rank %d stderr does not say it was stopped: %s", r, rr.stderr)
			}
		}
		dir, step, ok, err := NewestCommitted(ckpt)
		must(t, err)
		if !ok || step >= 40 {
			t.Fatalf("newest committed checkpoint: step %d ok %v; want one before the end", step, ok)
		}
		before := len(readProgress(t, progress))
		res = runJob(context.Background(), t, world, args, jobEnv(ckpt, progress, dir))
		mustSucceed(t, res)
		if want := fmt.Sprintf("resumed from step %d", step); !strings.Contains(res[0].stdout, want) {
			t.Errorf("rank 0 stdout lacks %q:\n%s", want, res[0].stdout)
		}
		// Tolerance is the contract; in fact the runs are bitwise equal.
		if got := finalLoss(t, res[0].stdout); got != want || relDiff(got, want) > Tolerance {
			t.Fatalf("resumed final loss %v, uninterrupted %v", got, want)
		}
		// The resumed attempt appends lines that continue from the
		// checkpoint, ending with the final one.
		lines := readProgress(t, progress)[before:]
		if lines[0].Step != step+1 || lines[len(lines)-1].Step != 40 || !lines[len(lines)-1].Final {
			t.Fatalf("resumed progress runs from step %d to %d (final %v), want %d to 40, final",
				lines[0].Step, lines[len(lines)-1].Step, lines[len(lines)-1].Final, step+1)
		}
	})
}

func TestResumeFromTheFinalCheckpoint(t *testing.T) {
	t.Parallel()
	ckpt := t.TempDir()
	res := runJob(context.Background(), t, 1, withArgs("--steps", "5"), jobEnv(ckpt, "", ""))
	mustSucceed(t, res)
	want := finalLoss(t, res[0].stdout)
	progress := filepath.Join(t.TempDir(), "progress.jsonl")
	res = runJob(context.Background(), t, 1, withArgs("--steps", "5"), jobEnv(ckpt, progress, stepDir(ckpt, 5)))
	mustSucceed(t, res)
	if got := finalLoss(t, res[0].stdout); got != want {
		t.Fatalf("final loss %v, want %v", got, want)
	}
	if diff := cmp.Diff([]progressLine{{Step: 5, Loss: &want, Tokens: 150, Final: true}}, readProgress(t, progress)); diff != "" {
		t.Fatalf("progress (-want +got):\n%s", diff)
	}
}

func TestUncommittedCheckpointsAreIgnored(t *testing.T) {
	t.Parallel()
	ckpt := t.TempDir()
	mustSucceed(t, runJob(context.Background(), t, 1, withArgs("--steps", "20", "--checkpoint-every", "10"), jobEnv(ckpt, "", "")))
	// A writer died while writing step 30: data there, no marker.
	must(t, os.CopyFS(stepDir(ckpt, 30), os.DirFS(stepDir(ckpt, 20))))
	must(t, os.Remove(filepath.Join(stepDir(ckpt, 30), CommittedMarker)))
	// Names that are not plain steps are not checkpoints.
	must(t, os.CopyFS(filepath.Join(ckpt, "040"), os.DirFS(stepDir(ckpt, 20))))
	must(t, os.CopyFS(filepath.Join(ckpt, "latest"), os.DirFS(stepDir(ckpt, 20))))

	dir, step, ok, err := NewestCommitted(ckpt)
	must(t, err)
	if diff := cmp.Diff(struct {
		Dir  string
		Step int
		OK   bool
	}{stepDir(ckpt, 20), 20, true}, struct {
		Dir  string
		Step int
		OK   bool
	}{dir, step, ok}); diff != "" {
		t.Fatalf("NewestCommitted (-want +got):\n%s", diff)
	}

	t.Run("resume refuses an uncommitted directory", func(t *testing.T) {
		res := runJob(context.Background(), t, 1, withArgs("--steps", "40"), jobEnv(ckpt, "", stepDir(ckpt, 30)))
		if res[0].code != ExitFailed || !strings.Contains(res[0].stderr, "never committed") {
			t.Fatalf("exit %d, stderr %q; want %d and a refusal", res[0].code, res[0].stderr, ExitFailed)
		}
		if strings.Contains(res[0].stdout, "step ") {
			t.Fatalf("trained anyway:\n%s", res[0].stdout)
		}
	})

	t.Run("a stale uncommitted directory is rewritten", func(t *testing.T) {
		must(t, os.WriteFile(filepath.Join(stepDir(ckpt, 30), "junk"), []byte("x"), 0o644))
		mustSucceed(t, runJob(context.Background(), t, 1, withArgs("--steps", "30", "--checkpoint-every", "10"), jobEnv(ckpt, "", stepDir(ckpt, 20))))
		s, err := readCheckpoint(stepDir(ckpt, 30))
		must(t, err)
		if s.Step != 30 {
			t.Fatalf("checkpoint 30 holds step %d", s.Step)
		}
		if _, err := os.Stat(filepath.Join(stepDir(ckpt, 30), "junk")); err == nil {
			t.Fatal("the uncommitted directory's leftovers survived")
		}
	})

	t.Run("no checkpoints", func(t *testing.T) {
		_, _, ok, err := NewestCommitted(filepath.Join(t.TempDir(), "absent"))
		if ok || err != nil {
			t.Fatalf("missing root: ok %v err %v", ok, err)
		}
	})
}

func TestProgressFile(t *testing.T) {
	t.Parallel()
	progress := filepath.Join(t.TempDir(), "progress.jsonl")
	res := runJob(context.Background(), t, 2, withArgs("--steps", "25"), jobEnv("", progress, ""))
	mustSucceed(t, res)
	// Both ranks write to the one file here (each rank has its own under
	// gangway): rank 0 a line per step with the loss, rank 1 its timing
	// every --timing-every (10) steps.
	var lines, timing []progressLine
	for _, l := range readProgress(t, progress) {
		if l.Loss != nil {
			lines = append(lines, l)
		} else {
			timing = append(timing, l)
		}
	}
	if len(lines) != 25 {
		t.Fatalf("%d progress lines with a loss, want 25 (rank 0, one per step)", len(lines))
	}
	for i, l := range lines {
		if l.Step != i+1 || l.Tokens != int64(30*(i+1)) || l.Final != (i == 24) || !(*l.Loss > 0) || !(l.ComputeS > 0) {
			t.Errorf("line %d: %+v", i+1, l)
		}
	}
	if got := finalLoss(t, res[0].stdout); *lines[24].Loss != got {
		t.Errorf("final progress loss %v, final_loss= %v", *lines[24].Loss, got)
	}
	if len(timing) != 2 || timing[0].Step != 10 || timing[1].Step != 20 || !(timing[0].ComputeS > 0) || timing[0].Tokens != 0 {
		t.Errorf("rank 1's timing lines: %+v; want steps 10 and 20 with computeS alone", timing)
	}
}

func readProgress(t *testing.T, path string) []progressLine {
	t.Helper()
	var lines []progressLine
	sc := bufio.NewScanner(strings.NewReader(mustRead(t, path)))
	for n := 1; sc.Scan(); n++ {
		dec := json.NewDecoder(bytes.NewReader(sc.Bytes()))
		dec.DisallowUnknownFields()
		var l progressLine
		if err := dec.Decode(&l); err != nil {
			t.Fatalf("%s line %d %q: %v", path, n, sc.Text(), err)
		}
		lines = append(lines, l)
	}
	if len(lines) == 0 {
		t.Fatalf("%s is empty", path)
	}
	return lines
}

// fakeRank1 joins a 2-rank job as rank 1 through the real rendezvous and
// then misbehaves with its ring.
func fakeRank1(ctx context.Context, port string) (*ring, error) {
	l, err := parseLaunch(launchEnv(1, 2, port, nil))
	if err != nil {
		return nil, err
	}
	return rendezvous(ctx, l, 10*time.Second, time.Minute)
}

func TestPeerFailureEndsTheRank(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		peer       func(*ring) // what rank 1 does once the ring is up
		wantStderr string
	}{
		{name: "peer hangs", peer: func(*ring) {}, wantStderr: "--io-timeout"},
		{name: "peer exits", peer: func(r *ring) { r.close() }, wantStderr: "rank 1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			port := freePort(t)
			var wg sync.WaitGroup
			var peer *ring
			var peerErr error
			wg.Go(func() {
				peer, peerErr = fakeRank1(context.Background(), port)
				if peerErr == nil {
					tt.peer(peer)
				}
			})
			var out, errb bytes.Buffer
			code := Main(context.Background(), withArgs("--steps", "1000", "--io-timeout", "300ms"),
				launchEnv(0, 2, port, nil), &out, &errb)
			wg.Wait()
			if peerErr != nil {
				t.Fatal(peerErr)
			}
			peer.close()
			if code != ExitFailed || !strings.Contains(errb.String(), tt.wantStderr) {
				t.Fatalf("exit %d, stderr %q; want %d mentioning %q", code, errb.String(), ExitFailed, tt.wantStderr)
			}
			if !strings.Contains(errb.String(), "step 1:") {
				t.Errorf("stderr does not name the failed step: %q", errb.String())
			}
		})
	}
}

func TestRendezvous(t *testing.T) {
	t.Parallel()
	t.Run("missing ranks time out", func(t *testing.T) {
		t.Parallel()
		var out, errb bytes.Buffer
		code := Main(context.Background(), withArgs("--rendezvous-timeout", "200ms"), launchEnv(0, 3, freePort(t), nil), &out, &errb)
		if code != ExitFailed || !strings.Contains(errb.String(), "still waiting for ranks [1 2]") || !strings.Contains(errb.String(), "--rendezvous-timeout") {
			t.Fatalf("exit %d, stderr %q", code, errb.String())
		}
	})
	t.Run("rank 0 never comes", func(t *testing.T) {
		t.Parallel()
		var out, errb bytes.Buffer
		code := Main(context.Background(), withArgs("--rendezvous-timeout", "200ms"), launchEnv(1, 2, freePort(t), nil), &out, &errb)
		if code != ExitFailed || !strings.Contains(errb.String(), "reach rank 0 at 127.0.0.1:") {
			t.Fatalf("exit %d, stderr %q", code, errb.String())
		}
	})
	t.Run("ranks start before rank 0", func(t *testing.T) {
		t.Parallel()
		port := freePort(t)
		results := make([]rankResult, 3)
		var wg sync.WaitGroup
		for _, r := range []int{2, 1, 0} {
			wg.Go(func() {
				var out, errb bytes.Buffer
				code := Main(context.Background(), withArgs("--steps", "3"), launchEnv(r, 3, port, nil), &out, &errb)
				results[r] = rankResult{code, out.String(), errb.String()}
			})
			if r != 0 {
				// Let the others fail to connect a few times first.
				waitForDialAttempt(t, port)
			}
		}
		wg.Wait()
		mustSucceed(t, results)
	})
	t.Run("a dead end on the master port is retried", func(t *testing.T) {
		t.Parallel()
		// Something that hangs up without a ring order (a dying rank 0 of
		// an earlier attempt, say) holds the port until rank 1 has tried it.
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		must(t, err)
		_, port, _ := net.SplitHostPort(ln.Addr().String())
		results := make([]rankResult, 2)
		var wg sync.WaitGroup
		run := func(r int) {
			var out, errb bytes.Buffer
			code := Main(context.Background(), withArgs("--steps", "3"), launchEnv(r, 2, port, nil), &out, &errb)
			results[r] = rankResult{code, out.String(), errb.String()}
		}
		wg.Go(func() { run(1) })
		c, err := ln.Accept()
		must(t, err)
		c.Close()
		ln.Close()
		wg.Go(func() { run(0) })
		wg.Wait()
		mustSucceed(t, results)
	})
	t.Run("a rank from an earlier attempt is refused", func(t *testing.T) {
		t.Parallel()
		port := freePort(t)
		results := make([]rankResult, 2)
		var wg sync.WaitGroup
		for r, attempt := range []string{"2", "1"} {
			wg.Go(func() {
				var out, errb bytes.Buffer
				code := Main(context.Background(), withArgs("--rendezvous-timeout", "2s"),
					launchEnv(r, 2, port, map[string]string{"GANGWAY_ATTEMPT": attempt}), &out, &errb)
				results[r] = rankResult{code, out.String(), errb.String()}
			})
		}
		wg.Wait()
		if results[1].code != ExitFailed || !strings.Contains(results[1].stderr, "from attempt 1, this is attempt 2") {
			t.Errorf("stale rank: exit %d, stderr %q", results[1].code, results[1].stderr)
		}
		if results[0].code != ExitFailed || !strings.Contains(results[0].stderr, "still waiting for ranks [1]") {
			t.Errorf("rank 0: exit %d, stderr %q", results[0].code, results[0].stderr)
		}
	})
}

// waitForDialAttempt gives the ranks already started time to try the
// master port and fail, and checks that nothing listens there yet. It only
// orders the test's starts; nothing is timed.
func waitForDialAttempt(t *testing.T, port string) {
	t.Helper()
	time.Sleep(50 * time.Millisecond)
	if c, err := net.Dial("tcp", "127.0.0.1:"+port); err == nil {
		c.Close()
		t.Fatal("something already listens on the master port")
	}
}

func TestSIGTERMStopsPromptly(t *testing.T) {
	t.Parallel()
	// Cancellation (what main does on SIGTERM) must end a rank blocked in
	// an all-reduce whose peer is alive but slow, long before --io-timeout.
	port := freePort(t)
	ctx, cancel := context.WithCancelCause(context.Background())
	var wg sync.WaitGroup
	var peer *ring
	wg.Go(func() {
		var err error
		if peer, err = fakeRank1(context.Background(), port); err == nil {
			cancel(fmt.Errorf("received terminated")) // rank 0 is now blocked waiting for rank 1's data
		}
	})
	var out, errb bytes.Buffer
	code := Main(ctx, withArgs("--io-timeout", "1h"), launchEnv(0, 2, port, nil), &out, &errb)
	wg.Wait()
	if peer != nil {
		peer.close()
	}
	if code != ExitFailed || !strings.Contains(errb.String(), "received terminated") {
		t.Fatalf("exit %d, stderr %q", code, errb.String())
	}
}

// TestSIGUSR1WritesACheckpoint sends a real SIGUSR1 to the test process. It
// is not parallel, so no other Main sees the signal.
func TestSIGUSR1WritesACheckpoint(t *testing.T) {
	ckpt := t.TempDir()
	progress := filepath.Join(t.TempDir(), "progress.jsonl")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan rankResult)
	go func() {
		var out, errb bytes.Buffer
		code := Main(ctx, withArgs("--steps", "100000", "--checkpoint-every", "0", "--step-delay", "1ms"),
			launchEnv(0, 1, "", jobEnv(ckpt, progress, "")), &out, &errb)
		done <- rankResult{code, out.String(), errb.String()}
	}()
	// Main subscribes to SIGUSR1 before its first step, so once a progress
	// line exists the signal is safe to send.
	for {
		if b, err := os.ReadFile(progress); err == nil && len(b) > 0 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	must(t, syscall.Kill(os.Getpid(), syscall.SIGUSR1))
	var step int
	for {
		_, s, ok, err := NewestCommitted(ckpt)
		must(t, err)
		if ok {
			step = s
			break
		}
		time.Sleep(time.Millisecond)
	}
	cancel()
	res := <-done
	if res.code != ExitFailed {
		t.Fatalf("exit %d after cancel", res.code)
	}
	if step < 1 || step >= 100000 {
		t.Fatalf("checkpoint at step %d", step)
	}
	if want := fmt.Sprintf("checkpoint step %d committed", step); !strings.Contains(res.stdout, want) {
		t.Fatalf("stdout lacks %q:\n%s", want, res.stdout)
	}
}

func TestBadInput(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		args       []string
		env        map[string]string
		world      int
		wantStderr string
	}{
		{name: "zero steps", args: []string{"--steps", "0"}, wantStderr: "--steps must be positive, got 0"},
		{name: "not a number", args: []string{"--steps", "many"}, wantStderr: `invalid value "many" for flag -steps`},
		{name: "unknown flag", args: []string{"--epochs", "3"}, wantStderr: "flag provided but not defined: -epochs"},
		{name: "positional", args: []string{"train.yaml"}, wantStderr: `unexpected argument "train.yaml"`},
		{name: "negative lr", args: []string{"--lr", "-1"}, wantStderr: "--lr must be in (0, 10], got -1"},
		{name: "momentum 1", args: []string{"--momentum", "1"}, wantStderr: "--momentum must be in [0, 1)"},
		{name: "negative delay", args: []string{"--step-delay", "-1s"}, wantStderr: "--step-delay must be >= 0"},
		{name: "zero io timeout", args: []string{"--io-timeout", "0s"}, wantStderr: "--io-timeout must be positive"},
		{name: "batch below world size", args: []string{"--batch", "1"}, world: 2, wantStderr: "--batch 1 is smaller than WORLD_SIZE=2"},
		{name: "rank past world", env: map[string]string{"RANK": "2"}, world: 2, wantStderr: "RANK=2 is not below WORLD_SIZE=2"},
		{name: "bad rank", env: map[string]string{"RANK": "one"}, world: 2, wantStderr: `RANK="one": want an integer >= 0`},
		{name: "no master addr", env: map[string]string{"MASTER_ADDR": ""}, world: 2, wantStderr: "MASTER_ADDR is empty"},
		{name: "bad master port", env: map[string]string{"MASTER_PORT": "99999"}, world: 2, wantStderr: `MASTER_PORT="99999"`},
		{name: "node addr is a name", env: map[string]string{"GANGWAY_NODE_ADDR": "node-1"}, world: 2, wantStderr: `GANGWAY_NODE_ADDR="node-1"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			world := max(tt.world, 1)
			var out, errb bytes.Buffer
			code := Main(context.Background(), tt.args, launchEnv(0, world, "29500", tt.env), &out, &errb)
			if code != ExitUsage {
				t.Fatalf("exit %d, want %d; stderr %q", code, ExitUsage, errb.String())
			}
			if !strings.Contains(errb.String(), tt.wantStderr) {
				t.Fatalf("stderr %q lacks %q", errb.String(), tt.wantStderr)
			}
		})
	}
}

func TestHelpExitsZero(t *testing.T) {
	t.Parallel()
	var out, errb bytes.Buffer
	if code := Main(context.Background(), []string{"-h"}, launchEnv(0, 1, "", nil), &out, &errb); code != ExitOK {
		t.Fatalf("exit %d", code)
	}
	for _, flag := range []string{"-steps", "-batch", "-lr", "-seed", "-checkpoint-every", "-step-delay", "-rendezvous-timeout", "-io-timeout"} {
		if !strings.Contains(errb.String(), flag) {
			t.Errorf("usage lacks %s:\n%s", flag, errb.String())
		}
	}
}

// TestSlowFile: a rank whose node the --slow-file names works --slow-by
// longer per step, and its progress lines say so; one on another node
// does not.
func TestSlowFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	slow := filepath.Join(dir, "slow")
	must(t, os.WriteFile(slow, []byte("n2\nn1\n"), 0o644))
	for _, node := range []string{"n1", "n3"} {
		progress := filepath.Join(dir, node+".jsonl")
		env := jobEnv("", progress, "")
		env["GANGWAY_NODE"] = node
		mustSucceed(t, runJob(context.Background(), t, 1, withArgs("--steps", "10", "--slow-file", slow, "--slow-by", "20ms"), env))
		for _, l := range readProgress(t, progress) {
			if got := l.ComputeS >= 0.02; got != (node == "n1") {
				t.Errorf("node %s, step %d: computeS %v; want it at least 0.02 only on n1", node, l.Step, l.ComputeS)
			}
		}
	}
}
