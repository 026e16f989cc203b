package controller

import (
	"fmt"
	"slices"
	"time"

	"github.com/gangway/gangway/internal/api"
	"github.com/gangway/gangway/internal/controlplane/store"
	"github.com/gangway/gangway/internal/launch"
	"github.com/gangway/gangway/internal/scheduler"
)

// The lifecycle decides what becomes of jobs and nodes: a running attempt
// stops (failed, timed out, hung, preempted, interrupted, cancelled or
// succeeded), a stopping one ends once its agents have let go, an ended
// one's job finishes, is requeued or restarts after a backoff, a silent
// node is lost. It reads only what the pass hands it (the store as the pass
// read it, the rank statuses reported since, the agents' heartbeats and the
// pass's time) and writes nothing: its decisions are values the applier
// (apply.go) turns into store writes.

// heartbeats is what the lifecycle reads of the agents' heartbeats: when a
// node was last heard from, and the assignments revision it has carried
// out. *Liveness is one.
type heartbeats interface {
	Get(node string) (at time.Time, ack int64)
	// Run: since when node's heartbeats have come unbroken, its last
	// one, and whether this leader heard from it at all.
	Run(node string) (since, last time.Time, ok bool)
}

var _ heartbeats = (*Liveness)(nil)

// lifecycle holds what one pass decides from. Its methods only read it, so
// the pass's goroutines share one.
type lifecycle struct {
	v store.View // the store as the pass read it
	// reported are the rank statuses handed over since (by task key); they
	// win over v.Ranks.
	reported    map[string]*api.RankStatus
	beats       heartbeats
	nodeTimeout time.Duration // a node silent longer is lost
	fence       Fencing       // ... if a witness of it was heard throughout
	now         time.Time     // the pass's time
	preflight   Preflight
}

// step is the write a decision needs.
type step uint8

const (
	// stepNone: nothing changes.
	stepNone step = iota
	// stepStamp: every rank of the running attempt runs; RunningAt is
	// set.
	stepStamp
	// stepStop: the attempt is stopping; its assignments go in the same
	// write, whose revision its agents must then acknowledge.
	stepStop
	// stepStopEnd: the attempt stops and ends in one write, since nothing
	// of it can still run (every rank exited, or its node is lost).
	stepStopEnd
	// stepEnd: a stopping attempt ended, its agents having let go.
	stepEnd
	// stepFinish: a job cancelled before it ran is done.
	stepFinish
	// stepAmend: an ended attempt's cause is rewritten (attribute.go);
	// the job stays in its phase.
	stepAmend
	// stepSignal: the running attempt's assignments are written again
	// with decision.signal and the attempt's new SignalSeq (signal.go).
	stepSignal
)

// decision is the lifecycle's answer for one job: the job as it is to be
// written (a copy: the view's is left as it was; nil with stepNone) and
// the write it needs.
type decision struct {
	step   step
	job    *api.Job
	signal string // with stepSignal: what the ranks are sent
}

// decide is the decision for a live job: one running or stopping, or one
// waiting to be placed whose user cancelled it.
func (l *lifecycle) decide(j *api.Job) decision {
	switch j.Status.Phase {
	case api.JobRunning:
		return l.running(j)
	case api.JobStopping:
		return l.stopping(j)
	case api.JobPending, api.JobRestarting:
		if j.Status.CancelRequested {
			return l.finish(j.Clone(), api.JobCancelled, "cancelled before it ran")
		}
		if e := l.lateSuccess(j); e >= 0 {
			m := j.Clone()
			reason := succeedLate(m, e)
			return l.finish(m, api.JobSucceeded, reason)
		}
		if m := l.amendEnded(j); m != nil {
			return decision{step: stepAmend, job: m}
		}
	}
	return decision{}
}

