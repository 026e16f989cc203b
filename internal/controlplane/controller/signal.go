package controller

import (
	"fmt"

	"github.com/gangway/gangway/internal/api"
	"github.com/gangway/gangway/internal/launch"
)

// Signals a running attempt's ranks are sent besides a preemption's: a
// requeue's checkpoint signal (gangway requeue: the attempt then stops as
// a preempted one does, and the job waits again under its ID) and users'
// own (gangway cancel --signal). The API records what is asked on the job
// (Status.RequeueRequested; Attempt.Signal and SignalSeq); the lifecycle
// decides a stepSignal write, whose assignments carry the signal with a
// higher SignalSeq, which each agent delivers once.

// signalling is the write that sends a running attempt's ranks what was
// asked of them and not yet sent; ok false when nothing is.
func (l *lifecycle) signalling(j *api.Job, a *api.Attempt) (decision, bool) {
	requeue := j.Status.RequeueRequested && a.RequeuedAt.IsZero() && a.PreemptedAt.IsZero()
	if !requeue && a.SignalSeq <= a.SignalSent {
		return decision{}, false
	}
	m := j.Clone()
	ma := m.Status.Current()
	sig := ma.Signal
	if requeue {
		sig = m.Spec.Signal()
		ma.RequeuedAt = l.now
		ma.SignalSeq = ma.NextSignalSeq()
		m.Status.Reason = fmt.Sprintf("requeue requested; %s sent, stopping within %s", sig, m.Spec.PreemptionGrace())
	}
	ma.SignalSent = ma.SignalSeq
	return decision{step: stepSignal, job: m, signal: sig}, true
}

// requeued is the outcome and reason of an attempt being requeued once it
// must stop: it checkpointed after the signal, its grace ran out, or a
// rank exited (the gang is broken either way). "" while it runs on.
func (l *lifecycle) requeued(j *api.Job, a *api.Attempt) (api.Outcome, string) {
	if a.RequeuedAt.IsZero() {
		return "", ""
	}
	if ck := l.v.Ckpts[j.ID]; ck != nil && ck.Time.After(a.RequeuedAt) {
		return api.OutcomeRequeued, fmt.Sprintf("requeued by user after checkpointing step %d", ck.Step)
	}
	for _, r := range launch.Processes(j, a) {
		rs := l.rank(j.ID, a.Number, a.Placement[r].Rank)
		if rs != nil && rs.State.Terminal() {
			return api.OutcomeRequeued, fmt.Sprintf("requeued by user; rank %d exited after %s", a.Placement[r].Rank, j.Spec.Signal())
		}
	}
	if l.now.Sub(a.RequeuedAt) >= j.Spec.PreemptionGrace() {
		return api.OutcomeRequeued, fmt.Sprintf("requeued by user; no checkpoint within the %s grace", j.Spec.PreemptionGrace())
	}
	return "", ""
}
