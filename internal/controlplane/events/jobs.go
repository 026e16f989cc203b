package events

import (
	"fmt"
	"strings"
	"time"

	"github.com/gangway/gangway/internal/api"
)

// job tells what happened between two versions of a job: old nil for a
// new one. A deleted job (retention) tells nothing.
func job(old, j *api.Job, at time.Time) []api.Event {
	if j == nil {
		return nil
	}
	var out []api.Event
	add := func(t api.EventType, reason string, a *api.Attempt, msg string, args ...any) {
		e := api.Event{Time: at, Type: t, Reason: reason, Kind: api.KindJob, Name: j.ID, Message: fmt.Sprintf(msg, args...)}
		if a != nil {
			e.Attempt, e.Nodes = a.Number, a.Nodes()
		}
		out = append(out, e)
	}
	var was []api.Attempt
	if old == nil {
		add(api.EventNormal, api.ReasonSubmitted, nil, "%s", submitted(j))
	} else {
		was = old.Status.Attempts
	}
	final := j.Status.Phase.Final() && (old == nil || !old.Status.Phase.Final())
	for k := range j.Status.Attempts {
		a := &j.Status.Attempts[k]
		var o *api.Attempt
		if k < len(was) {
			o = &was[k]
		}
		if o == nil {
			switch {
			case k == 0 || api.CauseOf(&j.Status.Attempts[k-1]) == api.CausePreflight:
				add(api.EventNormal, api.ReasonScheduled, a, "attempt %d placed on %s%s", a.Number, placement(a), resume(a))
			default:
				add(api.EventNormal, api.ReasonRestarted, a, "restarted as attempt %d on %s%s", a.Number, placement(a), resume(a))
			}
		}
		if a.PreemptedFor != "" && (o == nil || o.PreemptedFor == "") {
			add(api.EventNormal, api.ReasonPreempting, a, "job %s needs the GPUs: ranks sent %s to checkpoint before they stop", a.PreemptedFor, j.Spec.Signal())
		}
		if !a.RequeuedAt.IsZero() && (o == nil || o.RequeuedAt.IsZero()) {
			add(api.EventNormal, api.ReasonRequeuing, a, "requeue requested: ranks sent %s to checkpoint before they stop", j.Spec.Signal())
		}
		// A user's signal (a preemption's or a requeue's raises the count
		// too, and is told above).
		if a.Signal != "" && o != nil && a.SignalSent > o.SignalSent && a.PreemptedFor == o.PreemptedFor && a.RequeuedAt.Equal(o.RequeuedAt) {
			add(api.EventNormal, api.ReasonSignalled, a, "ranks sent %s (gangway cancel --signal)", a.Signal)
		}
		if !a.RunningAt.IsZero() && (o == nil || o.RunningAt.IsZero()) {
			add(api.EventNormal, api.ReasonStarted, a, "%s of attempt %d running, %s after placement", plural(len(a.Placement), "rank"), a.Number, roundDur(a.RunningAt.Sub(a.CreatedAt)))
		}
		// The job's own end tells of its last attempt's.
		if a.Phase == api.AttemptEnded && (o == nil || o.Phase != api.AttemptEnded) && !(final && k == len(j.Status.Attempts)-1) {
			t, reason := attemptEnd(a)
			add(t, reason, a, "attempt %d ended: %s", a.Number, endWords(a))
		}
	}
	if w := waiting(j); w != "" && (old == nil || waiting(old) == "") {
		add(api.EventNormal, api.ReasonWaiting, nil, "%s", w)
	}
	if final {
		a := j.Status.Current()
		switch j.Status.Phase {
		case api.JobSucceeded:
			add(api.EventNormal, api.ReasonSucceeded, a, "succeeded%s", ran(j))
		case api.JobCancelled:
			add(api.EventNormal, api.ReasonCancelled, a, "cancelled%s", ran(j))
		default:
			why := j.Status.Reason
			if why == "" && a != nil {
				why = endWords(a)
			}
			add(api.EventWarning, api.ReasonFailed, a, "failed%s: %s", ran(j), why)
		}
	}
	return out
}

// submitted says what a new job asks for.
func submitted(j *api.Job) string {
	s := &j.Spec
	var b strings.Builder
	fmt.Fprintf(&b, "submitted")
	if s.User != "" {
		fmt.Fprintf(&b, " by %s", s.User)
	}
	fmt.Fprintf(&b, " to queue %s: %s", s.Queue, plural(s.Ranks, "rank"))
	if s.GPUsPerRank > 0 {
		fmt.Fprintf(&b, " × %s", plural(s.GPUsPerRank, "GPU"))
	}
	if t := j.Array; t != nil {
		fmt.Fprintf(&b, " (task %d of array %s)", t.Index, t.ID)
	}
	return b.String()
}

