package agent

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/gangway/gangway/internal/api"
	"github.com/gangway/gangway/internal/api/client"
	"github.com/gangway/gangway/internal/node/container"
	"github.com/gangway/gangway/internal/node/driver"
)

// assignmentLoop long-polls the node's assignments and applies each list.
func (a *Agent) assignmentLoop(ctx context.Context) {
	var index int64
	var last map[string]api.Assignment // the list at index, by task key
	var under int                      // the registration index was fetched under
	for ctx.Err() == nil {
		a.mu.Lock()
		ok, fenced, reg := a.registered, a.fenced, a.registrations
		a.mu.Unlock()
		if !ok || fenced {
			// A fenced agent follows no list; once it is not, it starts
			// from the whole list, not from one it received meanwhile.
			index, last = 0, nil
			sleepCtx(ctx, 100*time.Millisecond)
			continue
		}
		if reg != under {
			// Registered anew (the server may have had the node lost and
			// ended its attempts): the whole list, no delta on the old.
			index, last, under = 0, nil, reg
		}
		a.mu.Lock()
		fences := a.fences
		a.mu.Unlock()
		l, err := a.fetchAssignments(ctx, index)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			a.log.Debug("fetch assignments failed", "err", err)
			sleepCtx(ctx, 300*time.Millisecond)
			continue
		}
		a.mu.Lock()
		stale := a.fenced || a.fences != fences || a.registrations != under
		a.mu.Unlock()
		if stale {
			// Asked before a fence or a new registration: a long poll
			// answered while this node was cut off can arrive once the
			// cable is back (TCP retransmits it), holding ranks of
			// attempts that ended with the node's loss. Ask again.
			a.log.Info("dropping an assignment list asked for before the node was fenced or registered again")
			index, last = 0, nil
			continue
		}
		if l.Delta {
			full, ok := undelta(l, last)
			if !ok {
				// Not the list we hold: ask for all of it.
				a.log.Warn("assignment delta names tasks this agent does not hold; fetching the whole list")
				index = 0
				continue
			}
			l = full
		}
		if !a.apply(ctx, l) {
			index, last = 0, nil
			continue
		}
		index = l.Revision
		last = make(map[string]api.Assignment, len(l.Assignments))
		for _, asg := range l.Assignments {
			last[asg.TaskKey()] = asg
		}
	}
}

// undelta is the whole list a delta answer stands for, given the list the
// agent held at the index it asked with.
func undelta(l api.AssignmentList, last map[string]api.Assignment) (api.AssignmentList, bool) {
	out := api.AssignmentList{Revision: l.Revision, Assignments: l.Assignments}
	for _, k := range l.Unchanged {
		asg, ok := last[k]
		if !ok {
			return l, false
		}
		out.Assignments = append(out.Assignments, asg)
	}
	return out, true
}

func (a *Agent) fetchAssignments(ctx context.Context, index int64) (api.AssignmentList, error) {
	q := client.AssignmentQuery{Node: a.cfg.Name}
	if index > 0 {
		// Only what changed comes in full; what did not, by name.
		q.Index, q.Wait, q.Delta = index, 10*time.Second, true
	}
	l, err := a.server.Assignments(ctx, q)
	if err != nil {
		return l, fmt.Errorf("assignments: %w", err)
	}
	return l, fresh(l, index)
}

// fresh refuses a list older than the one the agent holds, at index:
// applying it would stop the ranks assigned in between. A server answers
// none (its cache waits to catch up); this keeps an agent safe from one
// that would.
func fresh(l api.AssignmentList, index int64) error {
	if l.Revision < index {
		return fmt.Errorf("assignments: the list is at revision %d, older than the %d this agent holds; not applied", l.Revision, index)
	}
	return nil
}

