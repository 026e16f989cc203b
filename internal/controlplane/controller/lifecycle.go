package controller

import (
	"context"
	"fmt"
	"time"

	"github.com/gangway/gangway/internal/api"
	"github.com/gangway/gangway/internal/launch"
)

func (p *pass) rank(job string, attempt, rank int) *api.RankStatus {
	k := api.TaskKey(job, attempt, rank)
	if r := p.reported[k]; r != nil {
		return r
	}
	return p.v.Ranks[k]
}

func (p *pass) running(ctx context.Context, j *api.Job) {
	a := j.Status.Current()
	if a == nil || a.Phase != api.AttemptRunning {
		return
	}
	outcome, reason := api.Outcome(""), ""
	if j.Status.CancelRequested {
		outcome, reason = api.OutcomeCancelled, "cancelled by user"
	}
	for _, node := range a.Nodes() {
		if reason != "" {
			break
		}
		n := p.v.Nodes[node]
		switch {
		case n == nil || n.Status.State == api.NodeLost:
			outcome, reason = api.OutcomeFailed, fmt.Sprintf("node %s lost", node)
		case n.Status.Draining:
			outcome, reason = api.OutcomeInterrupted, fmt.Sprintf("node %s is draining", node)
		}
	}
	done, running := 0, 0
	procs := launch.Processes(j, a)
	for _, r := range procs {
		rp := a.Placement[r]
		rs := p.rank(j.ID, a.Number, rp.Rank)
		if rs == nil {
			continue
		}
		switch {
		case rs.State == api.RankFailedStart && reason == "":
			outcome, reason = api.OutcomeFailed, fmt.Sprintf("rank %d on %s could not start: %s", rp.Rank, rp.Node, rs.Message)
		case rs.State == api.RankExited && rs.ExitCode != 0 && reason == "" && !a.PreemptedAt.IsZero():
			// Being preempted: a rank that dies of the checkpoint signal
			// (or exits after saving) is stopping as asked, not failing.
			outcome, reason = api.OutcomePreempted, fmt.Sprintf("preempted for job %s; rank %d exited with code %d%s after the checkpoint signal",
				a.PreemptedFor, rp.Rank, rs.ExitCode, sigSuffix(rs.Signal))
		case rs.State == api.RankExited && rs.ExitCode != 0 && reason == "":
			outcome, reason = api.OutcomeFailed, fmt.Sprintf("rank %d on %s exited with code %d%s", rp.Rank, rp.Node, rs.ExitCode, sigSuffix(rs.Signal))
		case rs.State == api.RankExited:
			done++
		case rs.State == api.RankRunning:
			running++
		}
	}
	if reason == "" && !a.PreemptedAt.IsZero() {
		ck := p.v.Ckpts[j.ID]
		switch {
		case ck != nil && ck.Time.After(a.PreemptedAt):
			outcome, reason = api.OutcomePreempted, fmt.Sprintf("preempted for job %s after checkpointing step %d", a.PreemptedFor, ck.Step)
		case p.now.Sub(a.PreemptedAt) >= j.Spec.PreemptionGrace():
			outcome, reason = api.OutcomePreempted, fmt.Sprintf("preempted for job %s; no checkpoint within the %s grace", a.PreemptedFor, j.Spec.PreemptionGrace())
		}
	}
	if reason == "" && j.Spec.TimeLimit > 0 && p.now.Sub(a.CreatedAt) > j.Spec.TimeLimit.D() {
		outcome, reason = api.OutcomeTimedOut, fmt.Sprintf("ran past its time limit of %s", j.Spec.TimeLimit.D())
	}
	if reason == "" && j.Spec.HangTimeout > 0 {
		if pr := p.v.Progress[j.ID]; pr != nil && pr.Attempt == a.Number && !pr.Time.IsZero() {
			if silent := p.now.Sub(pr.Time); silent > j.Spec.HangTimeout.D() {
				outcome, reason = api.OutcomeFailed, fmt.Sprintf("no progress for %s (hangTimeout %s)", silent.Round(time.Second), j.Spec.HangTimeout.D())
			}
		}
	}
	// Most running jobs need no write: clone only those that do.
	switch {
	case reason != "":
		p.stop(ctx, j.Clone(), outcome, reason)
	case done == len(procs):
		p.stop(ctx, j.Clone(), api.OutcomeSucceeded, "every rank exited 0")
	case a.RunningAt.IsZero() && running+done == len(procs):
		m := j.Clone()
		m.Status.Current().RunningAt = p.now
		p.queueQuiet(p.c.st.UpdateJobWrite(m), nil)
	}
}

func sigSuffix(sig string) string {
	if sig == "" {
		return ""
	}
	return " (" + sig + ")"
}

