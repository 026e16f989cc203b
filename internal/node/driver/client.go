package driver

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gangway/gangway/internal/base/fastjson"
)

// ErrUnavailable: the supervisor cannot be reached right now.
var ErrUnavailable = errors.New("driver: supervisor unavailable")

// Supervisor is the agent's connection to the supervisor of its data
// directory. Its methods are safe for concurrent use. It owns its
// goroutines: the reader (reading the connection, and reconnecting,
// starting a new supervisor, when the old one dies) and short-lived ones
// that check the supervisor's build or retire a stale one. Close cancels
// them and waits for all of them.
type Supervisor struct {
	dir string
	exe string
	log *slog.Logger

	wmu sync.Mutex // serialises writes to the connection
	// opMu is held shared by every request and exclusively while a stale
	// supervisor is retired and replaced, so no start is lost to the hand-over.
	opMu sync.RWMutex

	mu      sync.Mutex // guards the fields below
	conn    net.Conn   // nil while reconnecting
	nextID  int64
	calls   map[int64]chan reply
	handles map[string]*Handle
	early   map[string]Exit // exits that came before their start reply was handled
	syncID  int64           // the list request that reconciles after a reconnect
	closed  bool
	stale   bool // the supervisor runs another build: retire it once idle
	// version is the protocol the connected supervisor speaks, from its
	// hello; 0: not asked on this connection yet.
	version int

	// life is cancelled by Close: it bounds every wait of the goroutines
	// the Supervisor owns (reconnect back-off, dials, build checks).
	life    context.Context
	endLife context.CancelFunc
	bg      sync.WaitGroup // goroutines started by goLocked
	done    chan struct{}  // closed when the reader goroutine has returned
}

// Connect reaches the supervisor serving dir, starting `exe supervise`
// when none does. exe is the gangway or gangway-shim binary.
func Connect(ctx context.Context, dir, exe string, log *slog.Logger) (*Supervisor, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Supervisor{dir: dir, exe: exe, log: log, calls: map[int64]chan reply{}, handles: map[string]*Handle{},
		early: map[string]Exit{}, done: make(chan struct{})}
	s.life, s.endLife = context.WithCancel(context.Background())
	c, err := s.dial(ctx)
	if err != nil {
		s.endLife()
		return nil, err
	}
	s.conn = c
	go s.readLoop(c)
	// An agent restarted after an upgrade finds the old build's supervisor;
	// on an idle node it is replaced before anything else is asked of it.
	s.checkBuild(ctx)
	return s, nil
}

// helloTimeout bounds the handshake: a frozen supervisor must not hold up
// the agent's start.
var helloTimeout = 10 * time.Second

// checkBuild asks the supervisor which build it runs and, when that is not
// the binary now at exe (the one a new supervisor would run), retires it
// now if no rank runs, or after a later exit.
func (s *Supervisor) checkBuild(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, helloTimeout)
	defer cancel()
	rep, err := s.call(ctx, request{Op: "hello"})
	if err != nil && !isUnknownOp(err) {
		return // unreachable: the next connection asks again
	}
	want := buildID(s.exe)
	stale := want != "" && rep.Build != want // no Build: it predates the handshake
	s.mu.Lock()
	s.stale = stale
	s.version = rep.Version
	s.mu.Unlock()
	if stale {
		s.log.Info("the supervisor runs another build than "+s.exe+"; replacing it once no rank runs",
			"supervisor_build", rep.Build, "build", want)
		s.retire(ctx)
	}
}