// apply starts assigned ranks not yet running and stops running ranks no
// longer assigned; false: it did nothing, the agent being fenced.
func (a *Agent) apply(ctx context.Context, l api.AssignmentList) bool {
	want := map[string]api.Assignment{}
	for _, asg := range l.Assignments {
		want[asg.TaskKey()] = asg
	}
	// A list that arrives after the lease lapsed (the agent was frozen
	// past it, and its fence tick has not come yet) may hold attempts the
	// server has since moved elsewhere: fence first, start nothing.
	a.checkFence()
	a.mu.Lock()
	if a.fenced {
		a.mu.Unlock()
		return false
	}
	var start []api.Assignment
	var stop []*task
	type sig struct {
		h   *driver.Handle
		sig string
		key string
	}
	var signals []sig
	for k, asg := range want {
		t, ok := a.tasks[k]
		if !ok {
			if _, done := a.ran[k]; done {
				a.log.Warn("assignment names a rank this node already ran; not starting it again", "task", k)
				continue
			}
			start = append(start, asg)
			continue
		}
		if !t.hasAsg {
			t.asg, t.hasAsg = asg, true
		}
		if asg.SignalSeq > t.signalSeq && asg.Signal != "" {
			t.signalSeq = asg.SignalSeq
			if t.h != nil {
				signals = append(signals, sig{t.h, asg.Signal, k})
			}
		}
	}
	for k, t := range a.tasks {
		if _, ok := want[k]; !ok && !t.stopped {
			t.stopped = true
			stop = append(stop, t)
		}
	}
	a.desiredRev = l.Revision
	a.mu.Unlock()

	for _, sg := range signals {
		if n, ok := signalNames[sg.sig]; ok {
			a.log.Info("signalling rank", "task", sg.key, "signal", sg.sig)
			_ = sg.h.Signal(n)
		}
	}
	sort.Slice(start, func(i, j int) bool { return start[i].TaskKey() < start[j].TaskKey() })
	for _, asg := range start {
		a.start(ctx, asg)
	}
	for _, t := range stop {
		if t.h != nil {
			a.log.Info("stopping rank", "task", t.asg.TaskKey())
			a.bg.Add(1)
			go func() { defer a.bg.Done(); t.h.Stop(ctx, t.asg.Grace.D()) }()
		}
	}
	if len(start)+len(stop) > 0 {
		a.kickNow()
	}
	return true
}