// stop tears the current attempt down: its assignments go in the same
// transaction that marks it stopping. That transaction's revision is the
// stop revision agents must acknowledge; it is the job's ModRevision
// afterwards (see stopping).
func (p *pass) stop(ctx context.Context, m *api.Job, outcome api.Outcome, reason string) {
	a := m.Status.Current()
	a.Phase = api.AttemptStopping
	a.Outcome = outcome
	a.Reason = reason
	a.StoppingAt = p.now
	if p.allExited(m, a) {
		// Nothing can still run: end now, in the transaction that removes
		// the assignments, without waiting for the agents' acknowledgement.
		p.end(m)
		p.queue(p.c.st.StopAttemptWrite(m, a.Number, a.Nodes()), nil)
		return
	}
	m.Status.Phase = api.JobStopping
	m.Status.Reason = fmt.Sprintf("stopping attempt %d: %s", a.Number, reason)
	p.queue(p.c.st.StopAttemptWrite(m, a.Number, a.Nodes()), func(rev int64, err error) {
		if p.wrote(rev, err) {
			p.c.log.Info("stopping attempt", "job_id", m.ID, "attempt", a.Number, "reason", reason)
		}
	})
}

// allExited reports whether every process of the attempt has reported a
// terminal state (or its node is lost, so its agent fenced it).
func (p *pass) allExited(j *api.Job, a *api.Attempt) bool {
	for _, r := range launch.Processes(j, a) {
		rp := a.Placement[r]
		if n := p.v.Nodes[rp.Node]; n == nil || n.Status.State == api.NodeLost {
			continue
		}
		if rs := p.rank(j.ID, a.Number, r); rs == nil || !rs.State.Terminal() {
			return false
		}
	}
	return true
}

func (p *pass) stopping(ctx context.Context, j *api.Job) {
	a := j.Status.Current()
	if a == nil {
		return
	}
	// The stop revision: recorded by older versions; else the revision
	// the cache saw the attempt's assignments deleted at; else the job's
	// own revision, which the stop transaction set (a later write only
	// moves it later, which is safe, merely slower).
	stopRev := a.StopRevision
	if stopRev == 0 {
		stopRev = p.v.Stops[j.ID][a.Number]
	}
	if stopRev == 0 || stopRev > j.ModRevision {
		stopRev = j.ModRevision
	}
	if !p.allExited(j, a) {
		for _, node := range a.Nodes() {
			n := p.v.Nodes[node]
			if n == nil || n.Status.State == api.NodeLost {
				continue // a lost node's agent has fenced itself
			}
			if _, ack := p.c.live.Get(node); ack < stopRev {
				return
			}
		}
	}
	m := j.Clone()
	p.end(m)
	p.queue(p.c.st.UpdateJobWrite(m), nil)
}

// end marks the current attempt Ended and moves the job on: finished,
// requeued or restarting with backoff. It writes nothing.
func (p *pass) end(m *api.Job) {
	ma := m.Status.Current()
	ma.Phase = api.AttemptEnded
	ma.EndedAt = p.now
	st := &m.Status
	done := func(phase api.JobPhase, reason string) {
		st.Phase, st.Reason, st.FinishedAt = phase, reason, p.now
		p.c.log.Info("job finished", "job_id", m.ID, "phase", phase, "reason", reason)
	}
	switch {
	case ma.Outcome == api.OutcomeSucceeded:
		done(api.JobSucceeded, "")
	case st.CancelRequested || ma.Outcome == api.OutcomeCancelled:
		done(api.JobCancelled, "cancelled by user")
	case ma.Outcome == api.OutcomeTimedOut:
		done(api.JobFailed, fmt.Sprintf("attempt %d %s", ma.Number, ma.Reason))
	case ma.Outcome == api.OutcomeInterrupted, ma.Outcome == api.OutcomePreempted:
		st.Phase = api.JobRestarting
		st.NotBefore = p.now
		st.Reason = fmt.Sprintf("attempt %d %s (%s); requeued", ma.Number, ma.Outcome, ma.Reason)
	default:
		maxR := m.Spec.RestartLimit()
		if st.Restarts >= maxR {
			done(api.JobFailed, fmt.Sprintf("attempt %d failed: %s; no restarts left (maxRestarts %d)", ma.Number, ma.Reason, maxR))
			return
		}
		backoff := m.Spec.RestartBackoff.D() << st.Restarts
		if backoff > api.MaxRestartBackoff || backoff < 0 {
			backoff = api.MaxRestartBackoff
		}
		st.Restarts++
		st.Phase = api.JobRestarting
		st.NotBefore = p.now.Add(backoff)
		st.Reason = fmt.Sprintf("attempt %d failed: %s; restart %d of %d after %s", ma.Number, ma.Reason, st.Restarts, maxR, backoff)
	}
}

func (p *pass) finish(ctx context.Context, m *api.Job, phase api.JobPhase, reason string) {
	m.Status.Phase = phase
	m.Status.Reason = reason
	m.Status.FinishedAt = p.now
	p.queue(p.c.st.UpdateJobWrite(m), func(rev int64, err error) {
		if p.wrote(rev, err) {
			p.c.log.Info("job finished", "job_id", m.ID, "phase", phase, "reason", reason)
		}
	})
}
