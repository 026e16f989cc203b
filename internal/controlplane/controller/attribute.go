package controller

import (
	"fmt"
	"time"

	"github.com/gangway/gangway/internal/api"
)

// An attempt ends for the first thing that went wrong, in time, and only
// the job's own failures use up its restarts. In a real gang the first
// thing is seldom the first thing the server hears of: when a node dies,
// or fences itself, or its GPU falls off the bus, the ranks on the other
// nodes fail in their next collective, within milliseconds, and their
// agents, still up, report those exits long before the node's silence
// turns into a loss (the node timeout), before its agent reports its
// fence (once it hears the server again) or before its health check runs.
//
// So the verdict is amended rather than held back. An attempt stopped for
// a rank's failure whose node is silent cannot end before that node is
// heard again (acknowledging the stop) or is declared lost: stopping
// (lifecycle.go) looks at its nodes before it ends it, and charges the
// node's loss instead when the node was last heard no later than
// cascadeWindow after the stop. What can arrive after an attempt has ended
// (a fault report a heartbeat later, the exits of a node's fenced ranks
// once its agent hears the server again) amends the ended attempt: its
// cause and reason are rewritten and, if its end used up a restart, the
// restart is given back and the job requeued at once. Holding every
// failure back until every node had been heard from would delay every
// real crash by a heartbeat; amending costs nothing until something
// outside the job is found.
//
// A job that has failed for good (no restarts left) is not revived: its
// user has been told it failed, and a new attempt may find the same
// crash.

// cascadeWindow is how long after an attempt was stopped for a rank's
// failure a node's silence, a fault's finding or a fence may still be
// taken to have come first: a heartbeat interval and the time an agent
// takes to find and report a fault, with room for clock skew between
// agents.
const cascadeWindow = 2 * time.Second

// rankFailure is a rank that failed to start or exited non-zero.
type rankFailure struct {
	rp api.RankPlacement
	rs *api.RankStatus
}

// before returns whichever of f and g the attempt is to be charged to: a
// rank killed by its node's fence (the fence came first: the other ranks
// died of losing it), else one its node could not start (its container
// engine down: the others died waiting for it), else the one that failed
// first (by the agents' clocks), else the lower rank. f may be nil.
func (f *rankFailure) before(g *rankFailure) *rankFailure {
	switch {
	case f == nil:
		return g
	case f.rs.Fenced != g.rs.Fenced:
		if g.rs.Fenced {
			return g
		}
		return f
	case f.rs.NodeFault != g.rs.NodeFault:
		if g.rs.NodeFault {
			return g
		}
		return f
	case g.rs.FinishedAt.IsZero() || f.rs.FinishedAt.IsZero():
		return f
	case g.rs.FinishedAt.Before(f.rs.FinishedAt):
		return g
	}
	return f
}

// verdict is how attempt a stops for the failure: failed by the job's own
// doing, preempted (a rank that dies of the checkpoint signal, or exits
// after saving, is stopping as asked), or interrupted by its node's fence.
// cause is "" where the outcome and reason say it (api.CauseOf).
func (f *rankFailure) verdict(a *api.Attempt) (api.Outcome, string, api.Cause) {
	rp, rs := f.rp, f.rs
	switch {
	case rs.Fenced:
		return api.OutcomeInterrupted, fenceReason(rp, rs), api.CauseFenced
	case rs.NodeFault:
		return api.OutcomeInterrupted, fmt.Sprintf("rank %d could not start for a fault of node %s, which the job now avoids: %s", rp.Rank, rp.Node, rs.Message), api.CauseNodeFault
	case rs.State == api.RankFailedStart:
		return api.OutcomeFailed, fmt.Sprintf("rank %d on %s could not start: %s", rp.Rank, rp.Node, rs.Message), ""
	case !a.PreemptedAt.IsZero():
		return api.OutcomePreempted, fmt.Sprintf("preempted for job %s; rank %d exited with code %d%s after the checkpoint signal",
			a.PreemptedFor, rp.Rank, rs.ExitCode, sigSuffix(rs.Signal)), ""
	}
	reason := fmt.Sprintf("rank %d on %s exited with code %d%s", rp.Rank, rp.Node, rs.ExitCode, sigSuffix(rs.Signal))
	switch {
	case rs.StderrTail != "":
		reason += ": " + rs.StderrTail
	case rs.Message != "":
		reason += ": " + rs.Message
	}
	return api.OutcomeFailed, reason, ""
}