// start launches one rank; a failure to start is reported as its status.
// Its file-system work is one directory and the rank's two log files (the
// supervisor opens those). The checkpoint directory is the workload's to
// make, with its parents, when it first writes a checkpoint: most jobs
// never do, and it sits on a file system all nodes share. A rank with a
// run-as account is the exception: it could not make it under a root of
// root's, so the agent makes it, the account's (see runas.go).
func (a *Agent) start(ctx context.Context, asg api.Assignment) {
	k := asg.TaskKey()
	dir := a.taskDir(k)
	t := &task{asg: asg, hasAsg: true, dir: dir, status: a.baseStatus(&asg)}
	t.status.State = api.RankStarting
	fail := func(err error) {
		t.status.State = api.RankFailedStart
		t.status.ExitCode = -1
		t.status.Message = err.Error()
		t.status.FinishedAt = time.Now()
		a.log.Warn("rank failed to start", "task", k, "err", err)
	}
	probe := isProbe(&asg)
	if probe {
		// A preflight probe first asks this node's own checks.
		if why := a.unfit(); why != "" {
			fail(errors.New(why))
			a.mu.Lock()
			a.tasks[k] = t
			a.mu.Unlock()
			return
		}
	}
	plan, refused := planRunAs(asg.RunAs, a.selfAccount())
	if refused != "" {
		fail(errors.New(refused))
		a.mu.Lock()
		a.tasks[k] = t
		a.mu.Unlock()
		return
	}
	a.dirMu.Lock()
	err := makeTaskDir(dir, plan)
	a.dirMu.Unlock()
	for name, content := range asg.Files {
		if err != nil {
			break
		}
		if name != filepath.Base(name) || name == "." || name == ".." {
			err = fmt.Errorf("assignment file %q: must be a plain file name", name)
			break
		}
		err = writeTaskFile(dir, name, content, plan)
	}
	if err == nil && plan.private && asg.CheckpointD != "" {
		// Not a reason to fail the rank: the workload may still make it,
		// or use it as it is.
		if made, cerr := makeCheckpointDir(asg.CheckpointD, plan); cerr != nil {
			a.log.Warn("checkpoint directory not made for the rank's account", "task", k, "err", cerr)
		} else if made {
			a.log.Info("made checkpoint directory", "task", k, "dir", asg.CheckpointD)
		}
	}
	if err != nil {
		fail(err)
		a.mu.Lock()
		a.tasks[k] = t
		a.mu.Unlock()
		return
	}
	env := runAsEnv(os.Environ(), plan, dir)
	own := len(env) // the agent's; the rank's own variables follow
	keys := make([]string, 0, len(asg.Env))
	for k := range asg.Env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	// ${NAME} in the command and env expands to the rank's own variables
	// (MASTER_PORT, GANGWAY_NODE_ADDR, GANGWAY_TASK_DIR, ...); anything
	// else is left as written.
	vars := map[string]string{"GANGWAY_TASK_DIR": dir}
	for k, v := range asg.Env {
		if _, ok := vars[k]; !ok {
			vars[k] = v
		}
	}
	expand := func(v string) string { return expandVars(v, vars) }
	for _, k := range keys {
		env = append(env, k+"="+expand(asg.Env[k]))
	}
	env = append(env, "GANGWAY_PROGRESS_FILE="+filepath.Join(dir, "progress.jsonl"), "GANGWAY_TASK_DIR="+dir)
	if asg.Env["SLURM_JOB_ID"] != "" && asg.Container == nil {
		if p, err := slurmPath(dir, a.cfg.Executable, env); err != nil {
			a.log.Warn("no srun stand-in for a Slurm job's rank", "task", k, "err", err)
		} else {
			env = append(env, "PATH="+p)
		}
	}
	cmd := make([]string, len(asg.Command))
	for i, c := range asg.Command {
		cmd[i] = expand(c)
	}
	if probe {
		cmd = append([]string{"gangway", "preflight-rank"}, cmd[1:]...)
	}
	if len(cmd) > 0 && cmd[0] == "gangway" && asg.Container == nil {
		cmd[0] = a.cfg.Executable
	}
	wd := asg.WorkingDir
	if wd == "" {
		wd = dir
	}
	spec := driver.Spec{Key: k, Command: cmd, Env: env, Dir: wd, StateDir: dir, CgroupName: cgroupName(k),
		DiscardOutput: asg.DiscardOutput, RunAs: plan.switchTo}
	if asg.Resources != nil {
		spec.MemoryBytes, spec.CPUMillis = asg.Resources.MemoryBytes, asg.Resources.CPUMillis
	}
	if asg.Logs != nil {
		spec.LogFileBytes, spec.LogFiles = asg.Logs.MaxFileBytes, asg.Logs.MaxFiles
	}
	if asg.Container != nil {
		if err = a.containerize(&spec, &asg, env[own:]); err == nil {
			spec.Env = os.Environ() // the shim's: how to reach the engine
		}
	}
	var h *driver.Handle
	if err == nil {
		h, err = a.drv.Start(spec)
	}
	if err != nil {
		fail(err)
	} else {
		t.h = h
		t.status.State = api.RankRunning
		t.status.PID = h.PID()
		t.status.StartedAt = h.StartedAt()
		a.log.Info("rank started", "task", k, "pid", h.PID(), "gpus", asg.GPUs)
	}
	a.mu.Lock()
	a.tasks[k] = t
	a.mu.Unlock()
	if t.h != nil {
		a.goAwait(ctx, t)
	}
}

