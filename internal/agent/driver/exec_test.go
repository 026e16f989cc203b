package driver

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// TestMain makes the test binary the shim, as the gangway binary is in
// production.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == "task-shim" {
		os.Exit(ShimMain(os.Args[2:], os.Stderr, nil))
	}
	goleak.VerifyTestMain(m)
}

func newExec(t *testing.T) *Exec {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return &Exec{ShimPath: exe}
}

func start(t *testing.T, d *Exec, script string) (*Handle, string) {
	t.Helper()
	dir := t.TempDir()
	h, err := d.Start(Spec{Command: []string{"sh", "-c", script}, Env: []string{"PATH=" + os.Getenv("PATH"), "X=42"}, Dir: dir, StateDir: dir})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	return h, dir
}

func wait(t *testing.T, h *Handle) Exit {
	t.Helper()
	select {
	case <-h.Done():
		return h.Exit()
	case <-time.After(20 * time.Second):
		t.Fatal("process did not exit")
	}
	return Exit{}
}

func TestExitCodeAndLogs(t *testing.T) {
	h, dir := start(t, newExec(t), "echo out $X; echo err >&2; exit 7")
	if e := wait(t, h); e.Code != 7 || e.Signal != "" {
		t.Fatalf("exit = %+v; want code 7", e)
	}
	for file, want := range map[string]string{"stdout.log": "out 42\n", "stderr.log": "err\n"} {
		b, err := os.ReadFile(filepath.Join(dir, file))
		if err != nil || string(b) != want {
			t.Errorf("%s = %q, %v; want %q", file, b, err, want)
		}
	}
}

func TestStopGivesGraceThenKills(t *testing.T) {
	d := newExec(t)
	// A polite rank: exits 0 on SIGTERM.
	h, dir := start(t, d, `trap 'echo bye; exit 0' TERM; echo ready; while :; do sleep 0.05; done`)
	waitFile(t, filepath.Join(dir, "stdout.log"), "ready")
	h.Stop(10 * time.Second)
	if e := h.Exit(); e.Code != 0 {
		t.Errorf("polite rank exit = %+v; want 0", e)
	}
	// A stubborn rank ignores SIGTERM and is killed after the grace.
	h, dir = start(t, d, `trap '' TERM; echo ready; while :; do sleep 0.05; done`)
	waitFile(t, filepath.Join(dir, "stdout.log"), "ready")
	t0 := time.Now()
	h.Stop(300 * time.Millisecond)
	if e := h.Exit(); e.Signal != syscall.SIGKILL.String() {
		t.Errorf("stubborn rank exit = %+v; want killed", e)
	}
	if time.Since(t0) < 300*time.Millisecond {
		t.Errorf("killed before the grace period ended")
	}
}

func TestStartFailureIsReported(t *testing.T) {
	dir := t.TempDir()
	h, err := newExec(t).Start(Spec{Command: []string{"/nonexistent/prog"}, StateDir: dir})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	if e := wait(t, h); e.Code != 127 || !strings.Contains(e.Message, "no such file") {
		t.Fatalf("exit = %+v; want 127 with a message", e)
	}
}

func TestAdoptAfterAgentRestart(t *testing.T) {
	d := newExec(t)
	go1 := filepath.Join(t.TempDir(), "go")
	h, dir := start(t, d, "while [ ! -e "+go1+" ]; do sleep 0.05; done; exit 5")
	// A new agent process adopts the rank from its state directory.
	d2 := newExec(t)
	h2, ok, err := d2.Adopt(dir)
	if err != nil || !ok {
		t.Fatalf("Adopt = %v, %v", ok, err)
	}
	if h2.PID() != h.PID() {
		t.Fatalf("adopted pid %d, started %d", h2.PID(), h.PID())
	}
	select {
	case <-h2.Done():
		t.Fatal("adopted handle done while the rank runs")
	case <-time.After(200 * time.Millisecond):
	}
	if err := os.WriteFile(go1, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if e := wait(t, h2); e.Code != 5 {
		t.Fatalf("adopted exit = %+v; want the rank's own code 5", e)
	}
	wait(t, h)
	// Adopting a finished rank gives its recorded exit at once.
	h3, ok, err := d2.Adopt(dir)
	if err != nil || !ok || wait(t, h3).Code != 5 {
		t.Fatalf("adopt finished = %v %v %+v", ok, err, h3.Exit())
	}
	// Nothing started there: not ok.
	if _, ok, err := d2.Adopt(t.TempDir()); ok || err != nil {
		t.Fatalf("adopt empty dir = %v, %v", ok, err)
	}
}

func waitFile(t *testing.T, path, want string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		b, _ := os.ReadFile(path)
		if strings.Contains(string(b), want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never contained %q", path, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestExitKillsLeftoverGroupMembers(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "bg.pid")
	// The rank starts a background child in its group and exits at once.
	h, _ := start(t, newExec(t), "sleep 60 & echo $! > "+pidFile+"; exit 0")
	if e := wait(t, h); e.Code != 0 {
		t.Fatalf("exit = %+v", e)
	}
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	var pid int
	if _, err := fmt.Sscan(string(b), &pid); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for syscall.Kill(pid, 0) == nil {
		if time.Now().After(deadline) {
			t.Fatalf("background child %d outlived its rank", pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
