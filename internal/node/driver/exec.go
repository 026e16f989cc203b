// Package driver runs ranks as processes under one supervisor per node: a
// small long-lived process (`gangway-shim supervise`, or the gangway
// binary's hidden `supervise` command) that is the parent of every rank the
// node runs. It starts each rank in a session and process group of its
// own, reaps it, kills what the rank left behind in its group, and keeps
// the exit status until the agent has reported it, in memory and in an
// append-only journal. The supervisor outlives agent restarts, so a new
// agent re-attaches to live ranks and learns how ranks that ended while it
// was away exited; a supervisor that dies is replaced by one that reads the
// journal and watches the ranks it left.
//
// One supervisor per node rather than one shim per rank: starting a rank
// then costs one fork and exec, not a Go runtime start and a handful of
// files (the per-rank shim was most of an agent's CPU per short rank).
//
// Kept output is bounded, as kubelet and Nomad bound theirs: each stream
// keeps at most LogFiles files of LogFileBytes (by default 5 of 10 MiB),
// stdout.log and the rotated stdout.log.1 (newest) … stdout.log.4, the
// oldest dropped. The rank writes a pipe, and the supervisor's one copier
// goroutine (an epoll set of every rank's pipes: no goroutine per rank)
// splices it into the files, splitting at the bound, so a flood leaves
// exactly the bound on disk. Measured (BenchmarkRankOutput, 1 GiB from dd
// on a 2-core VM), the rank writes as fast through the pipe (1.8 GB/s) as
// into a file of its own, and the copy costs the supervisor about 0.45 s
// of CPU per GiB; starting a rank costs the same CPU as before (about
// 175 µs of the supervisor's, BenchmarkStartKeptOutput). The alternative,
// rotating the files the rank writes itself from outside (copytruncate),
// copies as much, loses what is written during the copy and bounds the
// disk only by how often it looks. A rank that outruns the copier blocks
// on its full pipe (64 KiB), as under any container runtime; a full disk
// never blocks it: output that cannot be written is dropped. Discarded
// output goes to /dev/null with no pipe. The bounds hold while no agent
// runs, and across a supervisor's death: the rank holds its pipes' read
// ends too (as fds 3 and 4, never read), so while no supervisor runs its
// writes fill the pipe and wait rather than die of SIGPIPE, and the next
// supervisor opens the pipes again through /proc/PID/fd/1 and 2 (the
// journal holds the files, bounds and pipe inodes). A rank that closes
// fds 3 and 4 and writes while no supervisor runs gets SIGPIPE.
//
// It imports the standard library, golang.org/x/sys and
// internal/base/fastjson.
package driver

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Spec is one process to run.
type Spec struct {
	// Key names the task uniquely on this node (job/attempt/rank).
	Key     string
	Command []string
	// Env is the complete environment, KEY=VALUE. The command is looked
	// up in its PATH.
	Env []string
	Dir string
	// StateDir holds stdout.log and stderr.log, and their rotated files.
	StateDir string
	// DiscardOutput sends stdout and stderr to /dev/null instead.
	DiscardOutput bool
	// LogFileBytes and LogFiles bound each kept stream: at most LogFiles
	// files (the current one and the rotated ones) of LogFileBytes each.
	// 0: DefaultLogFileBytes, DefaultLogFiles.
	LogFileBytes int64
	LogFiles     int
	// MemoryBytes and CPUMillis are limits applied through cgroups where
	// the host can (0: none).
	MemoryBytes int64
	CPUMillis   int64
	// CgroupName names the per-task cgroup.
	CgroupName string
	// RunAs is the account the process runs under, with its group as its
	// only group; nil: the supervisor's own (the agent's user, with its
	// groups). Its kept output's files are created owned by it, mode 0600.
	// Switching needs a supervisor running as root; the agent decides
	// whether to ask (see the agent's runAs).
	RunAs *Account
	// Cleanup, when set, is a command the supervisor runs (as itself,
	// with no environment of the rank's) after the process has ended,
	// however it ended, and before it reports the exit: for a rank whose
	// process is a shim for something the process's death does not end
	// (a container), so that "exited" still means nothing of the rank
	// runs. It must be idempotent: a supervisor that dies while it runs
	// runs it again from the journal.
	Cleanup []string
}

// Account is a Unix identity, by number: ranks may run as users with no
// entry in the node's passwd file.
type Account struct {
	UID int `json:"uid"`
	GID int `json:"gid"`
}