// retire replaces a stale, idle supervisor: it exits on "retire", and the
// reader's reconnect starts one from exe. It waits for the new connection,
// holding back every other request meanwhile; it gives up at once when a
// request is in flight, since an exit will call it again.
func (s *Supervisor) retire(ctx context.Context) {
	if !s.opMu.TryLock() {
		return
	}
	defer s.opMu.Unlock()
	s.mu.Lock()
	old, stale := s.conn, s.stale
	s.mu.Unlock()
	if !stale || old == nil {
		return
	}
	if _, err := s.call(ctx, request{Op: "retire"}); err != nil {
		if isUnknownOp(err) {
			s.log.Warn("the supervisor predates hand-over; it keeps running until the node has no rank and no agent", "err", err)
			s.mu.Lock()
			s.stale = false
			s.mu.Unlock()
		}
		return // busy: the next exit tries again
	}
	s.log.Info("retired the supervisor of another build; starting this build's")
	for {
		s.mu.Lock()
		c, closed := s.conn, s.closed
		s.mu.Unlock()
		if closed || (c != nil && c != old) {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// dial connects, starting a supervisor if none answers.
func (s *Supervisor) dial(ctx context.Context) (net.Conn, error) {
	if c, err := net.Dial("unix", socketName(s.dir)); err == nil {
		return c, nil
	}
	cmd := exec.CommandContext(ctx, s.exe, "supervise", "--dir", s.dir)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("driver: start supervisor (%s supervise): %v: %s", s.exe, err, strings.TrimSpace(string(out)))
	}
	c, err := net.Dial("unix", socketName(s.dir))
	if err != nil {
		return nil, fmt.Errorf("driver: supervisor started but does not answer: %w", err)
	}
	return c, nil
}

// Close disconnects. Running ranks keep running under the supervisor,
// which exits once they have all ended and no agent is connected.
func (s *Supervisor) Close() error {
	s.mu.Lock()
	s.closed = true
	if s.conn != nil {
		s.conn.Close()
	}
	s.mu.Unlock()
	s.endLife()
	<-s.done
	s.bg.Wait()
	return nil
}

// goLocked runs f in a goroutine Close waits for, with a context that
// Close cancels and that ends after d. It starts nothing once Close has
// begun. s.mu must be held.
func (s *Supervisor) goLocked(d time.Duration, f func(ctx context.Context)) {
	if s.closed {
		return
	}
	s.bg.Go(func() {
		ctx, cancel := context.WithTimeout(s.life, d)
		defer cancel()
		f(ctx)
	})
}

func (s *Supervisor) readLoop(c net.Conn) {
	defer close(s.done)
	for {
		r := bufio.NewReaderSize(c, 64<<10)
		for {
			line, err := readLine(r)
			if err != nil {
				break
			}
			var rep reply
			if fastjson.Unmarshal(line, &rep) == nil {
				s.dispatch(rep)
			}
		}
		c.Close()
		s.mu.Lock()
		s.conn = nil
		s.version = 0 // the next supervisor may be another build
		for id, ch := range s.calls {
			close(ch)
			delete(s.calls, id)
		}
		closed := s.closed
		s.mu.Unlock()
		if closed {
			return
		}
		s.log.Warn("supervisor connection lost; reconnecting")
		if c = s.reconnect(); c == nil {
			return
		}
	}
}

// reconnect dials until it succeeds or the Supervisor is closed, then asks
// for the task list to settle handles whose ranks ended meanwhile.
func (s *Supervisor) reconnect() net.Conn {
	backoff := 50 * time.Millisecond
	for {
		s.mu.Lock()
		closed := s.closed
		s.mu.Unlock()
		if closed {
			return nil
		}
		ctx, cancel := context.WithTimeout(s.life, 15*time.Second)
		c, err := s.dial(ctx)
		cancel()
		if err == nil {
			s.mu.Lock()
			if s.closed {
				s.mu.Unlock()
				c.Close()
				return nil
			}
			s.conn = c
			s.nextID++
			s.syncID = s.nextID
			id := s.syncID
			s.mu.Unlock()
			s.write(c, request{ID: id, Op: "list"})
			s.log.Info("supervisor reconnected")
			s.mu.Lock()
			s.goLocked(helloTimeout, s.checkBuild) // not on the reader: it must read the answer
			s.mu.Unlock()
			return c
		}
		s.log.Warn("supervisor unreachable", "err", err)
		select {
		case <-s.life.Done():
			return nil
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, time.Second)
	}
}

func (s *Supervisor) dispatch(rep reply) {
	s.mu.Lock()
	if rep.Event == "exit" && rep.Exit != nil {
		h := s.handles[rep.Key]
		if h == nil {
			if len(s.early) > 10000 {
				clear(s.early) // exits for starts that never completed
			}
			s.early[rep.Key] = *rep.Exit
		}
		stale := s.stale
		s.mu.Unlock()
		if h != nil {
			h.finish(*rep.Exit)
		}
		if stale {
			s.mu.Lock()
			s.goLocked(15*time.Second, s.retire)
			s.mu.Unlock()
		}
		return
	}
	if rep.ID != 0 && rep.ID == s.syncID {
		s.syncID = 0
		s.reconcileLocked(rep.Tasks)
		s.mu.Unlock()
		return
	}
	ch := s.calls[rep.ID]
	delete(s.calls, rep.ID)
	s.mu.Unlock()
	if ch != nil {
		ch <- rep
	}
}

// reconcileLocked ends the handles of ranks that exited (or that the new
// supervisor does not know) while the connection was down.
func (s *Supervisor) reconcileLocked(tasks []record) {
	known := map[string]record{}
	for _, t := range tasks {
		known[t.Key] = t
	}
	for k, h := range s.handles {
		t, ok := known[k]
		switch {
		case !ok:
			h.finish(unknownExit) // takes only h.mu; never blocks
		case t.Exited:
			h.finish(t.Exit)
		}
	}
}

func (s *Supervisor) write(c net.Conn, req request) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	_ = c.SetWriteDeadline(time.Now().Add(10 * time.Second))
	_, err := c.Write(encodeLine(req))
	return err
}

// call sends req and waits for its reply.
func (s *Supervisor) call(ctx context.Context, req request) (reply, error) {
	s.mu.Lock()
	c := s.conn
	if c == nil || s.closed {
		s.mu.Unlock()
		return reply{}, ErrUnavailable
	}
	s.nextID++
	req.ID = s.nextID
	ch := make(chan reply, 1)
	s.calls[req.ID] = ch
	s.mu.Unlock()
	if err := s.write(c, req); err != nil {
		s.mu.Lock()
		delete(s.calls, req.ID)
		s.mu.Unlock()
		return reply{}, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	select {
	case rep, ok := <-ch:
		if !ok {
			return reply{}, ErrUnavailable
		}
		if rep.Err != "" {
			return rep, errors.New(rep.Err)
		}
		return rep, nil
	case <-ctx.Done():
		s.mu.Lock()
		delete(s.calls, req.ID)
		s.mu.Unlock()
		return reply{}, ctx.Err()
	}
}

// register adds h, finishing it at once if its exit came first.
func (s *Supervisor) register(h *Handle) *Handle {
	s.mu.Lock()
	if old := s.handles[h.key]; old != nil && old.state.PID == h.state.PID {
		s.mu.Unlock()
		return old
	}
	s.handles[h.key] = h
	e, early := s.early[h.key]
	delete(s.early, h.key)
	s.mu.Unlock()
	if early {
		h.finish(e)
	}
	return h
}

// Start launches spec under the supervisor. An error means nothing runs:
// the command could not be found or started, or the supervisor is
// unreachable.
func (s *Supervisor) Start(spec Spec) (*Handle, error) {
	if len(spec.Command) == 0 {
		return nil, errors.New("driver: empty command")
	}
	ws := &wireSpec{Argv: spec.Command, Env: spec.Env, Dir: spec.Dir,
		MemoryBytes: spec.MemoryBytes, CPUMillis: spec.CPUMillis, Cgroup: spec.CgroupName, RunAs: spec.RunAs,
		Cleanup: spec.Cleanup}
	if !spec.DiscardOutput {
		ws.Stdout, ws.Stderr = filepath.Join(spec.StateDir, "stdout.log"), filepath.Join(spec.StateDir, "stderr.log")
		ws.LogFileBytes, ws.LogFiles = spec.LogFileBytes, spec.LogFiles
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s.opMu.RLock()
	var rep reply
	var err error
	if spec.RunAs != nil {
		err = s.needVersion(ctx, runAsVersion, "run a rank as another user")
	}
	if err == nil && spec.Cleanup != nil {
		err = s.needVersion(ctx, cleanupVersion, "clean up after a container rank")
	}
	if err == nil {
		rep, err = s.call(ctx, request{Op: "start", Key: spec.Key, Spec: ws})
	}
	s.opMu.RUnlock()
	if err != nil {
		return nil, fmt.Errorf("driver: %w", err)
	}
	if rep.State == nil {
		return nil, errors.New("driver: supervisor answered a start without a pid")
	}
	return s.register(newHandle(spec.Key, *rep.State)), nil
}

// needVersion checks that the supervisor speaks protocol want or later,
// for a start whose field an older build would ignore (runAs: it would run
// the rank as itself, root; cleanup: it would leave a container running).
// what says what the older build cannot do.
func (s *Supervisor) needVersion(ctx context.Context, want int, what string) error {
	s.mu.Lock()
	v := s.version
	s.mu.Unlock()
	if v == 0 {
		rep, err := s.call(ctx, request{Op: "hello"})
		if err != nil && !isUnknownOp(err) {
			return err
		}
		v = rep.Version
		s.mu.Lock()
		s.version = v
		s.mu.Unlock()
	}
	if v < want {
		return fmt.Errorf("the node's supervisor (protocol %d) is of a build that cannot %s; it is replaced by this agent's once no rank runs", v, what)
	}
	return nil
}

// Tasks returns a handle for every rank the supervisor knows: running,
// and ended but not yet forgotten (those are done at once). An agent calls
// it on start to re-attach.
func (s *Supervisor) Tasks(ctx context.Context) ([]*Handle, error) {
	s.opMu.RLock()
	rep, err := s.call(ctx, request{Op: "list"})
	s.opMu.RUnlock()
	if err != nil {
		return nil, fmt.Errorf("driver: list tasks: %w", err)
	}
	out := make([]*Handle, 0, len(rep.Tasks))
	for _, t := range rep.Tasks {
		h := s.register(newHandle(t.Key, t.State))
		if t.Exited {
			h.finish(t.Exit)
		}
		out = append(out, h)
	}
	return out, nil
}

// Forget drops an ended rank's record once its exit has been reported. It
// does not wait for the supervisor.
func (s *Supervisor) Forget(key string) {
	s.opMu.RLock()
	defer s.opMu.RUnlock()
	s.mu.Lock()
	delete(s.handles, key)
	c := s.conn
	s.mu.Unlock()
	if c != nil {
		_ = s.write(c, request{Op: "forget", Key: key})
	}
}

// Lease tells the supervisor to kill every rank unless another lease comes
// within d (protocol 4; an older supervisor ignores it). It does not wait
// for an answer.
func (s *Supervisor) Lease(d time.Duration) {
	s.opMu.RLock()
	defer s.opMu.RUnlock()
	s.mu.Lock()
	c := s.conn
	s.mu.Unlock()
	if c != nil {
		_ = s.write(c, request{Op: "lease", LeaseMS: max(d.Milliseconds(), 1)})
	}
}

// KillAll is the machine dying, for demos and tests: SIGKILL to the
// supervisor serving dir and to the process group of every rank its
// journal holds as alive. It returns how many rank groups were alive.
func KillAll(dir string) int {
	if b, err := os.ReadFile(filepath.Join(dir, "supervisor.pid")); err == nil {
		if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && pid > 0 {
			cmdline, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
			if strings.Contains(string(cmdline), "supervise") {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	}
	recs, _ := readJournal(dir)
	n := 0
	for _, r := range recs {
		if !r.Exited && alive(r.State) && syscall.Kill(-r.State.PID, syscall.SIGKILL) == nil {
			n++
		}
	}
	return n
}