// lateSuccess is the index in j's attempts of the ended attempt, the last
// one or the one before a running one, that a lost node cut short after
// every one of its ranks had exited 0: the exits of the lost node's ranks
// came late (its agent reports them from the supervisor's journal once it
// is back). The job is done and must not run again. -1 if none.
//
// An exit counts only if it came before the attempt was stopped: after
// that, the ranks on the nodes still up were sent their stop signal, and a
// rank may exit 0 on it without having finished.
func (l *lifecycle) lateSuccess(j *api.Job) int {
	as := j.Status.Attempts
	i := len(as) - 1
	if i >= 0 && as[i].Phase != api.AttemptEnded {
		i-- // the one before a live attempt
	}
	if i < 0 || as[i].Phase != api.AttemptEnded {
		return -1
	}
	e := &as[i]
	if c := api.CauseOf(e); c != api.CauseNodeLost && c != api.CauseGPUFault && c != api.CauseNodeFault {
		return -1
	}
	procs := launch.Processes(j, e)
	if len(procs) == 0 {
		return -1
	}
	for _, r := range procs {
		rs := l.rank(j.ID, e.Number, e.Placement[r].Rank)
		if rs == nil || rs.State != api.RankExited || rs.ExitCode != 0 || rs.Signal != "" ||
			rs.FinishedAt.IsZero() || (!e.StoppingAt.IsZero() && rs.FinishedAt.After(e.StoppingAt)) {
			return -1
		}
	}
	return i
}

// succeedLate rewrites attempt i of m, which lateSuccess found, as the
// success it was, and returns the job's reason.
func succeedLate(m *api.Job, i int) string {
	e := &m.Status.Attempts[i]
	was := e.Reason
	if e.Charged && m.Status.Restarts > 0 {
		m.Status.Restarts-- // the restart it counted was for nothing
	}
	e.Outcome, e.Cause, e.Charged = api.OutcomeSucceeded, api.CauseSucceeded, false
	e.Reason = fmt.Sprintf("every rank exited 0 (reported after the attempt ended: %s)", was)
	return fmt.Sprintf("attempt %d succeeded: every rank exited 0 before %s; the exits were reported late", e.Number, was)
}

// nodeLost returns the node as it is to be written when it is ready but
// has been silent past the node timeout, and how long it has been silent;
// nil if it stays as it is.
func (l *lifecycle) nodeLost(name string, n *api.Node) (*api.Node, time.Duration) {
	if n.Status.State != api.NodeReady {
		return nil, 0
	}
	at, _ := l.beats.Get(name)
	silent := l.now.Sub(at)
	if silent <= l.nodeTimeout {
		return nil, 0
	}
	reason := fmt.Sprintf("no heartbeat for %.1fs", silent.Seconds())
	if l.fence.Witnesses > 0 && len(n.Status.Witnesses)+len(n.Status.PrevWitnesses) > 0 {
		// Its agent keeps its ranks through an outage of the control
		// plane that its witnesses confirm: the node is lost only once a
		// witness of the set it holds (either set, while a change may not
		// have reached it; an agent with none fences on its own) has been
		// heard long enough to have told it otherwise, or after the
		// longest outage ranks outlive.
		w, ok := l.heardWitness(n.Status.Witnesses)
		if _, prevOK := l.heardWitness(n.Status.PrevWitnesses); !prevOK {
			ok = false
		}
		switch {
		case ok:
			if w != "" {
				reason += fmt.Sprintf(" while its witness %s was heard", w)
			}
		case silent > l.fence.MaxOutage+l.nodeTimeout:
			reason += " (no witness heard either; past the longest outage agents ride out)"
		default:
			return nil, 0
		}
	}
	m := n.Clone()
	m.Status.State = api.NodeLost
	m.Status.LostAt = l.now
	m.Status.Reason = reason
	if _, last, heard := l.beats.Run(name); heard {
		m.Status.LastSeenAt = last // a leader that never heard it leaves it unknown
	}
	return m, silent
}

