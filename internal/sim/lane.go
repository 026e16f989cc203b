package sim

import (
	"container/heap"

	"github.com/gangway/gangway/internal/scheduler/policy"
)

// laned is a policy that follows segments and may change pending jobs'
// keys outside their rekey events (policy.LanePolicy's overdue lane).
type laned interface {
	setup(gpus, jobs int)
	started(j *job)
	stopped(j *job)
	// running follows a running job's rekey event.
	running(j *job, now float64)
	// turn is how long a job runs in the lane before it leaves it; 0:
	// until it ends.
	turn() float64
	// regrant appends the pending jobs whose keys changed since the last
	// call.
	regrant(out []*job) []*job
}

// laneShared runs a policy.LanePolicy: the policy decides each job's
// lane state; this keeps the overdue jobs waiting for room, longest wait
// first, so that room freed is granted without walking the queue.
type laneShared struct {
	shared
	lp    *policy.LanePolicy
	wait  overdueHeap
	dirty bool
}

var _ laned = (*laneShared)(nil)

func (l *laneShared) setup(gpus, _ int) {
	l.lp.Reset(gpus)
	l.wait, l.dirty = l.wait[:0], false
}

func (l *laneShared) rekey(j *job, now float64) {
	before := j.ps.Lane
	l.shared.rekey(j, now)
	if before == policy.LaneNone && j.ps.Lane == policy.LaneWaiting {
		heap.Push(&l.wait, overdue{since: j.pendSince, j: j})
	}
}

func (l *laneShared) started(j *job) { l.lp.Started(&j.ps) }

func (l *laneShared) turn() float64 { return l.lp.LaneTurn }

func (l *laneShared) running(j *job, now float64) {
	if l.lp.TurnOver(&j.ps, now) {
		l.dirty = true
	}
}

func (l *laneShared) stopped(j *job) {
	if l.lp.Stopped(&j.ps) {
		l.dirty = true
	}
}

func (l *laneShared) regrant(out []*job) []*job {
	if !l.dirty {
		return out
	}
	l.dirty = false
	for len(l.wait) > 0 && l.lp.Room() {
		o := heap.Pop(&l.wait).(overdue)
		if o.j.ps.Lane != policy.LaneWaiting || o.j.phase != phasePending {
			continue // the levels started it meanwhile
		}
		l.lp.Grant(&o.j.ps)
		out = append(out, o.j)
	}
	return out
}

type overdue struct {
	since float64
	j     *job
}

// overdueHeap orders overdue jobs by the start of their wait.
type overdueHeap []overdue

func (h overdueHeap) Len() int { return len(h) }
func (h overdueHeap) Less(a, b int) bool {
	if h[a].since != h[b].since {
		return h[a].since < h[b].since
	}
	return h[a].j.idx < h[b].j.idx
}
func (h overdueHeap) Swap(a, b int) { h[a], h[b] = h[b], h[a] }
func (h *overdueHeap) Push(x any)   { *h = append(*h, x.(overdue)) }
func (h *overdueHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
