package durbench_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"testing"

	"github.com/gangway/gangway/internal/base/testenv"
	"github.com/gangway/gangway/internal/bench/durbench"
	"github.com/gangway/gangway/internal/cli"
	"go.uber.org/goleak"
)

// TestMain lets the test binary stand in for the gangway executable: the
// check starts the server as `<exe> server`.
func TestMain(m *testing.M) {
	testenv.QuickRaceExit()
	if len(os.Args) > 1 && os.Args[1] == "server" {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		code := cli.Main(ctx, os.Args[1:], &cli.Env{Stdout: os.Stdout, Stderr: os.Stderr, Getenv: os.Getenv})
		stop()
		os.Exit(code)
	}
	code := m.Run()
	http.DefaultTransport.(*http.Transport).CloseIdleConnections()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// TestMainShortRun runs a short check (200 submissions, every tenth an
// array of 200, two store transactions) through Main's JSON output: the server is killed with
// submissions in flight, and after its restart nothing acknowledged is
// missing and nothing is stored twice.
func TestMainShortRun(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the server as a child process, kills and restarts it; skipped with -short")
	}
	var stdout, stderr bytes.Buffer
	args := []string{"-o", "json", "--submissions", "200", "--concurrency", "20", "--array-tasks", "200", "--dir", t.TempDir()}
	code := durbench.Main(context.Background(), args, &stdout, &stderr)
	if bytes.Contains(stderr.Bytes(), []byte("cannot run the server")) {
		t.Skipf("cannot run the server binary (this test binary as `server`): %s", stderr.String())
	}
	t.Logf("progress:\n%s\nresult:\n%s", stderr.String(), stdout.String())
	var r durbench.Result
	if err := json.Unmarshal(stdout.Bytes(), &r); err != nil {
		t.Fatalf("Main exited %d; its output does not decode: %v", code, err)
	}
	if code != 0 || !r.OK {
		t.Fatalf("Main exited %d: %+v", code, r)
	}
	if r.Submitted != 200 || r.Arrays != 20 || r.Acknowledged < 200/3 || r.Present != r.Acknowledged || r.Unanswered != 200-r.Acknowledged || r.RestartS <= 0 {
		t.Errorf("figures do not add up: %+v", r)
	}
}

// TestRunCannotStartTheServer: an executable that cannot run is
// ErrCannotRun, which says the run measured nothing.
func TestRunCannotStartTheServer(t *testing.T) {
	_, err := durbench.Run(context.Background(), durbench.Config{Exe: "/nonexistent/gangway", Dir: t.TempDir()}, &bytes.Buffer{})
	if !errors.Is(err, durbench.ErrCannotRun) {
		t.Fatalf("err = %v; want ErrCannotRun", err)
	}
}
