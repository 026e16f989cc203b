package driver

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gangway/gangway/internal/base/fastjson"
	"golang.org/x/sys/unix"
)

// idleExit is how long a supervisor with no agent connected and no live
// rank waits before it exits; firstAgent is how long a new one waits for
// its first agent.
const (
	idleExit   = time.Second
	firstAgent = 10 * time.Second
)

// SuperviseMain is the hidden `supervise --dir DIR` command the agent runs
// once per data directory. It detaches (a new session, its output appended
// to DIR/supervisor.log), returns once the supervisor serves, and the
// detached process runs until it has neither a live rank nor an agent for
// idleExit. A second supervisor for the same directory exits at once.
func SuperviseMain(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("supervise", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := fs.String("dir", "", "the agent's data directory")
	fg := fs.Bool("foreground", false, "serve in this process (internal)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *dir == "" {
		fmt.Fprintln(stderr, "supervise: --dir is required")
		return 2
	}
	if *fg {
		if err := serve(*dir, stderr); err != nil {
			fmt.Fprintln(stderr, "supervise:", err)
			return 1
		}
		return 0
	}
	if err := detach(*dir); err != nil {
		fmt.Fprintln(stderr, "supervise:", err)
		return 1
	}
	return 0
}

// detach starts the serving supervisor in a session of its own and waits
// until it answers (or dies).
func detach(dir string) error {
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find own executable: %w", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	logf, err := os.OpenFile(filepath.Join(dir, "supervisor.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		return err
	}
	defer devnull.Close()
	p, err := os.StartProcess(exe, []string{exe, "supervise", "--foreground", "--dir", dir}, &os.ProcAttr{
		Dir: "/", Files: []*os.File{devnull, logf, logf}, Sys: &syscall.SysProcAttr{Setsid: true},
	})
	if err != nil {
		return fmt.Errorf("start supervisor: %w", err)
	}
	exited := make(chan error, 1)
	go func() { _, err := p.Wait(); exited <- err }()
	deadline := time.After(10 * time.Second)
	for {
		if c, err := net.Dial("unix", socketName(dir)); err == nil {
			c.Close()
			// The detached supervisor keeps running; its exit is reaped by
			// whoever inherits it.
			go func() { <-exited }()
			return nil
		}
		select {
		case err := <-exited:
			// It exited: either another supervisor already serves this
			// directory, or it failed (see supervisor.log).
			if c, derr := net.Dial("unix", socketName(dir)); derr == nil {
				c.Close()
				return nil
			}
			return fmt.Errorf("supervisor exited (%v); see %s", err, filepath.Join(dir, "supervisor.log"))
		case <-deadline:
			_ = p.Kill()
			return fmt.Errorf("supervisor did not answer within 10s; see %s", filepath.Join(dir, "supervisor.log"))
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// supervisor is the serving process's state.
type supervisor struct {
	dir     string
	log     io.Writer
	devnull *os.File // read-only: every rank's stdin
	sink    *os.File // write-only /dev/null: discarded output
	paths   pathCache
	copier  *copier // copies kept output; its goroutine runs for serve's life

	mu        sync.Mutex // guards everything below
	recs      map[string]*record
	byPID     map[int]*record      // live children
	outputs   map[int][]*logStream // the live children's kept output, by pid
	conns     map[*sconn]bool
	journal   *os.File
	jsize     int64
	quietFrom time.Time // since when no agent is connected
	hadAgent  bool
	exiting   bool
	ln        net.Listener
	retired   chan struct{} // closed by a retire: exit now
	build     string        // buildID of this process's executable
	// leaseUntil: every rank is killed once it passes with no new lease
	// (the agent is dead, frozen or cut off); zero: no lease held.
	leaseUntil time.Time
	fencedPID  map[int]bool // ranks the lease's lapse killed, until reaped
	// cleanups are the running cleanup commands (cleanup.go), by pid:
	// the ranks whose exit waits for them.
	cleanups map[int]*pendingExit
}

// sconn is one agent connection.
type sconn struct {
	c   net.Conn
	wmu sync.Mutex // serialises writes
}

func (sc *sconn) send(r *reply) {
	b := encodeLine(r)
	sc.wmu.Lock()
	defer sc.wmu.Unlock()
	_ = sc.c.SetWriteDeadline(time.Now().Add(5 * time.Second))
	_, _ = sc.c.Write(b)
}

// LightRuntime sets the Go runtime of a process that waits on I/O nearly
// all the time and shares its node with the ranks (the agent and the
// supervisor): one P, so the runtime never spins threads on the ranks'
// cores looking for work, and a GC that runs a quarter as often (their
// heaps are a few MiB). $GOMAXPROCS and $GOGC, when set, win. On a 2-core
// machine emulating 16 nodes this cut their CPU by about a quarter.
func LightRuntime() {
	if os.Getenv("GOMAXPROCS") == "" {
		runtime.GOMAXPROCS(1)
	}
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(400)
	}
}

// serve is the supervisor itself.
func serve(dir string, logw io.Writer) error {
	LightRuntime()
	ln, err := net.Listen("unix", socketName(dir))
	if err != nil {
		if errors.Is(err, syscall.EADDRINUSE) {
			return nil // another supervisor serves dir
		}
		return fmt.Errorf("listen: %w", err)
	}
	defer ln.Close()
	// Orphans of the ranks (daemonised children) come to us, not to init,
	// and are reaped with the rest.
	_ = unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
	sigc := make(chan os.Signal, 1)
	signal.Notify(sigc, syscall.SIGCHLD)
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		return err
	}
	sink, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	cp, err := newCopier()
	if err != nil {
		return err
	}
	s := &supervisor{dir: dir, log: logw, devnull: devnull, sink: sink, copier: cp, byPID: map[int]*record{}, outputs: map[int][]*logStream{}, conns: map[*sconn]bool{},
		quietFrom: time.Now(), ln: ln, retired: make(chan struct{}), build: buildID("/proc/self/exe"), cleanups: map[int]*pendingExit{}}
	if s.recs, err = readJournal(dir); err != nil {
		return err
	}
	var unclean []*record // ended unwatched, their cleanup not known done
	for _, r := range s.recs {
		if !r.Exited {
			switch {
			case alive(r.State):
				r.watched = true
				if r.logs != nil {
					s.adoptLogs(r)
				}
			case len(r.cleanup) > 0:
				unclean = append(unclean, r)
			default:
				r.Exited, r.Exit = true, unknownExit
			}
		}
	}
	if s.journal, s.jsize, err = writeJournal(dir, s.recs); err != nil {
		return err
	}
	s.mu.Lock()
	for _, r := range unclean {
		s.endedLocked(r, unknownExit)
	}
	s.mu.Unlock()
	// Written aside and renamed: a reader (the client, a test, the chaos
	// harness) never sees the file empty, as it could between
	// WriteFile's truncation and its write.
	pidTmp := filepath.Join(dir, "supervisor.pid.tmp")
	if os.WriteFile(pidTmp, []byte(strconv.Itoa(os.Getpid())+"\n"), 0o644) == nil {
		_ = os.Rename(pidTmp, filepath.Join(dir, "supervisor.pid"))
	}
	fmt.Fprintf(logw, "%s supervisor %d serving %s (%d tasks from the journal)\n", time.Now().Format(time.RFC3339), os.Getpid(), dir, len(s.recs))

	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); s.accept(ln) }()
	go func() { defer wg.Done(); cp.run() }()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	why := "no ranks and no agent"
	for {
		select {
		case <-sigc:
		case <-tick.C:
			s.checkLease(time.Now())
			s.pollWatched()
			s.noteStartTicks()
		case <-s.retired:
			why = "retired by an agent of another build"
		}
		s.reap()
		if s.maybeExit() {
			break
		}
	}
	ln.Close()
	cp.stop()
	wg.Wait()
	fmt.Fprintf(logw, "%s supervisor %d exiting: %s\n", time.Now().Format(time.RFC3339), os.Getpid(), why)
	return s.journal.Close()
}

