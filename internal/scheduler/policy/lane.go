package policy

import (
	"math"
	"slices"

	"github.com/gangway/gangway/internal/scheduler"
)

func init() {
	Register("gangway", func() Policy { return Lane() })
}

// LaneState is where a job stands with LanePolicy's overdue lane.
type LaneState uint8

const (
	LaneNone    LaneState = iota
	LaneWaiting           // overdue, waiting for room in the lane
	LaneGranted           // in the lane, pending: it ranks first
	LaneRunning           // in the lane, running: not preempted for its turn
)

// LanePolicy is gangway's default: least attained service, with a
// bounded lane for overdue jobs. It knows no durations.
//
// Jobs sit in levels by attained GPU-service (least first, as LAS
// approximates shortest-remaining-first on heavy-tailed workloads; first
// come first served within a level), and a job that has just started is
// not preempted for MinRun. A job that has waited OverdueAfter in one go
// is overdue. Overdue jobs enter a lane, longest wait first, while the
// lane's jobs hold less than LaneShare of the GPUs: in the lane a job
// ranks above every level and, once started, is not preempted for its
// turn (LaneTurn); then it leaves the lane for its level, where the
// levels may preempt it, and, should it wait OverdueAfter again, queues
// for the lane behind those already waiting. The rest of the cluster
// keeps serving by attained service.
//
// The lane replaces the wall-clock starvation bound of GangwayPolicy
// ("gangway-4h"): under an overload that lasts weeks, most of the queue
// has waited past any fixed bound, so a bound with absolute precedence
// turns the policy into first come first served (new ten-minute jobs
// waited a median of 35 hours on a held-out Philly slice), while with no
// bound at all single waits reach weeks. Bounding the overdue jobs'
// precedence to a share gives both: new jobs always find most of the
// cluster ordered by attained service, and every overdue job a path
// through the rest. Turns make that path round robin: a lane held until
// its jobs end is taken for days by the longest of them, and overdue
// jobs then waited up to 2.3 times as long as under FIFO with backfill.
// Aging by levels is off: it promotes long-waiting jobs into level 0
// ahead of new ones in submit order, the same collapse by a slower road
// (docs/simulation.md §6).
type LanePolicy struct {
	Thresholds   []float64 // GPU-seconds, ascending
	OverdueAfter float64   // seconds; 0: no lane
	LaneShare    float64   // of the GPUs, (0, 1]
	MinRun       float64   // seconds
	// LaneTurn is how long, in seconds, a job runs in the lane before it
	// leaves it for its level; 0: until it ends.
	LaneTurn float64

	gpus int // the cluster's, set by Reset
	held int // GPUs of granted and running lane jobs
}

var _ Policy = (*LanePolicy)(nil)

// Lane returns the policy with its default settings: levels at 1, 2, 4,
// ... 4,096 GPU-hours, overdue after 4 hours, a lane of a quarter of the
// GPUs, turns of 4 hours in it, two minutes' minimum run
// (docs/simulation.md §6 sweeps them).
func Lane() *LanePolicy {
	var th []float64
	for t := 3600.0; t <= 3600*4096; t *= 2 {
		th = append(th, t)
	}
	return &LanePolicy{Thresholds: th, OverdueAfter: 4 * 3600, LaneShare: 0.25, LaneTurn: 4 * 3600, MinRun: 120}
}

func (*LanePolicy) Name() string         { return "gangway" }
func (*LanePolicy) Mode() scheduler.Mode { return scheduler.Greedy }
func (*LanePolicy) Preempts() bool       { return true }

// Levels: lane jobs rank above every level.
func (p *LanePolicy) Levels() int { return len(p.Thresholds) + 1 }

func (p *LanePolicy) level(j *Job, now float64) int {
	return LevelOf(p.Thresholds, j.AttainedAt(now))
}

func (p *LanePolicy) Priority(j *Job, now float64) int {
	if j.Lane == LaneGranted || j.Lane == LaneRunning {
		return p.Levels()
	}
	return len(p.Thresholds) - p.level(j, now)
}

// Key: granted lane jobs first, longest wait first; then by level, in
// submit order.
func (p *LanePolicy) Key(j *Job, now float64) Key {
	if j.Lane == LaneGranted {
		return Key{A: -1, B: j.PendSince}
	}
	return Key{A: float64(p.level(j, now)), B: j.Submit}
}

