package driver

import (
	"fmt"
	"os"
	"syscall"
	"time"
)

// A rank may come with a cleanup command (Spec.Cleanup): the rank's
// process is then a shim for something its death does not end (a
// container, which the engine runs, not the shim), and the command ends
// that. The supervisor runs it once the process has ended, however it
// ended (its own exit, the agent's SIGKILL after the grace, the lease's
// fence, the death of an earlier supervisor), and tells the rank's exit
// only when the command is done: so "exited", which the agent acknowledges
// and the server waits for before it starts the gang's next attempt,
// still means that nothing of the rank runs. The command runs in a
// session of its own, as the supervisor, its output in supervisor.log; it
// is not killed with the ranks. The journal keeps it with the start, so a
// supervisor that dies before the command is done runs it again.

// pendingExit is a rank whose exit waits for its cleanup command.
type pendingExit struct {
	r    *record
	exit Exit
}

// endedLocked records that r's process ended as e: at once, or once its
// cleanup command has run.
func (s *supervisor) endedLocked(r *record, e Exit) {
	if len(r.cleanup) == 0 {
		s.exitedLocked(r, e)
		return
	}
	pid, err := s.startCleanup(r.cleanup)
	if err != nil {
		fmt.Fprintf(s.log, "%s %s: cleanup: %v\n", time.Now().Format(time.RFC3339), r.Key, err)
		e.Message = joinMessage(e.Message, fmt.Sprintf("cleanup %s not run: %v", r.cleanup[0], err))
		s.exitedLocked(r, e)
		return
	}
	r.cleaning = pid
	s.cleanups[pid] = &pendingExit{r: r, exit: e}
}

// cleanedLocked tells the exit of the rank whose cleanup command pid was,
// if it was one (else pid was an orphan of some rank, now reaped).
func (s *supervisor) cleanedLocked(pid int, ws syscall.WaitStatus) {
	p := s.cleanups[pid]
	if p == nil {
		return
	}
	delete(s.cleanups, pid)
	p.r.cleaning = 0
	e := p.exit
	if !ws.Exited() || ws.ExitStatus() != 0 {
		x := exitFromStatus(ws)
		fmt.Fprintf(s.log, "%s %s: cleanup %v ended with code %d\n", time.Now().Format(time.RFC3339), p.r.Key, p.r.cleanup, x.Code)
		e.Message = joinMessage(e.Message, fmt.Sprintf("cleanup after the rank failed (code %d; see the node's supervisor.log)", x.Code))
	}
	s.exitedLocked(p.r, e)
}

// startCleanup starts argv with the supervisor's environment, its output
// appended to the supervisor's log.
func (s *supervisor) startCleanup(argv []string) (int, error) {
	path, err := s.paths.look(argv[0], os.Environ(), "/")
	if err != nil {
		return 0, err
	}
	out := s.sink.Fd()
	if f, ok := s.log.(*os.File); ok {
		out = f.Fd()
	}
	return syscall.ForkExec(path, argv, &syscall.ProcAttr{
		Dir: "/", Env: os.Environ(), Files: []uintptr{s.devnull.Fd(), out, out},
		Sys: &syscall.SysProcAttr{Setsid: true},
	})
}

func joinMessage(a, b string) string {
	if a == "" {
		return b
	}
	return a + "; " + b
}