// maybeExit decides, under the lock, to exit once idle long enough.
func (s *supervisor) maybeExit() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.exiting {
		return true // retired
	}
	if len(s.conns) > 0 || len(s.byPID) > 0 || len(s.cleanups) > 0 || s.watchedLocked() {
		return false
	}
	wait := idleExit
	if !s.hadAgent {
		wait = firstAgent
	}
	if time.Since(s.quietFrom) < wait {
		return false
	}
	s.exiting = true
	return true
}

func (s *supervisor) watchedLocked() bool {
	for _, r := range s.recs {
		if r.watched && !r.Exited {
			return true
		}
	}
	return false
}

func (s *supervisor) accept(ln net.Listener) {
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		if !sameUser(c) {
			c.Close()
			continue
		}
		sc := &sconn{c: c}
		s.mu.Lock()
		if s.exiting {
			s.mu.Unlock()
			c.Close()
			continue
		}
		s.conns[sc] = true
		s.mu.Unlock()
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.serveConn(sc)
			s.mu.Lock()
			delete(s.conns, sc)
			s.quietFrom = time.Now()
			s.mu.Unlock()
			c.Close()
		}()
	}
}

// sameUser reports whether the peer runs as this process's user: the
// supervisor starts any command it is sent.
func sameUser(c net.Conn) bool {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return false
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return false
	}
	var cred *unix.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil || cerr != nil {
		return false
	}
	return int(cred.Uid) == os.Getuid()
}

