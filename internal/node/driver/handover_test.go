package driver

import (
	"context"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// oldBuild is a copy of the test binary: another file, so another build
// to the handshake, as an upgraded gangway is to the one before it.
func oldBuild(t *testing.T) (old, cur string) {
	t.Helper()
	cur, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(cur)
	if err != nil {
		t.Fatal(err)
	}
	old = filepath.Join(t.TempDir(), "gangway-old")
	if err := os.WriteFile(old, b, 0o755); err != nil {
		t.Fatal(err)
	}
	return old, cur
}

func connectWith(t *testing.T, dir, exe string) *Supervisor {
	t.Helper()
	s, err := Connect(context.Background(), dir, exe, nil)
	if err != nil {
		t.Fatalf("Connect(%s): %v", exe, err)
	}
	return s
}

func exeOf(pid int) string {
	p, _ := os.Readlink("/proc/" + strconv.Itoa(pid) + "/exe")
	return p
}

// An agent of a new build that finds an idle supervisor of the old one
// replaces it, so the supervisor's own fixes land with the upgrade.
func TestAgentReplacesIdleSupervisorOfAnotherBuild(t *testing.T) {
	old, cur := oldBuild(t)
	dir := t.TempDir()
	t.Cleanup(func() { KillAll(dir) })
	s1 := connectWith(t, dir, old)
	pid1 := supervisorPID(t, dir)
	if exeOf(pid1) != old {
		t.Fatalf("first supervisor runs %q; want %q", exeOf(pid1), old)
	}
	// A second client keeps the old supervisor from exiting on its own
	// once the old agent goes.
	probe, err := net.Dial("unix", socketName(dir))
	if err != nil {
		t.Fatal(err)
	}
	defer probe.Close()
	s1.Close()

	s2 := connectWith(t, dir, cur)
	defer s2.Close()
	pid2 := supervisorPID(t, dir)
	if pid2 == pid1 || exeOf(pid2) != cur {
		t.Fatalf("after the new agent connected: supervisor %d running %q; want a new one running %q", pid2, exeOf(pid2), cur)
	}
	waitGone(t, pid1, 10*time.Second)
	_ = probe.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := probe.Read(make([]byte, 1)); err != io.EOF {
		t.Errorf("the retired supervisor left its other client connected: read %v", err)
	}
	h, _ := start(t, s2, "exit 4")
	if e := wait(t, h); e.Code != 4 {
		t.Fatalf("rank under the new supervisor: %+v; want code 4", e)
	}
}

// A supervisor of another build with a rank running is kept (the rank is
// its child); once the rank ends and its exit is delivered, it is replaced,
// and the new supervisor knows the ended rank from the journal.
func TestAgentReplacesBusySupervisorOnceItsRanksEnd(t *testing.T) {
	old, cur := oldBuild(t)
	dir := t.TempDir()
	t.Cleanup(func() { KillAll(dir) })
	s1 := connectWith(t, dir, old)
	gate := filepath.Join(t.TempDir(), "go")
	h1, _ := start(t, s1, "while [ ! -e "+gate+" ]; do sleep 0.05; done; exit 5")
	pid1 := supervisorPID(t, dir)
	s1.Close()

	s2 := connectWith(t, dir, cur)
	defer s2.Close()
	if pid := supervisorPID(t, dir); pid != pid1 {
		t.Fatalf("supervisor %d replaced by %d while its rank ran", pid1, pid)
	}
	tasks, err := s2.Tasks(context.Background())
	if err != nil || len(tasks) != 1 || tasks[0].PID() != h1.PID() {
		t.Fatalf("Tasks = %v, %v; want the running rank", tasks, err)
	}
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if e := wait(t, tasks[0]); e.Code != 5 {
		t.Fatalf("rank exit %+v; want its code 5", e)
	}
	waitGone(t, pid1, 10*time.Second)
	deadline := time.Now().Add(10 * time.Second)
	for {
		if pid := supervisorPID(t, dir); pid != pid1 && exeOf(pid) == cur {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no supervisor of the new build after the old one exited")
		}
		time.Sleep(10 * time.Millisecond)
	}
	again, err := s2.Tasks(context.Background())
	if err != nil || len(again) != 1 || again[0].Key() != h1.Key() || again[0].Exit().Code != 5 {
		t.Fatalf("the new supervisor's tasks = %v, %v; want the ended rank with code 5", again, err)
	}
	h, _ := start(t, s2, "exit 0")
	if e := wait(t, h); e.Code != 0 {
		t.Fatalf("rank under the new supervisor: %+v", e)
	}
}

// A supervisor that does not answer the handshake (frozen) does not hold
// up the agent's start; requests work once it runs again.
func TestConnectToFrozenSupervisorDoesNotHang(t *testing.T) {
	dir := t.TempDir()
	t.Cleanup(func() { KillAll(dir) })
	s1 := connect(t, dir)
	gate := filepath.Join(t.TempDir(), "go")
	start(t, s1, "while [ ! -e "+gate+" ]; do sleep 0.05; done") // keeps it from idling out
	s1.Close()
	pid := supervisorPID(t, dir)
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer syscall.Kill(pid, syscall.SIGCONT)
	old := helloTimeout
	helloTimeout = 100 * time.Millisecond
	defer func() { helloTimeout = old }()
	s2 := connect(t, dir) // a hang here fails the test by its timeout
	defer s2.Close()
	syscall.Kill(pid, syscall.SIGCONT)
	tasks, err := s2.Tasks(context.Background())
	if err != nil || len(tasks) != 1 {
		t.Fatalf("Tasks after the supervisor resumed = %v, %v; want the one rank", tasks, err)
	}
	os.WriteFile(gate, nil, 0o644)
	if e := wait(t, tasks[0]); e.Code != 0 {
		t.Fatalf("rank exit %+v", e)
	}
}

// TestCloseEndsReconnectAndLeavesNoGoroutine: Close while the reader backs
// off between failed reconnects (its supervisor dead and none can be
// started) cancels the back-off and returns with none of the Supervisor's
// goroutines left.
func TestCloseEndsReconnectAndLeavesNoGoroutine(t *testing.T) {
	before := goleak.IgnoreCurrent()
	dir := t.TempDir()
	s := connect(t, dir)
	defer KillAll(dir)
	old := supervisorPID(t, dir)
	s.mu.Lock()
	s.exe = filepath.Join(t.TempDir(), "no-such-gangway") // no new supervisor can start
	s.mu.Unlock()
	if err := syscall.Kill(old, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitGone(t, old, 5*time.Second)
	for { // the reader has seen the loss
		s.mu.Lock()
		c := s.conn
		s.mu.Unlock()
		if c == nil {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	s.Close()
	goleak.VerifyNone(t, before)
}