// heardWitness names a witness of ws whose heartbeats have come unbroken
// for the fencing's witness run, up to now; ok if there is one, or if ws
// is empty (an agent with no witness fences on its own).
func (l *lifecycle) heardWitness(ws []string) (string, bool) {
	for _, w := range ws {
		since, last, ok := l.beats.Run(w)
		if ok && l.now.Sub(last) <= l.fence.StreakGap && l.now.Sub(since) >= l.fence.WitnessRun {
			return w, true
		}
	}
	return "", len(ws) == 0
}

// rank is a rank's newest status: reported, else as the view has it.
func (l *lifecycle) rank(job string, attempt, rank int) *api.RankStatus {
	k := api.TaskKey(job, attempt, rank)
	if r := l.reported[k]; r != nil {
		return r
	}
	return l.v.Ranks[k]
}

// running decides for a job whose attempt runs: whether it stops and why,
// or whether it is now running in full.
func (l *lifecycle) running(j *api.Job) decision {
	a := j.Status.Current()
	if a == nil || a.Phase != api.AttemptRunning {
		return decision{}
	}
	outcome, reason := api.Outcome(""), ""
	if j.Status.CancelRequested {
		outcome, reason = api.OutcomeCancelled, "cancelled by user"
	}
	if e := l.lateSuccess(j); e >= 0 && reason == "" {
		m := j.Clone()
		succeedLate(m, e)
		d := l.stop(m, api.OutcomeSuperseded, fmt.Sprintf("attempt %d had succeeded (its ranks' exits were reported late)", m.Status.Attempts[e].Number))
		d.job.Status.Current().Cause = api.CauseOf(&j.Status.Attempts[e]) // the loss that made it run again
		return d
	}
	for _, node := range a.Nodes() {
		if reason != "" {
			break
		}
		n := l.v.Nodes[node]
		switch {
		case n == nil || n.Status.State == api.NodeLost:
			outcome, reason = api.OutcomeFailed, fmt.Sprintf("node %s lost", node)
		case n.Status.Evicting(l.now):
			outcome, reason = api.OutcomeInterrupted, fmt.Sprintf("node %s is draining", node)
			if n.Status.DrainReason != "" {
				reason += " (" + n.Status.DrainReason + ")"
			}
		}
	}
	cause := api.Cause("")
	if reason == "" {
		if why, c := l.faulted(a); why != "" {
			outcome, reason, cause = api.OutcomeInterrupted, why, c
		}
	}
	if a.Preflight != nil && reason == "" {
		d, _ := l.preflightDone(j, a)
		return d
	}
	if reason == "" {
		// Before the ranks' exits: a rank that dies of a requeue's
		// checkpoint signal is requeued, not failed.
		outcome, reason = l.requeued(j, a)
	}
	done, running := 0, 0
	procs := launch.Processes(j, a)
	var first *rankFailure // the failure the attempt is charged to (attribute.go)
	for _, r := range procs {
		rp := a.Placement[r]
		rs := l.rank(j.ID, a.Number, rp.Rank)
		if rs == nil {
			continue
		}
		switch {
		case rs.State == api.RankFailedStart, rs.State == api.RankExited && rs.ExitCode != 0:
			first = first.before(&rankFailure{rp, rs})
		case rs.State == api.RankExited:
			done++
		case rs.State == api.RankRunning:
			running++
		}
	}
	avoid := "" // a node the job is kept off from now on
	if first != nil && reason == "" {
		outcome, reason, cause = first.verdict(a)
		if first.rs.NodeFault {
			avoid = first.rp.Node
		}
	}
	if reason == "" && !a.PreemptedAt.IsZero() {
		ck := l.v.Ckpts[j.ID]
		switch {
		case ck != nil && ck.Time.After(a.PreemptedAt):
			outcome, reason = api.OutcomePreempted, fmt.Sprintf("preempted for job %s after checkpointing step %d", a.PreemptedFor, ck.Step)
		case l.now.Sub(a.PreemptedAt) >= j.Spec.PreemptionGrace():
			outcome, reason = api.OutcomePreempted, fmt.Sprintf("preempted for job %s; no checkpoint within the %s grace", a.PreemptedFor, j.Spec.PreemptionGrace())
		}
	}
	if reason == "" && j.Spec.TimeLimit > 0 && l.now.Sub(a.CreatedAt) > j.Spec.TimeLimit.D() {
		outcome, reason = api.OutcomeTimedOut, fmt.Sprintf("ran past its time limit of %s", j.Spec.TimeLimit.D())
	}
	if reason == "" && j.Spec.HangTimeout > 0 {
		if pr := l.v.Progress[j.ID]; pr != nil && pr.Attempt == a.Number && !pr.Time.IsZero() {
			if silent := l.now.Sub(pr.Time); silent > j.Spec.HangTimeout.D() {
				outcome, reason = api.OutcomeFailed, fmt.Sprintf("no progress for %s (hangTimeout %s)", silent.Round(time.Second), j.Spec.HangTimeout.D())
			}
		}
	}
	if reason == "" {
		if d, ok := l.signalling(j, a); ok {
			return d
		}
	}
	// Most running jobs need no write: clone only those that do.
	switch {
	case reason != "" && cause != "":
		d := l.stop(j.Clone(), outcome, reason)
		d.job.Status.Attempts[len(d.job.Status.Attempts)-1].Cause = cause
		if avoid != "" && !slices.Contains(d.job.Status.Avoid, avoid) {
			d.job.Status.Avoid = append(d.job.Status.Avoid, avoid)
		}
		return d
	case reason != "":
		return l.stop(j.Clone(), outcome, reason)
	case done == len(procs):
		return l.stop(j.Clone(), api.OutcomeSucceeded, "every rank exited 0")
	case a.RunningAt.IsZero() && running+done == len(procs):
		m := j.Clone()
		m.Status.Current().RunningAt = l.now
		return decision{step: stepStamp, job: m}
	}
	if m := l.amendEnded(j); m != nil {
		// The attempt before this one turned out to have ended for
		// something outside the job: its restart is given back.
		return decision{step: stepAmend, job: m}
	}
	return decision{}
}

