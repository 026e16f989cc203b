package e2ebench_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"testing"

	"github.com/gangway/gangway/internal/base/testenv"
	"github.com/gangway/gangway/internal/bench/e2ebench"
	"github.com/gangway/gangway/internal/cli"
	"github.com/gangway/gangway/internal/node/container"
	"go.uber.org/goleak"
)

// TestMain lets the test binary stand in for the gangway executable: the
// benchmark starts agents as `<exe> agent` and they run ranks through
// `<exe> supervise`.
func TestMain(m *testing.M) {
	testenv.QuickRaceExit()
	if len(os.Args) > 1 {
		switch os.Args[1] {
		case "agent", "supervise", "cg-exec", "container-rank", "container-reap", "version":
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			code := cli.Main(ctx, os.Args[1:], &cli.Env{Stdout: os.Stdout, Stderr: os.Stderr, Getenv: os.Getenv})
			stop()
			os.Exit(code)
		}
	}
	code := m.Run()
	http.DefaultTransport.(*http.Transport).CloseIdleConnections()
	if code == 0 {
		if err := goleak.Find(testenv.EtcdLeaks()...); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// TestMainSmallRun runs the whole benchmark on a tiny cluster through
// Main's JSON output and checks that every job ran and the figures are
// consistent with each other.
func TestMainSmallRun(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a server and agent processes; skipped with -short")
	}
	var stdout, stderr bytes.Buffer
	args := []string{"-o", "json", "--nodes", "3", "--gpus-per-node", "2", "--jobs", "12", "--gangs", "4",
		"--warmup", "2", "--submitters", "2", "--dir", t.TempDir()}
	code := e2ebench.Main(context.Background(), args, &stdout, &stderr)
	if code != 0 {
		t.Fatalf("Main exited %d\nstderr:\n%s", code, stderr.String())
	}
	t.Logf("progress:\n%s\nresult:\n%s", stderr.String(), stdout.String())
	var res e2ebench.Result
	if err := json.Unmarshal(stdout.Bytes(), &res); err != nil {
		t.Fatalf("decode JSON result: %v\n%s", err, stdout.String())
	}
	if res.System != "gangway" || res.Nodes != 3 || res.GPUsPerNode != 2 || res.Submitters != 2 || res.Warmup != 2 {
		t.Errorf("run header = %+v, want gangway, 3 nodes, 2 GPUs, 2 submitters, 2 warm-up jobs", res)
	}
	type shape struct {
		Name                                 string
		Jobs, Ranks, GPUs, Succeeded, Failed int
	}
	var got []shape
	for _, p := range res.Phases {
		got = append(got, shape{p.Name, p.Jobs, p.RanksPerJob, p.GPUsPerRank, p.Succeeded, p.Failed})
	}
	want := []shape{{"single", 12, 1, 1, 12, 0}, {"gang", 4, 2, 2, 4, 0}}
	if len(got) != len(want) {
		t.Fatalf("phases = %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("phase %d = %+v, want %+v", i, got[i], want[i])
		}
	}
	for _, p := range res.Phases {
		if !(p.WallS > 0 && p.SubmitS > 0 && p.SubmitS <= p.WallS) {
			t.Errorf("%s: submit %.3fs, wall %.3fs: want 0 < submit ≤ wall", p.Name, p.SubmitS, p.WallS)
		}
		if d := p.JobsPerS - float64(p.Succeeded)/p.WallS; d > 1e-6 || d < -1e-6 {
			t.Errorf("%s: jobs/s %.3f, want succeeded/wall = %.3f", p.Name, p.JobsPerS, float64(p.Succeeded)/p.WallS)
		}
		lat := []float64{p.SubmitToStartP50Ms, p.SubmitToStartP90Ms, p.SubmitToStartP99Ms, p.SubmitToStartMaxMs}
		if lat[0] <= 0 {
			t.Errorf("%s: submit→start p50 %.3f ms, want > 0", p.Name, lat[0])
		}
		for i := 1; i < len(lat); i++ {
			if lat[i] < lat[i-1] {
				t.Errorf("%s: submit→start percentiles %v not increasing", p.Name, lat)
			}
		}
		if p.SubmitToStartMaxMs > p.WallS*1000 {
			t.Errorf("%s: max submit→start %.1f ms exceeds the wall time %.1f s", p.Name, p.SubmitToStartMaxMs, p.WallS)
		}
		if p.AgentsCPUS <= 0 {
			t.Errorf("%s: agents used %.3f CPU s, want > 0 (their ranks ran)", p.Name, p.AgentsCPUS)
		}
	}
	if !strings.Contains(stderr.String(), "3 agents ready") {
		t.Errorf("progress lacks the agents-ready line:\n%s", stderr.String())
	}
}

// TestMainSmallRunDocker runs the mix with every rank in a Docker
// container of an image made from this executable; skipped without an
// engine.
func TestMainSmallRunDocker(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a server and agent processes; skipped with -short")
	}
	if why := container.Available(context.Background(), ""); why != "" {
		t.Skip(why)
	}
	var stdout, stderr bytes.Buffer
	args := []string{"-o", "json", "--driver", "docker", "--nodes", "2", "--gpus-per-node", "2", "--jobs", "6", "--gangs", "2",
		"--warmup", "1", "--output", "discard", "--dir", t.TempDir()}
	if code := e2ebench.Main(context.Background(), args, &stdout, &stderr); code != 0 {
		t.Fatalf("Main exited %d\nstderr:\n%s", code, stderr.String())
	}
	var res e2ebench.Result
	if err := json.Unmarshal(stdout.Bytes(), &res); err != nil {
		t.Fatalf("decode JSON result: %v\n%s", err, stdout.String())
	}
	if res.Driver != "docker" || len(res.Phases) != 2 || res.Phases[0].Succeeded != 6 || res.Phases[1].Succeeded != 2 {
		t.Errorf("result = %s; want driver docker and every job succeeded", stdout.String())
	}
	if !strings.Contains(stderr.String(), "ranks run in Docker containers of image gangway-bench:") {
		t.Errorf("progress does not name the image:\n%s", stderr.String())
	}
}

