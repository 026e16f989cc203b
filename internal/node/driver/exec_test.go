package driver

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gangway/gangway/internal/base/testenv"
	"go.uber.org/goleak"
)

// TestMain makes the test binary the supervisor (and cg-exec), as the
// gangway binary is in production.
func TestMain(m *testing.M) {
	testenv.QuickRaceExit()
	if len(os.Args) > 1 {
		switch os.Args[1] {
		case "supervise":
			os.Exit(SuperviseMain(os.Args[2:], os.Stderr))
		case "cg-exec":
			os.Exit(CgExecMain(os.Args[2:], os.Stderr, nil))
		}
	}
	goleak.VerifyTestMain(m)
}

// connect reaches (starting if need be) the supervisor of dir.
func connect(t *testing.T, dir string) *Supervisor {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	s, err := Connect(context.Background(), dir, exe, nil)
	if err != nil {
		t.Fatalf("Connect: %v", err)
	}
	return s
}

// newSup is a supervisor for a fresh data directory, torn down (ranks and
// all) when the test ends.
func newSup(t *testing.T) (*Supervisor, string) {
	dir := t.TempDir()
	s := connect(t, dir)
	t.Cleanup(func() { s.Close(); KillAll(dir) })
	return s, dir
}

var seq int

func start(t *testing.T, s *Supervisor, script string) (*Handle, string) {
	t.Helper()
	return startBounded(t, s, script, 0, 0)
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
	s, _ := newSup(t)
	h, dir := start(t, s, "echo out $X; echo err >&2; exit 7")
	if e := wait(t, h); e.Code != 7 || e.Signal != "" {
		t.Fatalf("exit = %+v; want code 7", e)
	}
	for file, want := range map[string]string{"stdout.log": "out 42\n", "stderr.log": "err\n"} {
		b, err := os.ReadFile(filepath.Join(dir, file))
		if err != nil || string(b) != want {
			t.Errorf("%s = %q, %v; want %q", file, b, err, want)
		}
	}
	// Killed by a signal: 128+N and the signal's name, as a shell says.
	h, _ = start(t, s, "kill -9 $$")
	if e := wait(t, h); e.Code != 137 || e.Signal != syscall.SIGKILL.String() {
		t.Fatalf("exit = %+v; want 137 (killed)", e)
	}
}

func TestRankIsItsOwnProcessGroup(t *testing.T) {
	s, _ := newSup(t)
	h, dir := start(t, s, `echo "$$ $(ps -o pgid= -p $$) $(ps -o sid= -p $$)"`)
	wait(t, h)
	b, _ := os.ReadFile(filepath.Join(dir, "stdout.log"))
	f := strings.Fields(string(b))
	want := strconv.Itoa(h.PID())
	if len(f) != 3 || f[0] != want || f[1] != want || f[2] != want {
		t.Fatalf("pid pgid sid = %q; want all %s (the rank leads its own session)", b, want)
	}
}

func TestStopGivesGraceThenKills(t *testing.T) {
	s, _ := newSup(t)
	// A polite rank: exits 0 on SIGTERM.
	h, dir := start(t, s, `trap 'echo bye; exit 0' TERM; echo ready; while :; do sleep 0.05; done`)
	waitFile(t, filepath.Join(dir, "stdout.log"), "ready")
	h.Stop(context.Background(), 10*time.Second)
	if e := h.Exit(); e.Code != 0 {
		t.Errorf("polite rank exit = %+v; want 0", e)
	}
	// A stubborn rank ignores SIGTERM and is killed after the grace.
	h, dir = start(t, s, `trap '' TERM; echo ready; while :; do sleep 0.05; done`)
	waitFile(t, filepath.Join(dir, "stdout.log"), "ready")
	t0 := time.Now()
	h.Stop(context.Background(), 300*time.Millisecond)
	if e := h.Exit(); e.Signal != syscall.SIGKILL.String() {
		t.Errorf("stubborn rank exit = %+v; want killed", e)
	}
	if time.Since(t0) < 300*time.Millisecond {
		t.Errorf("killed before the grace period ended")
	}
}

func TestStartFailureIsReported(t *testing.T) {
	s, _ := newSup(t)
	dir := t.TempDir()
	for _, cmd := range []string{"/nonexistent/prog", "no-such-program-anywhere"} {
		_, err := s.Start(Spec{Key: "j/1/" + cmd, Command: []string{cmd}, StateDir: dir, Env: []string{"PATH=/usr/bin:/bin"}})
		if err == nil || !strings.Contains(err.Error(), cmd) {
			t.Errorf("Start(%s) = %v; want an error naming it", cmd, err)
		}
	}
	// The same key cannot run twice at once.
	h, d := start(t, s, "sleep 30")
	_, err := s.Start(Spec{Key: h.Key(), Command: []string{"true"}, StateDir: d, Env: []string{"PATH=/usr/bin:/bin"}})
	if err == nil || !strings.Contains(err.Error(), "already running") {
		t.Errorf("second start of %s = %v; want already running", h.Key(), err)
	}
	h.Kill(context.Background())
}