func (s *supervisor) serveConn(sc *sconn) {
	r := bufio.NewReaderSize(sc.c, 64<<10)
	for {
		line, err := readLine(r)
		if err != nil {
			return
		}
		s.mu.Lock()
		s.hadAgent = true // not before a request: detach's probe is no agent
		s.mu.Unlock()
		var req request
		if err := fastjson.Unmarshal(line, &req); err != nil {
			sc.send(&reply{Err: "bad request: " + err.Error()})
			continue
		}
		switch req.Op {
		case "start":
			st, err := s.start(req.Key, req.Spec)
			if err != nil {
				sc.send(&reply{ID: req.ID, Err: err.Error()})
			} else {
				sc.send(&reply{ID: req.ID, State: &st})
			}
		case "list":
			sc.send(&reply{ID: req.ID, Tasks: s.list()})
		case "forget":
			s.forget(req.Key)
			sc.send(&reply{ID: req.ID})
		case "hello":
			sc.send(&reply{ID: req.ID, Version: protocolVersion, Build: s.build})
		case "lease":
			s.renewLease(time.Duration(req.LeaseMS) * time.Millisecond)
			if req.ID != 0 {
				sc.send(&reply{ID: req.ID})
			}
		case "retire":
			if err := s.retire(); err != nil {
				sc.send(&reply{ID: req.ID, Err: err.Error()})
				continue
			}
			sc.send(&reply{ID: req.ID})
			s.closeConns()
			return
		default:
			sc.send(&reply{ID: req.ID, Err: fmt.Sprintf("%s %q", unknownOp, req.Op)})
		}
	}
}

// appendLocked writes one journal entry, compacting the journal when it
// has grown large.
func (s *supervisor) appendLocked(e entry) {
	b := encodeLine(e)
	n, err := s.journal.Write(b)
	s.jsize += int64(n)
	if err != nil {
		fmt.Fprintf(s.log, "%s journal write: %v\n", time.Now().Format(time.RFC3339), err)
	}
	if s.jsize > compactAt {
		f, size, err := writeJournal(s.dir, s.recs)
		if err != nil {
			fmt.Fprintf(s.log, "%s journal compaction: %v\n", time.Now().Format(time.RFC3339), err)
			return
		}
		s.journal.Close()
		s.journal, s.jsize = f, size
	}
}