// credential is how a process is started as a: the uid, the gid, and the
// gid alone as its groups, so it never keeps the supervisor's.
func (a *Account) credential() *syscall.Credential {
	return &syscall.Credential{Uid: uint32(a.UID), Gid: uint32(a.GID), Groups: []uint32{uint32(a.GID)}}
}

// Exit is how a process ended.
type Exit struct {
	Code   int    `json:"code"`
	Signal string `json:"signal,omitempty"`
	// Message explains an exit that is not the process's own (it vanished
	// while no supervisor watched it).
	Message string `json:"message,omitempty"`
	// Fenced: the supervisor killed the rank because its lease lapsed
	// with no agent renewing it (Message says so).
	Fenced bool `json:"fenced,omitempty"`
}

// State identifies a started process.
type State struct {
	PID       int       `json:"pid"`
	StartTick uint64    `json:"startTick"`
	StartedAt time.Time `json:"startedAt"`
}

// Handle is a running (or finished) process.
type Handle struct {
	key   string
	state State

	done chan struct{} // closed when the process has exited
	mu   sync.Mutex    // guards exit and ended
	exit Exit
	// ended is set by the first finish; later ones are ignored.
	ended bool
}

func newHandle(key string, st State) *Handle {
	return &Handle{key: key, state: st, done: make(chan struct{})}
}

// Key is the task key the process was started under.
func (h *Handle) Key() string { return h.key }

// PID is the process's pid, which is also its process group id.
func (h *Handle) PID() int { return h.state.PID }

// StartedAt is when the process was started.
func (h *Handle) StartedAt() time.Time { return h.state.StartedAt }

// Done is closed once the process has exited.
func (h *Handle) Done() <-chan struct{} { return h.done }

// Exit returns how the process ended; valid after Done is closed.
func (h *Handle) Exit() Exit {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.exit
}

// Signal sends sig to the whole process group.
func (h *Handle) Signal(sig syscall.Signal) error {
	select {
	case <-h.done:
		return nil
	default:
	}
	if err := syscall.Kill(-h.state.PID, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("signal %v to group %d: %w", sig, h.state.PID, err)
	}
	return nil
}

// Stop sends SIGTERM, waits up to grace, then SIGKILL, and waits for the
// exit or for ctx to end (the agent stopping: the signals are sent, and the
// supervisor records the exit for the next agent).
func (h *Handle) Stop(ctx context.Context, grace time.Duration) {
	_ = h.Signal(syscall.SIGTERM)
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-h.done:
		return
	case <-ctx.Done():
		return
	case <-t.C:
	}
	h.Kill(ctx)
}

// Kill sends SIGKILL to the group at once and waits for the exit or for
// ctx to end.
func (h *Handle) Kill(ctx context.Context) {
	_ = h.Signal(syscall.SIGKILL)
	select {
	case <-h.done:
	case <-ctx.Done():
	}
}

// finish records the exit and closes Done; only the first call counts.
func (h *Handle) finish(e Exit) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.ended {
		return
	}
	h.ended = true
	h.exit = e
	close(h.done)
}

// unknownExit is the exit of a process that ended unwatched.
var unknownExit = Exit{Code: -1, Signal: "killed", Message: "ended while no supervisor watched it; exit status unknown"}

// exitFromStatus turns a wait status into an exit: the process's code, or
// 128+N when signal N killed it (as a shell reports it).
func exitFromStatus(ws syscall.WaitStatus) Exit {
	if ws.Signaled() {
		return Exit{Code: 128 + int(ws.Signal()), Signal: ws.Signal().String()}
	}
	return Exit{Code: ws.ExitStatus()}
}

// alive reports whether the process in st still runs (and is the same
// process, not a reused pid).
func alive(st State) bool {
	if err := syscall.Kill(st.PID, 0); err != nil {
		return false
	}
	if st.StartTick != 0 && startTick(st.PID) != st.StartTick {
		return false
	}
	// A zombie is dead for our purposes.
	b, err := os.ReadFile("/proc/" + strconv.Itoa(st.PID) + "/stat")
	if err == nil {
		if f := statFields(string(b)); len(f) > 0 && f[0] == "Z" {
			return false
		}
	}
	return true
}

// startTick reads the process start time from /proc/PID/stat (field 22),
// which tells a live process from a later one with the same pid.
func startTick(pid int) uint64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	f := statFields(string(b))
	// f[0] is field 3 (state); field 22 is f[19].
	if len(f) < 20 {
		return 0
	}
	v, _ := strconv.ParseUint(f[19], 10, 64)
	return v
}

// statFields returns /proc/PID/stat's fields after the command name.
func statFields(s string) []string {
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return nil
	}
	return strings.Fields(s[i+1:])
}
