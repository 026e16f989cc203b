package controller

import (
	"sync/atomic"
	"time"

	"github.com/gangway/gangway/internal/api"
)

// Observer hears what the controller did, for the server's metrics. Its
// methods are called from a pass's goroutines: they must be safe for
// concurrent use and must not block. Config.Observer nil hears nothing.
type Observer interface {
	// Passed: a pass took took, of which scheduling (the scheduler's own
	// call) took scheduling; its plan placed placed gangs and preempted
	// preempted.
	Passed(took, scheduling time.Duration, placed, preempted int)
	// Placed: a gang of queue starts an attempt, after waiting waited
	// since it was submitted or its last attempt ended. Called once the
	// placement is stored.
	Placed(queue string, waited time.Duration)
	// Restarted: an attempt ended for cause and its job is to run again
	// (a restart, a requeue). Called once that is stored.
	Restarted(cause api.Cause)
}

type noObserver struct{}

func (noObserver) Passed(time.Duration, time.Duration, int, int) {}
func (noObserver) Placed(string, time.Duration)                  {}
func (noObserver) Restarted(api.Cause)                           {}

// Pending kinds the controller gives jobs the scheduler did not see.
const (
	// PendingArrayLimit: an array's %N limit holds the task back.
	PendingArrayLimit = "array-limit"
)

// pendingKinds is, per job left waiting by the newest pass, why: the
// scheduler's kind ("capacity", "topology", ...) or PendingArrayLimit.
// Each pass replaces the map whole; readers must not modify it.
type pendingKinds struct {
	p atomic.Pointer[map[string]string]
}

// PendingKinds says why each job the newest pass left waiting waits: the
// scheduler's kind of reason ("capacity", "quota", "topology", ...; see
// scheduler.PendingKind) or PendingArrayLimit. A job waiting out its
// restart backoff, or not yet seen by a pass, is absent. The map is
// shared: read-only.
func (c *Controller) PendingKinds() map[string]string {
	if m := c.kinds.p.Load(); m != nil {
		return *m
	}
	return nil
}

// waitedSince is when j began waiting for this placement: its previous
// attempt's end, or its submission.
func waitedSince(j *api.Job) time.Time {
	if a := j.Status.Current(); a != nil && !a.EndedAt.IsZero() {
		return a.EndedAt
	}
	return j.SubmittedAt
}