// faulted says why attempt a must stop because a node or GPU it runs on
// left service for its health, and the cause to charge; "" if none did.
// Its gang restarts elsewhere from its newest checkpoint, requeued as an
// interruption: a sick GPU is no fault of the job's and uses up none of
// its restarts.
func (l *lifecycle) faulted(a *api.Attempt) (string, api.Cause) {
	for _, rp := range a.Placement {
		n := l.v.Nodes[rp.Node]
		if n == nil {
			continue
		}
		if n.Status.Fault != "" {
			cause := n.Status.FaultCause
			if cause == "" {
				cause = api.CauseNodeFault
			}
			return fmt.Sprintf("node %s out of service: %s", rp.Node, n.Status.Fault), cause
		}
		for _, gi := range rp.GPUs {
			for k := range n.GPUs {
				if g := &n.GPUs[k]; g.Index == gi && g.Health == api.GPUFaulty {
					return fmt.Sprintf("GPU %d of node %s out of service: %s", gi, rp.Node, g.Fault), api.CauseGPUFault
				}
			}
		}
	}
	return "", ""
}

func sigSuffix(sig string) string {
	if sig == "" {
		return ""
	}
	return " (" + sig + ")"
}

// stop tears the current attempt of m down: its assignments go in the
// same transaction that marks it stopping. That transaction's revision is
// the stop revision agents must acknowledge; it is the job's ModRevision
// afterwards (see stopping).
func (l *lifecycle) stop(m *api.Job, outcome api.Outcome, reason string) decision {
	a := m.Status.Current()
	a.Phase = api.AttemptStopping
	a.Outcome = outcome
	a.Reason = reason
	a.Cause = api.CauseOf(a) // from outcome and reason; the faulted path overwrites it with its own
	a.StoppingAt = l.now
	if l.allExited(m, a) {
		// Nothing can still run: end now, in the transaction that removes
		// the assignments, without waiting for the agents' acknowledgement.
		l.end(m)
		return decision{step: stepStopEnd, job: m}
	}
	m.Status.Phase = api.JobStopping
	m.Status.Reason = fmt.Sprintf("stopping attempt %d: %s", a.Number, reason)
	return decision{step: stepStop, job: m}
}