// fenceReason is the reason of an attempt its node's fence ended: the
// agent's own words when it gave them.
func fenceReason(rp api.RankPlacement, rs *api.RankStatus) string {
	if rs.Message != "" {
		return rs.Message
	}
	return fmt.Sprintf("node %s fenced itself: no answer from the server for its lease", rp.Node)
}

// outside is a cause found outside the job for an attempt charged to it.
type outside struct {
	at      time.Time // when it happened (or was last known not to have)
	outcome api.Outcome
	reason  string
	cause   api.Cause
}

// outsideCause looks, for attempt a of j, which was stopped for the job's
// own failure, for something outside the job that came first: a node of it
// lost having been last heard by cascadeWindow after the stop, a GPU or
// node of it taken out of service for a finding made by then, or a rank of
// it killed by its node's fence by then. The earliest wins; ok is false if
// there is none.
func (l *lifecycle) outsideCause(j *api.Job, a *api.Attempt) (outside, bool) {
	if a.StoppingAt.IsZero() || api.CauseOf(a) != api.CauseUserError {
		return outside{}, false
	}
	by := a.StoppingAt.Add(cascadeWindow)
	within := func(t time.Time) bool { return !t.IsZero() && !t.Before(a.CreatedAt) && !t.After(by) }
	var best outside
	found := false
	consider := func(o outside) {
		if !found || o.at.Before(best.at) {
			best, found = o, true
		}
	}
	for _, name := range a.Nodes() {
		n := l.v.Nodes[name]
		if n == nil {
			continue
		}
		if n.Status.State == api.NodeLost && within(n.Status.LastSeenAt) {
			consider(outside{n.Status.LastSeenAt, api.OutcomeFailed, fmt.Sprintf("node %s lost", name), api.CauseNodeLost})
		}
		if n.Status.Fault != "" && within(n.Status.FaultAt) {
			cause := n.Status.FaultCause
			if cause == "" {
				cause = api.CauseNodeFault
			}
			consider(outside{n.Status.FaultAt, api.OutcomeInterrupted, fmt.Sprintf("node %s out of service: %s", name, n.Status.Fault), cause})
		}
	}
	for _, rp := range a.Placement {
		if n := l.v.Nodes[rp.Node]; n != nil {
			for _, gi := range rp.GPUs {
				for k := range n.GPUs {
					if g := &n.GPUs[k]; g.Index == gi && g.Health == api.GPUFaulty && within(g.FaultAt) {
						consider(outside{g.FaultAt, api.OutcomeInterrupted, fmt.Sprintf("GPU %d of node %s out of service: %s", gi, rp.Node, g.Fault), api.CauseGPUFault})
					}
				}
			}
		}
		if rs := l.rank(j.ID, a.Number, rp.Rank); rs != nil && rs.Fenced && within(rs.FinishedAt) {
			consider(outside{rs.FinishedAt, api.OutcomeInterrupted, fenceReason(rp, rs), api.CauseFenced})
		}
	}
	if found {
		best.reason += " (then " + a.Reason + ")"
	}
	return best, found
}

// amend rewrites attempt a (of a job already cloned for writing) as ended
// for o, and gives back the restart its end used up; it reports whether it
// gave one back.
func amend(st *api.JobStatus, a *api.Attempt, o outside) bool {
	a.Outcome, a.Reason, a.Cause = o.outcome, o.reason, o.cause
	if !a.Charged {
		return false
	}
	a.Charged = false
	if st.Restarts > 0 {
		st.Restarts--
	}
	return true
}

// amendEnded finds the newest ended attempt of j (the last one, or the one
// before a live one) charged to the job although something outside it came
// first, and returns j as it is to be written with that attempt amended: a
// job waiting to restart is requeued at once. nil if there is none.
func (l *lifecycle) amendEnded(j *api.Job) *api.Job {
	as := j.Status.Attempts
	i := len(as) - 1
	if i >= 0 && as[i].Phase != api.AttemptEnded {
		i--
	}
	if i < 0 || as[i].Phase != api.AttemptEnded {
		return nil
	}
	o, ok := l.outsideCause(j, &as[i])
	if !ok {
		return nil
	}
	m := j.Clone()
	e := &m.Status.Attempts[i]
	amend(&m.Status, e, o)
	if m.Status.Phase == api.JobRestarting && i == len(as)-1 {
		m.Status.NotBefore = l.now
		m.Status.Reason = requeueReason(e)
	}
	return m
}

// requeueReason is the job's reason once attempt e, which ended for
// something outside the job, is requeued without using up a restart.
func requeueReason(e *api.Attempt) string {
	return fmt.Sprintf("attempt %d %s (%s); requeued (%s uses up no restart)", e.Number, e.Outcome, e.Reason, api.CauseOf(e))
}
