// Package driver runs ranks as processes. The exec driver starts each rank
// under a small shim (the gangway binary's hidden task-shim command) in its
// own session and process group; the shim waits for the rank and records its
// exit status in a file, so an agent that restarts can re-attach to ranks it
// did not start and still learn how they ended.
//
// It imports the standard library and golang.org/x/sys only.
package driver

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Spec is one process to run.
type Spec struct {
	Command []string
	// Env is the complete environment, KEY=VALUE.
	Env []string
	Dir string
	// StateDir holds stdout.log, stderr.log, state.json and exit.json.
	StateDir string
	// MemoryBytes and CPUMillis are limits the shim applies through
	// cgroups where it can (0: none).
	MemoryBytes int64
	CPUMillis   int64
	// CgroupName names the per-task cgroup.
	CgroupName string
}

// Exit is how a process ended.
type Exit struct {
	Code   int    `json:"code"`
	Signal string `json:"signal,omitempty"`
	// Message explains an exit that is not the process's own (it could
	// not start, or it vanished while no agent watched it).
	Message string `json:"message,omitempty"`
}

// State is what the driver persists to re-attach.
type State struct {
	PID       int       `json:"pid"`
	StartTick uint64    `json:"startTick"`
	StartedAt time.Time `json:"startedAt"`
}

// Handle is a running (or finished) process.
type Handle struct {
	dir   string
	state State
	cmd   *exec.Cmd // nil when adopted

	done chan struct{} // closed when the process has exited
	mu   sync.Mutex    // guards exit
	exit Exit
}

// PID is the shim's pid, which is also the process group id.
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

// Stop sends SIGTERM, waits up to grace, then SIGKILL, and waits for exit.
func (h *Handle) Stop(grace time.Duration) {
	_ = h.Signal(syscall.SIGTERM)
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-h.done:
		return
	case <-t.C:
	}
	_ = h.Signal(syscall.SIGKILL)
	<-h.done
}

// Kill sends SIGKILL to the group at once and waits for exit.
func (h *Handle) Kill() {
	_ = h.Signal(syscall.SIGKILL)
	<-h.done
}

// Exec starts processes through the shim at ShimPath.
type Exec struct {
	// ShimPath is the gangway executable; the driver runs
	// `ShimPath task-shim ...`.
	ShimPath string
}

// Start launches spec. An error means nothing is running.
func (d *Exec) Start(spec Spec) (*Handle, error) {
	if len(spec.Command) == 0 {
		return nil, errors.New("driver: empty command")
	}
	if err := os.MkdirAll(spec.StateDir, 0o755); err != nil {
		return nil, fmt.Errorf("driver: state dir: %w", err)
	}
	stdout, err := os.OpenFile(filepath.Join(spec.StateDir, "stdout.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("driver: stdout: %w", err)
	}
	defer stdout.Close()
	stderr, err := os.OpenFile(filepath.Join(spec.StateDir, "stderr.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("driver: stderr: %w", err)
	}
	defer stderr.Close()
	args := []string{"task-shim", "--exit-file", filepath.Join(spec.StateDir, "exit.json")}
	if spec.MemoryBytes > 0 || spec.CPUMillis > 0 {
		args = append(args, "--cgroup", spec.CgroupName,
			"--memory-bytes", strconv.FormatInt(spec.MemoryBytes, 10),
			"--cpu-millis", strconv.FormatInt(spec.CPUMillis, 10))
	}
	args = append(args, "--")
	args = append(args, spec.Command...)
	cmd := exec.Command(d.ShimPath, args...)
	cmd.Env = spec.Env
	cmd.Dir = spec.Dir
	cmd.Stdout, cmd.Stderr = stdout, stderr
	// A session of its own: the rank outlives an agent restart, and one
	// signal to the group reaches the shim and every child.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("driver: start %s: %w", spec.Command[0], err)
	}
	h := &Handle{dir: spec.StateDir, cmd: cmd, done: make(chan struct{})}
	h.state = State{PID: cmd.Process.Pid, StartTick: startTick(cmd.Process.Pid), StartedAt: time.Now()}
	if err := writeJSONFile(filepath.Join(spec.StateDir, "state.json"), h.state); err != nil {
		_ = syscall.Kill(-h.state.PID, syscall.SIGKILL)
		_ = cmd.Wait()
		return nil, fmt.Errorf("driver: %w", err)
	}
	go func() {
		err := cmd.Wait()
		e := exitFromWait(err, cmd.ProcessState)
		// The shim's record is the rank's own status; without one the shim
		// itself was killed and the wait status says how.
		var rec Exit
		if readJSONFile(filepath.Join(h.dir, "exit.json"), &rec) == nil {
			e = rec
		}
		// Whatever the rank left behind in its group dies with it, so that
		// "exited" means nothing of the rank runs.
		_ = syscall.Kill(-h.state.PID, syscall.SIGKILL)
		h.finish(e)
	}()
	return h, nil
}

// Adopt re-attaches to a process started by an earlier agent, from its
// state directory. If it has already ended, the handle is done at once.
// ok is false when the directory holds no started process.
func (d *Exec) Adopt(stateDir string) (h *Handle, ok bool, err error) {
	var st State
	if err := readJSONFile(filepath.Join(stateDir, "state.json"), &st); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, false, nil
		}
		return nil, false, fmt.Errorf("driver: adopt %s: %w", stateDir, err)
	}
	h = &Handle{dir: stateDir, state: st, done: make(chan struct{})}
	if alive(st) {
		go func() {
			for alive(st) {
				time.Sleep(200 * time.Millisecond)
			}
			_ = syscall.Kill(-st.PID, syscall.SIGKILL)
			h.finish(h.readExit())
		}()
		return h, true, nil
	}
	h.finish(h.readExit())
	return h, true, nil
}

func (h *Handle) readExit() Exit {
	var e Exit
	if err := readJSONFile(filepath.Join(h.dir, "exit.json"), &e); err != nil {
		return Exit{Code: -1, Signal: "killed", Message: "ended while no agent watched it and left no exit status"}
	}
	return e
}

func (h *Handle) finish(e Exit) {
	h.mu.Lock()
	h.exit = e
	h.mu.Unlock()
	close(h.done)
}

// exitFromWait turns the shim's wait status into the rank's exit: the shim
// exits with the rank's code, or dies by a signal sent to the group.
func exitFromWait(err error, ps *os.ProcessState) Exit {
	if ps == nil {
		return Exit{Code: -1, Message: fmt.Sprint(err)}
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return Exit{Code: 128 + int(ws.Signal()), Signal: ws.Signal().String()}
	}
	return Exit{Code: ps.ExitCode()}
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
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", st.PID))
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
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
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

func writeJSONFile(path string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

func readJSONFile(path string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}