// allExited reports whether every process of the attempt has reported a
// terminal state (or its node is lost, so its agent fenced it).
func (l *lifecycle) allExited(j *api.Job, a *api.Attempt) bool {
	for _, r := range launch.Processes(j, a) {
		rp := a.Placement[r]
		if n := l.v.Nodes[rp.Node]; n == nil || n.Status.State == api.NodeLost {
			continue
		}
		if rs := l.rank(j.ID, a.Number, r); rs == nil || !rs.State.Terminal() {
			return false
		}
	}
	return true
}

// stopping decides for a job whose attempt is stopping: it ends once every
// process has exited, or every agent still up has acknowledged the stop.
func (l *lifecycle) stopping(j *api.Job) decision {
	a := j.Status.Current()
	if a == nil {
		return decision{}
	}
	// The stop revision: recorded by older versions; else the revision
	// the cache saw the attempt's assignments deleted at; else the job's
	// own revision, which the stop transaction set (a later write only
	// moves it later, which is safe, merely slower).
	stopRev := a.StopRevision
	if stopRev == 0 {
		stopRev = l.v.Stops[j.ID][a.Number]
	}
	if stopRev == 0 || stopRev > j.ModRevision {
		stopRev = j.ModRevision
	}
	if !l.allExited(j, a) {
		for _, node := range a.Nodes() {
			n := l.v.Nodes[node]
			if n == nil || n.Status.State == api.NodeLost {
				continue // a lost node's agent has fenced itself
			}
			if _, ack := l.beats.Get(node); ack < stopRev {
				return decision{}
			}
		}
	}
	m := j.Clone()
	if o, ok := l.outsideCause(j, a); ok {
		amend(&m.Status, m.Status.Current(), o)
	}
	l.end(m)
	return decision{step: stepEnd, job: m}
}

// end marks the current attempt of m Ended and moves the job on: finished,
// requeued or restarting with backoff.
func (l *lifecycle) end(m *api.Job) {
	ma := m.Status.Current()
	ma.Phase = api.AttemptEnded
	ma.EndedAt = l.now
	st := &m.Status
	st.RequeueRequested = false // done with, whatever ended the attempt
	done := func(phase api.JobPhase, reason string) {
		st.Phase, st.Reason, st.FinishedAt = phase, reason, l.now
	}
	switch {
	case ma.Outcome == api.OutcomeSucceeded:
		done(api.JobSucceeded, "")
	case ma.Outcome == api.OutcomeSuperseded:
		done(api.JobSucceeded, ma.Reason)
	case st.CancelRequested || ma.Outcome == api.OutcomeCancelled:
		done(api.JobCancelled, "cancelled by user")
	case ma.Outcome == api.OutcomeRequeued:
		st.Phase, st.NotBefore = api.JobPending, l.now
		st.Reason = fmt.Sprintf("attempt %d %s; waits to be placed again", ma.Number, ma.Reason)
	case ma.Outcome == api.OutcomeTimedOut:
		done(api.JobFailed, fmt.Sprintf("attempt %d %s", ma.Number, ma.Reason))
	case ma.Cause == api.CausePreflight:
		st.Phase, st.NotBefore = api.JobRestarting, l.now
		st.Reason = fmt.Sprintf("attempt %d: %s", ma.Number, ma.Reason)
	case ma.Outcome == api.OutcomeInterrupted, ma.Outcome == api.OutcomePreempted:
		st.Phase = api.JobRestarting
		st.NotBefore = l.now
		st.Reason = fmt.Sprintf("attempt %d %s (%s); requeued", ma.Number, ma.Outcome, ma.Reason)
	case !api.CauseOf(ma).Charged():
		// Failed for something outside the job (a lost node): restart
		// elsewhere at once, using up no restart.
		st.Phase = api.JobRestarting
		st.NotBefore = l.now
		st.Reason = requeueReason(ma)
	default:
		maxR := m.Spec.RestartLimit()
		if st.Restarts >= maxR {
			done(api.JobFailed, fmt.Sprintf("attempt %d failed: %s; no restarts left (maxRestarts %d)", ma.Number, ma.Reason, maxR))
			return
		}
		backoff := restartBackoff(m.Spec.RestartBackoff.D(), crashStreak(st.Attempts)-1)
		st.Restarts++
		ma.Charged = true
		st.Phase = api.JobRestarting
		st.NotBefore = l.now.Add(backoff)
		st.Reason = fmt.Sprintf("attempt %d failed: %s; restart %d of %d after %s", ma.Number, ma.Reason, st.Restarts, maxR, backoff)
	}
}