func TestMainBadFlags(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"format", []string{"-o", "xml"}, `invalid value "xml" for flag -o: want table, json or yaml`},
		{"nothing to do", []string{"--jobs", "0", "--gangs", "0"}, "nothing to measure"},
		{"negative jobs", []string{"--jobs", "-1"}, "--jobs -1: want 0 or more"},
		{"gang wider than cluster", []string{"--nodes", "2", "--gang-nodes", "3"}, "--gang-nodes 3: want 1..2"},
		{"no submitters", []string{"--submitters", "0"}, "--submitters 0: want at least 1"},
		{"empty command", []string{"--command", " "}, "--command is empty"},
		{"unknown driver", []string{"--driver", "podman"}, `--driver "podman": want exec or docker`},
		{"stray argument", []string{"extra"}, `unexpected argument "extra"`},
		{"unknown flag", []string{"--nope"}, "flag provided but not defined: -nope"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			if code := e2ebench.Main(context.Background(), tc.args, &stdout, &stderr); code != 2 {
				t.Errorf("exit %d, want 2", code)
			}
			if !strings.Contains(stderr.String(), tc.want) {
				t.Errorf("stderr = %q, want it to contain %q", stderr.String(), tc.want)
			}
			if stdout.Len() != 0 {
				t.Errorf("stdout = %q, want nothing", stdout.String())
			}
		})
	}
}

// TestMainReportsStuckJobs runs jobs that cannot finish before the timeout
// and checks that the run fails, says which jobs were stuck and in what
// phase, and cancels them rather than leaving ranks behind.
func TestMainReportsStuckJobs(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a server and agent processes; skipped with -short")
	}
	var stdout, stderr bytes.Buffer
	args := []string{"--nodes", "1", "--gpus-per-node", "2", "--jobs", "2", "--gangs", "0", "--warmup", "0",
		"--command", "sleep 600", "--timeout", "5s", "--dir", t.TempDir()}
	code := e2ebench.Main(context.Background(), args, &stdout, &stderr)
	if code != 1 {
		t.Fatalf("Main exited %d, want 1\nstderr:\n%s", code, stderr.String())
	}
	for _, want := range []string{"FAILED", "single: waiting for 2 jobs to finish", "(2 not finished; job 1 Running"} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr.String())
		}
	}
}
