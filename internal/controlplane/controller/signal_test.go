package controller

import (
	"strings"
	"testing"
	"time"

	"github.com/gangway/gangway/internal/api"
	"github.com/gangway/gangway/internal/scheduler"
)

// A requeue asked of a running attempt sends its checkpoint signal once,
// then stops it (as a preemption) on a new checkpoint, a rank's exit or
// the grace's end; its end puts the job back to wait, no restart used. A
// user's signal goes out once, numbered after every signal before it.
func TestRequeueAndSignals(t *testing.T) {
	stamped := func(adjust func(*api.Job)) *api.Job {
		return running(func(j *api.Job) {
			j.Status.Current().RunningAt = t0
			if adjust != nil {
				adjust(j)
			}
		})
	}
	requeuedAt := func(at time.Time) func(*api.Job) {
		return func(j *api.Job) {
			j.Status.RequeueRequested = true
			a := j.Status.Current()
			a.RequeuedAt, a.SignalSeq, a.SignalSent = at, 1, 1
		}
	}
	l := world{ranks: ranksRunning()}.lifecycle()

	// Asked: the checkpoint signal goes out, numbered 1.
	j := stamped(func(j *api.Job) { j.Status.RequeueRequested = true })
	d := l.decide(j)
	if a := d.job.Status.Current(); d.step != stepSignal || d.signal != "SIGUSR1" || !a.RequeuedAt.Equal(now) || a.SignalSeq != 1 || a.SignalSent != 1 ||
		!strings.HasPrefix(d.job.Status.Reason, "requeue requested; SIGUSR1 sent") {
		t.Fatalf("requeue asked: step %d signal %q attempt %+v reason %q", d.step, d.signal, a, d.job.Status.Reason)
	}
	if j.Status.Current().SignalSeq != 0 {
		t.Errorf("decide changed the view's job")
	}
	// Sent, nothing since: it runs on.
	if d := l.decide(stamped(requeuedAt(now.Add(-time.Second)))); d.step != stepNone {
		t.Errorf("requeue signalled a second ago: step %d", d.step)
	}
	for name, c := range map[string]struct {
		w      world
		reason string
	}{
		"checkpointed": {world{ranks: ranksRunning(), ckpt: &api.Checkpoint{Step: 7, Time: now.Add(-time.Second)}}, "requeued by user after checkpointing step 7"},
		"a rank died of the signal": {world{ranks: []api.RankStatus{rank(0, api.RankRunning, 0), rank(1, api.RankExited, 138)}},
			"requeued by user; rank 1 exited after SIGUSR1"},
		"grace over": {world{ranks: ranksRunning(), now: now.Add(31 * time.Second)}, "requeued by user; no checkpoint within the 30s grace"},
	} {
		cl := c.w.lifecycle()
		d := cl.decide(stamped(requeuedAt(now.Add(-2 * time.Second))))
		if r := resultOf(d); d.step != stepStop || r.Outcome != api.OutcomeRequeued || r.AttemptReason != c.reason {
			t.Errorf("%s: %+v", name, r)
		}
	}
	// Its end: waiting again, under its ID, no restart used.
	j = stopping(func(j *api.Job) {
		j.Status.RequeueRequested = true
		a := j.Status.Current()
		a.Outcome, a.Reason, a.Cause = api.OutcomeRequeued, "requeued by user after checkpointing step 7", api.CauseRequeued
	})
	el := world{beats: acked(100)}.lifecycle()
	d = el.decide(j)
	if st := d.job.Status; d.step != stepEnd || st.Phase != api.JobPending || st.RequeueRequested || st.Restarts != 0 ||
		st.Reason != "attempt 1 requeued by user after checkpointing step 7; waits to be placed again" || api.CauseOf(st.Current()) != api.CauseRequeued {
		t.Errorf("requeued attempt's end: step %d status %+v", d.step, st)
	}

	// A user's signal, asked after the requeue's checkpoint signal (1).
	j = stamped(func(j *api.Job) {
		a := j.Status.Current()
		a.Signal, a.SignalSeq, a.SignalSent = "SIGUSR2", 2, 1
	})
	d = l.decide(j)
	if a := d.job.Status.Current(); d.step != stepSignal || d.signal != "SIGUSR2" || a.SignalSent != 2 {
		t.Errorf("user's signal: step %d signal %q attempt %+v", d.step, d.signal, a)
	}
	// A preemption after it takes the next number; one being requeued is
	// no victim.
	l = world{ranks: ranksRunning()}.lifecycle(stamped(func(j *api.Job) { j.Status.Current().SignalSeq, j.Status.Current().SignalSent = 2, 2 }))
	if m := l.preempting(scheduler.Preemption{JobID: "j1", For: "j2"}); m == nil || m.Status.Current().SignalSeq != 3 || m.Status.Current().SignalSent != 3 {
		t.Errorf("preempting after two signals: %+v", m)
	}
	l = world{ranks: ranksRunning()}.lifecycle(stamped(requeuedAt(now)))
	if m := l.preempting(scheduler.Preemption{JobID: "j1", For: "j2"}); m != nil {
		t.Errorf("a job being requeued was preempted too")
	}
}