func TestReattachAfterAgentRestart(t *testing.T) {
	dir := t.TempDir()
	t.Cleanup(func() { KillAll(dir) })
	s1 := connect(t, dir)
	gate := filepath.Join(t.TempDir(), "go")
	h, _ := start(t, s1, "while [ ! -e "+gate+" ]; do sleep 0.05; done; exit 5")
	s1.Close() // the agent goes away; the rank does not

	s2 := connect(t, dir)
	tasks, err := s2.Tasks(context.Background())
	if err != nil || len(tasks) != 1 || tasks[0].PID() != h.PID() || tasks[0].Key() != h.Key() {
		t.Fatalf("Tasks after restart = %v, %v; want the one rank, pid %d", tasks, err, h.PID())
	}
	h2 := tasks[0]
	select {
	case <-h2.Done():
		t.Fatal("re-attached handle done while the rank runs")
	case <-time.After(200 * time.Millisecond):
	}
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if e := wait(t, h2); e.Code != 5 {
		t.Fatalf("re-attached exit = %+v; want the rank's own code 5", e)
	}

	// A rank that ends while no agent is connected keeps its exit status
	// for the next agent, even if the supervisor exits meanwhile.
	gate2 := filepath.Join(t.TempDir(), "go")
	h3, _ := start(t, s2, "while [ ! -e "+gate2+" ]; do sleep 0.05; done; exit 9")
	s2.Close()
	if err := os.WriteFile(gate2, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	waitGone(t, supervisorPID(t, dir), 10*time.Second) // idle: no agent, no rank
	s3 := connect(t, dir)
	defer s3.Close()
	tasks, err = s3.Tasks(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]Exit{}
	for _, h := range tasks {
		got[h.Key()] = wait(t, h)
	}
	if got[h3.Key()].Code != 9 || got[h2.Key()].Code != 5 || len(got) != 2 {
		t.Fatalf("exits after the supervisor restarted = %+v; want %s: 9 and %s: 5", got, h3.Key(), h2.Key())
	}
	// Forgotten ranks are gone for good.
	s3.Forget(h2.Key())
	s3.Forget(h3.Key())
	deadline := time.Now().Add(5 * time.Second)
	for {
		tasks, err = s3.Tasks(context.Background())
		if err == nil && len(tasks) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after Forget: %d tasks (%v)", len(tasks), err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// killSupervisor kills the supervisor of dir and waits for its client to
// start a new one.
func killSupervisor(t *testing.T, dir string) {
	t.Helper()
	old := supervisorPID(t, dir)
	if err := syscall.Kill(old, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitGone(t, old, 5*time.Second)
	deadline := time.Now().Add(10 * time.Second)
	for supervisorPID(t, dir) == old {
		if time.Now().After(deadline) {
			t.Fatal("no new supervisor")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestSupervisorDeathFencesItsRanks: a rank dies with its supervisor, the
// holder of its lease (were the agent gone too, nothing else could fence
// it before the server restarts its gang elsewhere). The client starts a
// new supervisor, which learns from the journal that the rank ended.
func TestSupervisorDeathFencesItsRanks(t *testing.T) {
	s, dir := newSup(t)
	h, _ := start(t, s, "while :; do sleep 0.05; done")
	pid := h.PID()
	killSupervisor(t, dir)
	if e := wait(t, h); e != unknownExit {
		t.Fatalf("exit = %+v; want %+v (the end seen by the new supervisor)", e, unknownExit)
	}
	if gone, _ := pidGone(pid); !gone {
		t.Fatalf("rank %d lives on after its supervisor died", pid)
	}
	// New ranks run under the new supervisor as before.
	h2, _ := start(t, s, "exit 4")
	if e := wait(t, h2); e.Code != 4 {
		t.Fatalf("after the restart: exit = %+v; want 4", e)
	}
}

// pidGone reports whether pid has exited (or is a zombie nobody reaped).
func pidGone(pid int) (bool, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true, nil
	}
	f := strings.Fields(string(b))
	return len(f) > 2 && f[2] == "Z", nil
}

func TestExitKillsLeftoverGroupMembers(t *testing.T) {
	s, _ := newSup(t)
	pidFile := filepath.Join(t.TempDir(), "bg.pid")
	// The rank starts a background child in its group and exits at once.
	h, _ := start(t, s, "sleep 60 & echo $! > "+pidFile+"; exit 0")
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
	waitGone(t, pid, 5*time.Second)
}

func TestLimitedRankRunsThroughCgExec(t *testing.T) {
	s, _ := newSup(t)
	dir := t.TempDir()
	h, err := s.Start(Spec{Key: "j/1/limited", Command: []string{"sh", "-c", "echo $$; exit 3"},
		Env: []string{"PATH=" + os.Getenv("PATH")}, Dir: dir, StateDir: dir, MemoryBytes: 1 << 30, CgroupName: "t"})
	if err != nil {
		t.Fatal(err)
	}
	if e := wait(t, h); e.Code != 3 {
		t.Fatalf("exit = %+v; want 3", e)
	}
	// cg-exec became the rank: the pid the supervisor reaped is the shell's.
	b, _ := os.ReadFile(filepath.Join(dir, "stdout.log"))
	if strings.TrimSpace(string(b)) != strconv.Itoa(h.PID()) {
		t.Fatalf("rank printed pid %q; handle has %d", b, h.PID())
	}
}

func TestIdleSupervisorExits(t *testing.T) {
	dir := t.TempDir()
	s := connect(t, dir)
	pid := supervisorPID(t, dir)
	h, _ := start(t, s, "exit 0")
	wait(t, h)
	s.Close()
	waitGone(t, pid, 10*time.Second)
}

func TestJournalSkipsTornLines(t *testing.T) {
	dir := t.TempDir()
	st := State{PID: 1234, StartTick: 9, StartedAt: time.Unix(100, 0).UTC()}
	var b []byte
	b = append(b, encodeLine(entry{Key: "a", State: &st})...)
	b = append(b, encodeLine(entry{Key: "b", State: &st, Cleanup: []string{"reap", "b"}})...)
	b = append(b, encodeLine(entry{Key: "a", Exit: &Exit{Code: 3}})...)
	b = append(b, encodeLine(entry{Key: "c", State: &st})...)
	b = append(b, encodeLine(entry{Key: "c", Gone: true})...)
	b = append(b, []byte(`{"k":"b","x":{"co`)...) // torn
	if err := os.WriteFile(filepath.Join(dir, journalName), b, 0o600); err != nil {
		t.Fatal(err)
	}
	recs, err := readJournal(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 2 || !recs["a"].Exited || recs["a"].Exit.Code != 3 || recs["b"].Exited || recs["b"].State != st || len(recs["b"].cleanup) != 2 {
		t.Fatalf("records = %+v %+v (%d)", recs["a"], recs["b"], len(recs))
	}
	f, _, err := writeJournal(dir, recs)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	again, err := readJournal(dir)
	if err != nil || len(again) != 2 || !reflect.DeepEqual(again, recs) {
		t.Fatalf("after compaction = %v, %v", again, err)
	}
}

func supervisorPID(t *testing.T, dir string) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "supervisor.pid"))
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

// waitGone waits until no process pid exists (zombies included, since the
// supervisor's parent may be slow to reap).
func waitGone(t *testing.T, pid int, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil {
			return
		}
		if f := statFields(string(b)); len(f) > 0 && f[0] == "Z" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("process %d still alive after %s", pid, d)
		}
		time.Sleep(20 * time.Millisecond)
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

func TestDiscardedOutputCreatesNoLogFiles(t *testing.T) {
	s, _ := newSup(t)
	dir := t.TempDir()
	// Exits 3 only if both writes succeed.
	h, err := s.Start(Spec{Key: "j/1/quiet", Command: []string{"sh", "-c", "echo out && echo err >&2 && exit 3"},
		Env: []string{"PATH=" + os.Getenv("PATH")}, Dir: dir, StateDir: dir, DiscardOutput: true})
	if err != nil {
		t.Fatal(err)
	}
	if e := wait(t, h); e.Code != 3 {
		t.Fatalf("exit = %+v; want 3 (writing to /dev/null works)", e)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Fatalf("task directory holds %d entries (%s); want none", len(ents), ents[0].Name())
	}
}

func TestStopReturnsWhenItsContextEnds(t *testing.T) {
	dir := t.TempDir()
	t.Cleanup(func() { KillAll(dir) })
	s := connect(t, dir)
	h, _ := start(t, s, `trap '' TERM; sleep 30`)
	// The agent shuts down: no exit event can reach this handle any more.
	s.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { h.Stop(ctx, time.Hour); close(done) }()
	select {
	case <-done:
		t.Fatal("Stop returned before the grace or its context ended")
	case <-time.After(100 * time.Millisecond):
	}
	cancel()
	<-done // a Stop that ignored ctx would hang here (and the test time out)
}

func TestLiveRankGetsItsStartTickJournaled(t *testing.T) {
	s, dir := newSup(t)
	gate := filepath.Join(t.TempDir(), "go")
	h, _ := start(t, s, "while [ ! -e "+gate+" ]; do sleep 0.05; done")
	defer func() { _ = os.WriteFile(gate, nil, 0o644); wait(t, h) }()
	want := startTick(h.PID())
	if want == 0 {
		t.Fatalf("no start tick in /proc for pid %d", h.PID())
	}
	// A later supervisor tells this rank from a new process with its pid
	// only by the tick, so it must reach the journal while the rank runs.
	deadline := time.Now().Add(10 * time.Second)
	for {
		recs, err := readJournal(dir)
		if err != nil {
			t.Fatal(err)
		}
		var got uint64
		for _, r := range recs {
			if r.State.PID == h.PID() {
				got = r.State.StartTick
			}
		}
		if got == want {
			break
		}
		if got != 0 || time.Now().After(deadline) {
			t.Fatalf("journal holds start tick %d for pid %d; want %d", got, h.PID(), want)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !alive(State{PID: h.PID(), StartTick: want}) || alive(State{PID: h.PID(), StartTick: want + 1}) {
		t.Fatal("alive does not tell the rank from another process with its pid by the tick")
	}
}