func (s *supervisor) start(key string, ws *wireSpec) (State, error) {
	if key == "" || ws == nil || len(ws.Argv) == 0 {
		return State{}, errors.New("start: need a key and a command")
	}
	path, err := s.paths.look(ws.Argv[0], ws.Env, ws.Dir)
	if err != nil {
		return State{}, err
	}
	argv := append([]string{path}, ws.Argv[1:]...)
	var cred *syscall.Credential // nil: the rank runs as the supervisor
	if ws.RunAs != nil {
		cred = ws.RunAs.credential()
	}
	if ws.MemoryBytes > 0 || ws.CPUMillis > 0 {
		exe, err := os.Executable()
		if err != nil {
			return State{}, fmt.Errorf("find own executable: %w", err)
		}
		cg := []string{exe, "cg-exec", "--cgroup", ws.Cgroup,
			"--memory-bytes", strconv.FormatInt(ws.MemoryBytes, 10),
			"--cpu-millis", strconv.FormatInt(ws.CPUMillis, 10)}
		if ws.RunAs != nil {
			// cg-exec joins the cgroup as the supervisor (moving a
			// process into a cgroup takes root), then becomes the account.
			cg = append(cg, "--uid", strconv.Itoa(ws.RunAs.UID), "--gid", strconv.Itoa(ws.RunAs.GID))
			cred = nil
		}
		argv = append(append(cg, "--"), argv...)
		path = exe
	}
	// Kept output goes through a pipe per stream into rotating files (see
	// logcap.go); discarded output straight to /dev/null, at no cost.
	fds := [3]int{int(s.devnull.Fd()), int(s.sink.Fd()), int(s.sink.Fd())}
	var logs []*logStream
	closeLogs := func() {
		for _, l := range logs {
			s.copier.drop(l)
			l.close()
		}
	}
	defer func() {
		for i := 1; i < 3; i++ {
			if fds[i] != int(s.sink.Fd()) {
				syscall.Close(fds[i]) // the rank has its copy, or never started
			}
		}
	}()
	for i, path := range []string{ws.Stdout, ws.Stderr} {
		if path == "" {
			continue
		}
		ls, w, err := newLogStream(path, ws.LogFileBytes, ws.LogFiles, ws.RunAs, int(s.sink.Fd()), s.log)
		if err == nil {
			logs, fds[i+1] = append(logs, ls), w
			err = s.copier.add(ls)
		}
		if err != nil {
			closeLogs()
			return State{}, fmt.Errorf("%s: %w", [2]string{"stdout", "stderr"}[i], err)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.exiting {
		closeLogs()
		return State{}, fmt.Errorf("start %s: the supervisor is exiting", key)
	}
	if r := s.recs[key]; r != nil && !r.Exited {
		closeLogs()
		return State{}, fmt.Errorf("start %s: already running as pid %d", key, r.State.PID)
	}
	files := []uintptr{uintptr(fds[0]), uintptr(fds[1]), uintptr(fds[2])}
	var conf *logConf
	if len(logs) > 0 {
		// The rank also holds its pipes' read ends (fds 3 and 4), so
		// that, while no supervisor runs, its writes fill the pipe and
		// wait for the next one instead of killing it with SIGPIPE.
		conf = &logConf{Paths: [2]string{ws.Stdout, ws.Stderr}, FileBytes: ws.LogFileBytes, Files: ws.LogFiles, Owner: ws.RunAs}
		k := 0
		for i, p := range conf.Paths {
			if p != "" {
				conf.Inodes[i] = logs[k].pipeInode()
				files = append(files, uintptr(logs[k].pipe))
				k++
			}
		}
	}
	// Under the lock from fork to record, so the reaper finds the pid.
	pid, err := syscall.ForkExec(path, argv, &syscall.ProcAttr{
		Dir:   ws.Dir,
		Env:   ws.Env,
		Files: files,
		// A session of its own: one signal to the group reaches the rank
		// and everything it started, and nothing else. With a credential,
		// the child sets its groups, gid and uid before it changes to Dir
		// and execs: the rank needs the account's access to both.
		//
		// It dies with the supervisor (SIGKILL when the supervisor's
		// thread that started it ends, which in Go is the process): the
		// supervisor holds the ranks' lease, and a rank no lease holder
		// can fence could run beside its gang's next attempt once the
		// server declares the node lost.
		Sys: &syscall.SysProcAttr{Setsid: true, Credential: cred, Pdeathsig: syscall.SIGKILL},
	})
	if err != nil {
		closeLogs()
		return State{}, fmt.Errorf("start %s: %w", ws.Argv[0], err)
	}
	// The start tick (against pid reuse, for a later supervisor adopting
	// the rank) is read on the next tick: most ranks that end sooner never
	// need it, and reading /proc here cost a tenth of a start.
	r := &record{Key: key, State: State{PID: pid, StartedAt: time.Now()}, logs: conf, cleanup: ws.Cleanup}
	s.recs[key] = r
	if len(logs) > 0 {
		s.outputs[pid] = logs
	}
	s.byPID[pid] = r
	st := r.State
	s.appendLocked(entry{Key: key, State: &st, Logs: conf, Cleanup: ws.Cleanup})
	return r.State, nil
}

// reap collects every child that has exited.
func (s *supervisor) reap() {
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		if pid <= 0 || err != nil {
			return
		}
		s.mu.Lock()
		r := s.byPID[pid]
		if r == nil {
			s.cleanedLocked(pid, ws) // a cleanup command, or an orphan of some rank
			s.mu.Unlock()
			continue
		}
		delete(s.byPID, pid)
		// Whatever the rank left in its group dies with it, so that
		// "exited" means nothing of the rank runs.
		_ = syscall.Kill(-pid, syscall.SIGKILL)
		s.drainLocked(pid)
		s.endedLocked(r, exitFromStatus(ws))
		s.mu.Unlock()
	}
}

// noteStartTicks journals the start tick of every live child that has
// none yet.
func (s *supervisor) noteStartTicks() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for pid, r := range s.byPID {
		if r.State.StartTick != 0 {
			continue
		}
		if t := startTick(pid); t != 0 {
			r.State.StartTick = t
			st := r.State
			s.appendLocked(entry{Key: r.Key, State: &st})
		}
	}
}