// overdueAt is when a pending job becomes overdue.
func (p *LanePolicy) overdueAt(j *Job) float64 { return j.PendSince + p.OverdueAfter }

func (p *LanePolicy) NextRekey(j *Job, now float64) float64 {
	if j.Running {
		t := Crossing(p.Thresholds, j.AttainedAt(now), j.GPUs, now)
		if j.Lane == LaneRunning && p.LaneTurn > 0 {
			t = min(t, max(now, j.SegStart+p.LaneTurn))
		}
		return t
	}
	if j.Lane == LaneNone && p.OverdueAfter > 0 {
		return max(now, p.overdueAt(j))
	}
	return math.Inf(1)
}

// Rekey makes an overdue job granted when the lane has room, else
// waiting (the caller grants waiting jobs, longest wait first, as room
// frees: Stopped reports when).
func (p *LanePolicy) Rekey(j *Job, now float64) {
	if j.Running || j.Lane != LaneNone || p.OverdueAfter <= 0 || now < p.overdueAt(j) {
		return
	}
	if p.Room() {
		p.Grant(j)
	} else {
		j.Lane = LaneWaiting
	}
}

func (p *LanePolicy) Protected(j *Job, now float64) bool {
	return j.Lane == LaneRunning || now-j.SegStart < p.MinRun
}

// Starving: a granted lane job may preempt any job ranked below it.
func (p *LanePolicy) Starving(j *Job, _ float64) bool { return j.Lane == LaneGranted }

// Reset starts accounting the lane over a cluster of gpus GPUs, empty.
func (p *LanePolicy) Reset(gpus int) { p.gpus, p.held = gpus, 0 }

// Room reports whether the lane may take another job: its jobs hold less
// than LaneShare of the GPUs. A job wider than the room left still
// enters, so that no gang is too wide for the lane.
func (p *LanePolicy) Room() bool { return float64(p.held) < p.LaneShare*float64(p.gpus) }

// Grant puts j in the lane.
func (p *LanePolicy) Grant(j *Job) {
	j.Lane = LaneGranted
	p.held += j.GPUs
}

// Started follows a start: a granted job runs in the lane; a waiting one
// the levels started leaves the wait.
func (p *LanePolicy) Started(j *Job) {
	switch j.Lane {
	case LaneGranted:
		j.Lane = LaneRunning
	case LaneWaiting:
		j.Lane = LaneNone
	}
}

// TurnOver takes a running lane job whose turn (LaneTurn) is over out of
// the lane, back to its level; it reports whether the lane freed room.
func (p *LanePolicy) TurnOver(j *Job, now float64) bool {
	if j.Lane != LaneRunning || p.LaneTurn <= 0 || now < j.SegStart+p.LaneTurn {
		return false
	}
	j.Lane = LaneNone
	p.held -= j.GPUs
	return true
}

// Stopped follows a stop (end, failure); it reports whether the lane
// freed room.
func (p *LanePolicy) Stopped(j *Job) bool {
	if j.Lane != LaneRunning {
		return false
	}
	j.Lane = LaneNone
	p.held -= j.GPUs
	return true
}

// Assign sets every job's lane state from scratch, for a caller that
// keeps no state between passes (the controller), as the simulator's
// incremental accounting has it: a running job is in the lane if its
// attempt was started there (LaneRun, which the caller records when it
// starts a granted job); pending overdue jobs
// are granted, longest wait first, while the lane has room. jobs are
// the queue's pending and running jobs; gpus the cluster's.
func (p *LanePolicy) Assign(jobs []*Job, gpus int, now float64) {
	p.Reset(gpus)
	var overdue []*Job
	for _, j := range jobs {
		j.Lane = LaneNone
		switch {
		case p.OverdueAfter <= 0:
		case j.Running && j.LaneRun && (p.LaneTurn <= 0 || now < j.SegStart+p.LaneTurn):
			j.Lane = LaneRunning
			p.held += j.GPUs
		case !j.Running && now >= p.overdueAt(j):
			overdue = append(overdue, j)
		}
	}
	slices.SortStableFunc(overdue, func(a, b *Job) int {
		switch {
		case a.PendSince < b.PendSince:
			return -1
		case a.PendSince > b.PendSince:
			return 1
		}
		return 0
	})
	for _, j := range overdue {
		if p.Room() {
			p.Grant(j)
		} else {
			j.Lane = LaneWaiting
		}
	}
}