// goAwait watches t's process until it exits or ctx ends; Run waits for
// every watcher before it returns.
func (a *Agent) goAwait(ctx context.Context, t *task) {
	a.bg.Add(1)
	go func() {
		defer a.bg.Done()
		select {
		case <-t.h.Done():
			a.await(t)
		case <-ctx.Done():
		}
	}()
}

// await records a rank's exit.
func (a *Agent) await(t *task) {
	e := t.h.Exit()
	tail := ""
	if e.Code != 0 && !e.Fenced {
		tail = stderrTail(t.dir) // what went wrong, for the attempt's reason
	}
	var pf *api.PreflightResult
	if isProbe(&t.asg) && e.Code == 0 {
		pf = readProbe(t.dir)
	}
	a.mu.Lock()
	t.status.Preflight = pf
	t.status.State = api.RankExited
	t.status.ExitCode = e.Code
	t.status.Pulling = ""
	t.status.Signal = e.Signal
	t.status.Message = e.Message
	t.status.FinishedAt = time.Now()
	if e.Code == 127 && e.Message != "" {
		t.status.State = api.RankFailedStart
		// A container rank's shim says when its node was at fault; its
		// words then come before the cleanup's, which met the same.
		if msg, ok := container.NodeFault(t.dir); ok {
			t.status.NodeFault, t.status.Message = true, msg
		}
	}
	switch {
	case tail != "" && t.status.State == api.RankExited && t.fence == "" && !t.stopped:
		t.status.StderrTail = tail
	case t.fence != "":
		t.status.Fenced, t.status.Message = true, t.fence
	case e.Fenced:
		// The supervisor's own fence, on the lease this agent gave it:
		// it runs its check as often as this agent does and may come
		// first. The silence is this agent's to tell, if it saw one.
		t.status.Fenced = true
		why := e.Message
		if !a.lastOK.IsZero() && !t.status.FinishedAt.Before(a.leaseUntil) {
			why = fmt.Sprintf("no answer from the server for %.1f s", t.status.FinishedAt.Sub(a.lastOK).Seconds())
		}
		t.status.Message = fmt.Sprintf("node %s fenced itself: %s", a.cfg.Name, why)
	}
	a.mu.Unlock()
	a.log.Info("rank exited", "task", t.asg.TaskKey(), "code", e.Code, "signal", e.Signal)
	if r := t.asg.Resources; r != nil && (r.MemoryBytes > 0 || r.CPUMillis > 0) && a.cfg.ReleaseLimits != nil && t.asg.Container == nil {
		if err := a.cfg.ReleaseLimits(cgroupName(t.asg.TaskKey())); err != nil {
			a.log.Warn("remove rank cgroup", "task", t.asg.TaskKey(), "err", err)
		}
	}
	a.scanProgress(t) // the last lines before exit
	a.kickNow()
}

var signalNames = map[string]syscall.Signal{
	"SIGUSR1": syscall.SIGUSR1, "SIGUSR2": syscall.SIGUSR2, "SIGINT": syscall.SIGINT,
	"SIGTERM": syscall.SIGTERM, "SIGHUP": syscall.SIGHUP,
}

func cgroupName(taskKey string) string { return "gangway-" + strings.ReplaceAll(taskKey, "/", "-") }

// watchLoop tails progress files and scans checkpoint directories.
func (a *Agent) watchLoop(ctx context.Context) {
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		a.askWitnesses(ctx)
		a.checkFence()
		a.mu.Lock()
		var ts []*task
		for _, t := range a.tasks {
			if t.h != nil && !t.stopped {
				ts = append(ts, t)
			}
		}
		a.mu.Unlock()
		for _, t := range ts {
			a.scanProgress(t)
			a.scanPull(t)
			if t.asg.WatchCkpt {
				a.scanCheckpoints(t)
			}
		}
	}
}

// scanPull notes, for a container rank waiting for its image, how far its
// shim's pull has got (container.Pulling), for the rank's status.
func (a *Agent) scanPull(t *task) {
	if t.asg.Container == nil {
		return
	}
	p := container.Pulling(t.dir)
	a.mu.Lock()
	if t.status.State == api.RankRunning {
		t.status.Pulling = p
	}
	a.mu.Unlock()
}