// pollWatched notices the end of ranks an earlier supervisor started.
func (s *supervisor) pollWatched() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range s.recs {
		if r.watched && !r.Exited && r.cleaning == 0 && !alive(r.State) {
			_ = syscall.Kill(-r.State.PID, syscall.SIGKILL)
			s.drainLocked(r.State.PID)
			s.endedLocked(r, unknownExit)
		}
	}
}

// drainLocked copies what an ended rank's pipes still hold: an exit
// reported means the rank's output is on disk.
func (s *supervisor) drainLocked(pid int) {
	for _, l := range s.outputs[pid] {
		if l.pump(pumpBudget) {
			s.copier.drop(l)
		}
	}
	delete(s.outputs, pid)
}

// adoptLogs takes over copying the output of a rank an earlier supervisor
// started. A stream it cannot take (the rank replaced its fd 1 or 2) is
// left alone: whatever holds it decides.
func (s *supervisor) adoptLogs(r *record) {
	c := r.logs
	for i, path := range c.Paths {
		if path == "" {
			continue
		}
		ls, err := adoptLogStream(r.State.PID, i+1, c.Inodes[i], path, c.FileBytes, c.Files, c.Owner, int(s.sink.Fd()), s.log)
		if err == nil {
			if err = s.copier.add(ls); err != nil {
				ls.close()
			}
		}
		if err != nil {
			fmt.Fprintf(s.log, "%s %s: %v\n", time.Now().Format(time.RFC3339), r.Key, err)
			continue
		}
		s.outputs[r.State.PID] = append(s.outputs[r.State.PID], ls)
	}
}

// renewLease sets the lease to d from now.
func (s *supervisor) renewLease(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.leaseUntil = time.Now().Add(d)
}

// checkLease kills every rank once the lease has lapsed: the agent that
// renews it on the server's word is dead, frozen or cut off, and the
// server will start these gangs elsewhere. As the agent's own fence: every
// group stopped first, then all killed, so that no rank sees a node-mate
// die and exits on its own first.
func (s *supervisor) checkLease(now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.leaseUntil.IsZero() || now.Before(s.leaseUntil) {
		return
	}
	s.leaseUntil = time.Time{}
	var pids []int
	for pid := range s.byPID {
		pids = append(pids, pid)
	}
	for _, r := range s.recs {
		if r.watched && !r.Exited && r.cleaning == 0 {
			pids = append(pids, r.State.PID)
		}
	}
	if len(pids) == 0 {
		return
	}
	for _, pid := range pids {
		_ = syscall.Kill(-pid, syscall.SIGSTOP)
	}
	if s.fencedPID == nil {
		s.fencedPID = map[int]bool{}
	}
	for _, pid := range pids {
		_ = syscall.Kill(-pid, syscall.SIGKILL)
		s.fencedPID[pid] = true
	}
	fmt.Fprintf(s.log, "%s lease lapsed with no agent renewing it: fenced, killed %d ranks\n", now.Format(time.RFC3339), len(pids))
}