// finish ends m, which has no attempt to stop, in phase for reason.
func (l *lifecycle) finish(m *api.Job, phase api.JobPhase, reason string) decision {
	m.Status.Phase = phase
	m.Status.Reason = reason
	m.Status.FinishedAt = l.now
	return decision{step: stepFinish, job: m}
}

// preempting is a victim of the scheduler's plan as it is to be written:
// its attempt told to checkpoint and stop for pe.For. nil: the job is
// gone, its attempt is not running, or it is being preempted already.
func (l *lifecycle) preempting(pe scheduler.Preemption) *api.Job {
	j := l.v.Jobs[pe.JobID]
	if j == nil {
		return nil
	}
	a := j.Status.Current()
	if a == nil || a.Phase != api.AttemptRunning || !a.PreemptedAt.IsZero() || !a.RequeuedAt.IsZero() {
		return nil
	}
	m := j.Clone()
	ma := m.Status.Current()
	ma.PreemptedAt = l.now
	ma.PreemptedFor = pe.For
	ma.SignalSeq = ma.NextSignalSeq()
	ma.SignalSent = ma.SignalSeq
	m.Status.Reason = fmt.Sprintf("preempted for job %s (%s); %s sent, stopping within %s", pe.For, pe.Reason, m.Spec.Signal(), m.Spec.PreemptionGrace())
	return m
}

// BackoffReset is how long an attempt must run for the failures before it
// to stop counting towards the restart backoff: the kubelet's figure for
// CrashLoopBackOff. Backoff is for a program that crashes as it starts; one
// that ran this long and then failed is not in such a loop.
const BackoffReset = 10 * time.Minute

// crashStreak counts the newest attempts that failed by the program's own
// doing (an exit, a hang) without having run BackoffReset, down to one that
// ran that long. Failures that were not the program's (a lost node, a
// fault, a preemption) neither count nor end the streak: restarting on
// another node at once is right, and they say nothing of the program.
func crashStreak(attempts []api.Attempt) int {
	n := 0
	for i := len(attempts) - 1; i >= 0; i-- {
		a := &attempts[i]
		if c := api.CauseOf(a); c != api.CauseUserError && c != api.CauseHang {
			continue
		}
		if !a.RunningAt.IsZero() && a.EndedAt.Sub(a.RunningAt) >= BackoffReset {
			break
		}
		n++
	}
	return n
}

// restartBackoff is base doubled once per restart so far, capped at
// api.MaxRestartBackoff. It doubles step by step: a shift by the restart
// count wraps to 0 from the 55th restart of a 1s base, which would restart
// the job at once.
func restartBackoff(base time.Duration, restarts int) time.Duration {
	restarts = max(restarts, 0)
	d := base
	for i := 0; i < restarts && d > 0 && d < api.MaxRestartBackoff; i++ {
		d *= 2
	}
	return min(d, api.MaxRestartBackoff)
}