// scanProgress forwards complete new lines of the rank's progress file.
func (a *Agent) scanProgress(t *task) {
	// The rank's user may own t.dir: not through a symlink, nor a FIFO.
	f, err := driver.OpenRegular(filepath.Join(t.dir, "progress.jsonl"))
	if err != nil {
		return
	}
	defer f.Close()
	a.mu.Lock()
	off := t.progOff
	a.mu.Unlock()
	if _, err := f.Seek(off, 0); err != nil {
		return
	}
	r := bufio.NewReader(f)
	var lines []api.Progress
	for {
		line, err := r.ReadBytes('\n')
		if err != nil {
			break // a partial line waits for its newline
		}
		off += int64(len(line))
		var p api.Progress
		if json.Unmarshal(line, &p) != nil {
			continue
		}
		p.JobID, p.Attempt, p.Rank = t.asg.JobID, t.asg.Attempt, t.asg.Rank
		if p.Time.IsZero() {
			p.Time = time.Now()
		}
		lines = append(lines, p)
	}
	a.mu.Lock()
	t.progOff = off
	t.noteProgressLocked(lines)
	a.pendingPr = append(a.pendingPr, lines...)
	if n := len(a.pendingPr) - 1000; n > 0 {
		// The server is unreachable: keep the newest.
		a.pendingPr = append([]api.Progress(nil), a.pendingPr[n:]...)
	}
	a.mu.Unlock()
}

// CheckpointCommitted reports whether dir holds a committed checkpoint:
// gangway's COMMITTED marker, or torch.distributed.checkpoint's .metadata.
func CheckpointCommitted(dir string) bool {
	for _, m := range []string{"COMMITTED", ".metadata"} {
		if _, err := os.Stat(filepath.Join(dir, m)); err == nil {
			return true
		}
	}
	return false
}

// NewestCheckpoint returns the highest-step committed checkpoint under
// root: subdirectories named by their step number.
func NewestCheckpoint(root string) (step int64, path string, ok bool) {
	ents, err := os.ReadDir(root)
	if err != nil {
		return 0, "", false
	}
	step = -1
	for _, e := range ents {
		if !e.IsDir() {
			continue
		}
		s, err := strconv.ParseInt(e.Name(), 10, 64)
		if err != nil || s < 0 || s <= step {
			continue
		}
		p := filepath.Join(root, e.Name())
		if CheckpointCommitted(p) {
			step, path = s, p
		}
	}
	return step, path, step >= 0
}

func (a *Agent) scanCheckpoints(t *task) {
	step, path, ok := NewestCheckpoint(t.asg.CheckpointD)
	if !ok {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if last, seen := a.ckptSent[t.asg.JobID]; seen && last >= step {
		return
	}
	a.ckptSent[t.asg.JobID] = step
	a.pendingCk = append(a.pendingCk, api.CheckpointReport{JobID: t.asg.JobID, Checkpoint: api.Checkpoint{
		Step: step, Path: path, Attempt: t.asg.Attempt, Time: time.Now(),
	}})
	a.log.Info("checkpoint committed", "job_id", t.asg.JobID, "step", step)
}

// expandVars replaces ${NAME} for the names in vars and leaves everything
// else (other variables, $NAME, shell syntax) exactly as written.
func expandVars(s string, vars map[string]string) string {
	var b strings.Builder
	for {
		i := strings.Index(s, "${")
		if i < 0 {
			b.WriteString(s)
			return b.String()
		}
		j := strings.IndexByte(s[i:], '}')
		if j < 0 {
			b.WriteString(s)
			return b.String()
		}
		name := s[i+2 : i+j]
		if v, ok := vars[name]; ok {
			b.WriteString(s[:i])
			b.WriteString(v)
		} else {
			b.WriteString(s[:i+j+1])
		}
		s = s[i+j+1:]
	}
}