func (s *supervisor) exitedLocked(r *record, e Exit) {
	if s.fencedPID[r.State.PID] {
		delete(s.fencedPID, r.State.PID)
		e.Fenced = true
		if e.Message == "" {
			e.Message = "no agent renewed the node's lease"
		}
	}
	r.Exited, r.Exit = true, e
	x := e
	s.appendLocked(entry{Key: r.Key, Exit: &x})
	ev := &reply{Event: "exit", Key: r.Key, Exit: &x}
	for sc := range s.conns {
		sc.send(ev)
	}
}

func (s *supervisor) list() []record {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]record, 0, len(s.recs))
	for _, r := range s.recs {
		out = append(out, *r)
	}
	return out
}

// retire makes an idle supervisor exit so that its agent, built anew,
// starts one of its own build: a supervisor otherwise outlives every
// upgrade on a node that always has an agent connected. It refuses while a
// rank lives, since the ranks are its children. The listener closes before
// the answer, so the agent's next dial starts the new supervisor.
func (s *supervisor) retire() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.byPID) > 0 || len(s.cleanups) > 0 || s.watchedLocked() {
		return errors.New("retire: busy: a rank lives")
	}
	if !s.exiting {
		s.exiting = true
		s.ln.Close()
		close(s.retired)
	}
	return nil
}

// closeConns hangs up on every agent (after a retire).
func (s *supervisor) closeConns() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for sc := range s.conns {
		sc.c.Close()
	}
}

func (s *supervisor) forget(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.recs[key]
	if r == nil || !r.Exited {
		return // never forget a live rank
	}
	delete(s.recs, key)
	s.appendLocked(entry{Key: key, Gone: true})
}

// pathCache remembers where lookPath found a command, for a second: the
// same few commands start over and over, and each lookup is a stat per
// $PATH entry. A command that has gone since fails at exec instead, with
// the same error a rank would see.
type pathCache struct {
	mu sync.Mutex
	m  map[pathKey]cachedPath
}

type pathKey struct{ file, path, dir string }

type cachedPath struct {
	found string
	at    time.Time
}

func (c *pathCache) look(file string, env []string, dir string) (string, error) {
	path := envPath(env)
	k := pathKey{file, path, ""}
	if relativeLookup(file, path) {
		k.dir = dir // every rank has a working directory of its own
	}
	c.mu.Lock()
	hit, ok := c.m[k]
	c.mu.Unlock()
	if ok && time.Since(hit.at) < time.Second {
		return hit.found, nil
	}
	found, err := lookPath(file, env, dir)
	if err != nil {
		return "", err
	}
	c.mu.Lock()
	if c.m == nil || len(c.m) > 1000 {
		c.m = map[pathKey]cachedPath{}
	}
	c.m[k] = cachedPath{found, time.Now()}
	c.mu.Unlock()
	return found, nil
}

// relativeLookup reports whether looking file up through path depends on
// the working directory: a relative file with a slash, or a relative (or
// empty, meaning ".") entry in path.
func relativeLookup(file, path string) bool {
	if strings.Contains(file, "/") {
		return !filepath.IsAbs(file)
	}
	for _, d := range filepath.SplitList(path) {
		if !filepath.IsAbs(d) {
			return true
		}
	}
	return false
}

// envPath is the rank's $PATH: the last PATH= in env, else ours.
func envPath(env []string) string {
	path := os.Getenv("PATH")
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			path = v
		}
	}
	return path
}

// lookPath finds file as a rank's exec would: through the rank's own PATH,
// relative paths against its working directory.
func lookPath(file string, env []string, dir string) (string, error) {
	check := func(p string) error {
		fi, err := os.Stat(p)
		if err != nil {
			return err
		}
		if fi.IsDir() || fi.Mode()&0o111 == 0 {
			return fmt.Errorf("%s: %w", p, fs.ErrPermission)
		}
		return nil
	}
	rel := func(p string) string {
		if !filepath.IsAbs(p) && dir != "" {
			return filepath.Join(dir, p)
		}
		return p
	}
	if strings.Contains(file, "/") {
		if err := check(rel(file)); err != nil {
			return "", fmt.Errorf("cannot start %s: %w", file, err)
		}
		return rel(file), nil
	}
	for _, d := range filepath.SplitList(envPath(env)) {
		if d == "" {
			d = "."
		}
		if p := rel(filepath.Join(d, file)); check(p) == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("cannot start %s: executable file not found in $PATH", file)
}
