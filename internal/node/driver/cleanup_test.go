package driver

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestCleanupRunsBeforeTheExitIsTold: however a rank with a cleanup
// command ends, the command has run, once, by the time its exit is told.
// The command takes a while before it writes, so an exit told before it is
// done would find no mark.
func TestCleanupRunsBeforeTheExitIsTold(t *testing.T) {
	for _, tt := range []struct {
		name   string
		script string
		end    func(t *testing.T, s *Supervisor, h *Handle, supDir string)
		check  func(t *testing.T, e Exit)
	}{
		{name: "own exit", script: "exit 5",
			check: func(t *testing.T, e Exit) {
				if e.Code != 5 || e.Message != "" {
					t.Errorf("exit = %+v; want code 5, no message", e)
				}
			}},
		{name: "killed after the grace", script: "trap '' TERM; echo ready; while :; do sleep 0.05; done",
			end: func(t *testing.T, s *Supervisor, h *Handle, _ string) {
				h.Stop(context.Background(), 100*time.Millisecond)
			},
			check: func(t *testing.T, e Exit) {
				if e.Signal != syscall.SIGKILL.String() {
					t.Errorf("exit = %+v; want SIGKILL", e)
				}
			}},
		{name: "supervisor killed", script: "echo ready; while :; do sleep 0.05; done",
			end: func(t *testing.T, s *Supervisor, h *Handle, supDir string) { killSupervisor(t, supDir) },
			check: func(t *testing.T, e Exit) {
				if e != unknownExit {
					t.Errorf("exit = %+v; want %+v", e, unknownExit)
				}
			}},
		{name: "lease lapsed", script: "echo ready; while :; do sleep 0.05; done",
			end: func(t *testing.T, s *Supervisor, h *Handle, _ string) { s.Lease(50 * time.Millisecond) },
			check: func(t *testing.T, e Exit) {
				if !e.Fenced {
					t.Errorf("exit = %+v; want fenced", e)
				}
			}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s, supDir := newSup(t)
			dir := filepath.Join(t.TempDir(), "task")
			if err := os.Mkdir(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			mark := filepath.Join(dir, "cleaned")
			seq++
			h, err := s.Start(Spec{Key: "j/1/" + strconv.Itoa(seq), Command: []string{"sh", "-c", tt.script},
				Env: []string{"PATH=" + os.Getenv("PATH")}, Dir: dir, StateDir: dir,
				Cleanup: []string{"sh", "-c", "sleep 0.3; echo cleaned >> " + mark}})
			if err != nil {
				t.Fatalf("Start: %v", err)
			}
			if tt.end != nil {
				waitFile(t, filepath.Join(dir, "stdout.log"), "ready")
				tt.end(t, s, h, supDir)
			}
			e := wait(t, h)
			b, _ := os.ReadFile(mark)
			if got := strings.Count(string(b), "cleaned"); got != 1 {
				t.Errorf("the cleanup ran %d times by the time the exit was told; want once", got)
			}
			tt.check(t, e)
		})
	}
}

// TestFailedCleanupIsNamedInTheExit: a cleanup that fails leaves the rank's
// own exit, with a message saying so.
func TestFailedCleanupIsNamedInTheExit(t *testing.T) {
	s, _ := newSup(t)
	dir := t.TempDir()
	h, err := s.Start(Spec{Key: "j/1/fail", Command: []string{"sh", "-c", "exit 0"},
		Env: []string{"PATH=" + os.Getenv("PATH")}, Dir: dir, StateDir: dir, Cleanup: []string{"sh", "-c", "exit 3"}})
	if err != nil {
		t.Fatal(err)
	}
	if e := wait(t, h); e.Code != 0 || !strings.Contains(e.Message, "cleanup after the rank failed (code 3") {
		t.Fatalf("exit = %+v; want code 0 with the failed cleanup named", e)
	}
}