// placement names an attempt's nodes and how many ranks it has.
func placement(a *api.Attempt) string {
	nodes := a.Nodes()
	s := strings.Join(nodes, ",")
	if len(nodes) > 8 {
		s = strings.Join(nodes[:8], ",") + fmt.Sprintf(" and %d more nodes", len(nodes)-8)
	}
	s += " (" + plural(len(a.Placement), "rank") + ")"
	if a.Preflight != nil {
		s += ", to test the placement before the command runs"
	}
	return s
}

func resume(a *api.Attempt) string {
	if a.ResumeFrom == nil {
		return ""
	}
	return fmt.Sprintf(", resuming from the checkpoint of step %d", a.ResumeFrom.Step)
}

// attemptEnd is the type and reason of an attempt's end, by its cause.
func attemptEnd(a *api.Attempt) (api.EventType, string) {
	switch api.CauseOf(a) {
	case api.CauseSucceeded:
		return api.EventNormal, api.ReasonSucceeded
	case api.CauseCancelled:
		return api.EventNormal, api.ReasonCancelled
	case api.CausePreempted:
		return api.EventNormal, api.ReasonPreempted
	case api.CauseDrain:
		return api.EventNormal, api.ReasonDrained
	case api.CauseRequeued:
		return api.EventNormal, api.ReasonRequeued
	case api.CauseNodeLost:
		return api.EventWarning, api.ReasonNodeLost
	case api.CauseGPUFault:
		return api.EventWarning, api.ReasonGPUFault
	case api.CauseNodeFault:
		return api.EventWarning, api.ReasonNodeFault
	case api.CauseHang:
		return api.EventWarning, api.ReasonHang
	case api.CauseStraggler:
		return api.EventWarning, api.ReasonStraggler
	case api.CauseTimeLimit:
		return api.EventWarning, api.ReasonTimedOut
	case api.CauseFenced:
		return api.EventWarning, api.ReasonFenced
	case api.CausePreflight:
		if a.Preflight != nil && a.Preflight.Passed {
			return api.EventNormal, api.ReasonPreflight
		}
		return api.EventWarning, api.ReasonPreflight
	}
	return api.EventWarning, api.ReasonFailed
}

// endWords says how an attempt ended: its reason, else its outcome.
func endWords(a *api.Attempt) string {
	if a.Reason != "" {
		return a.Reason
	}
	if c := api.CauseOf(a); c != "" {
		return string(c)
	}
	return string(a.Outcome)
}

// waiting is why a job waits to be placed, "" when it does not (or waits
// for no stated reason: a new job, before the scheduler said why).
func waiting(j *api.Job) string {
	if (j.Status.Phase != api.JobPending && j.Status.Phase != api.JobRestarting) || j.Status.CancelRequested || j.Status.Reason == api.ReasonNew {
		return ""
	}
	return j.Status.Reason
}

// ran says, for a job that ended, after how many attempts and how long.
func ran(j *api.Job) string {
	n := len(j.Status.Attempts)
	if n == 0 {
		return " before it was placed"
	}
	s := " after " + plural(n, "attempt")
	if !j.Status.StartedAt.IsZero() && !j.Status.FinishedAt.IsZero() {
		s += fmt.Sprintf(", %s after it was first placed", roundDur(j.Status.FinishedAt.Sub(j.Status.StartedAt)))
	}
	return s
}

// plural is n things.
func plural(n int, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	return fmt.Sprintf("%d %ss", n, thing)
}

// roundDur is d to what a person reads: ms under a second, else tenths
// of seconds up to a minute, else seconds.
func roundDur(d time.Duration) time.Duration {
	switch {
	case d < time.Second:
		return d.Round(time.Millisecond)
	case d < time.Minute:
		return d.Round(100 * time.Millisecond)
	}
	return d.Round(time.Second)
}

// checkpoint tells of a job's newer checkpoint.
func checkpoint(id string, old, ck *api.Checkpoint, at time.Time) []api.Event {
	if ck == nil || old != nil && ck.Step <= old.Step {
		return nil
	}
	return []api.Event{{Time: at, Type: api.EventNormal, Reason: api.ReasonCheckpoint, Kind: api.KindJob, Name: id, Attempt: ck.Attempt,
		Message: fmt.Sprintf("checkpoint of step %d committed by attempt %d at %s", ck.Step, ck.Attempt, ck.Path)}}
}

// straggler tells of a rank declared a straggler.
func straggler(st *api.Straggler, at time.Time) []api.Event {
	if st == nil {
		return nil
	}
	return []api.Event{{Time: at, Type: api.EventWarning, Reason: api.ReasonStraggler, Kind: api.KindJob, Name: st.JobID, Attempt: st.Attempt, Nodes: []string{st.Node},
		Message: fmt.Sprintf("rank %d on %s works %.3gs per step against the gang's median %.3gs (step %.3gs) since %s",
			st.Rank, st.Node, st.ComputeS, st.MedianS, st.StepS, st.Since.UTC().Format(time.TimeOnly))}}
}
