package policy

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"

	"github.com/gangway/gangway/internal/scheduler"
)

// Default is the policy of a queue that names none: gangway's, the one
// the simulator recommends (docs/simulation.md §6). "backfill" is what
// the controller ran before queues had policies (Slurm's order, with
// reservations for blocked gangs).
const Default = "gangway"

// Job is what a policy knows of one job. Times are seconds on any clock
// the caller keeps consistent (Unix seconds in the server, seconds since
// the trace's start in the simulator).
type Job struct {
	// Submit is when the job was submitted.
	Submit float64
	// PendSince is when its current wait began: its submit, or the end of
	// its last attempt. Meaningless while Running.
	PendSince float64
	// Attained is the GPU-seconds it held in finished attempts.
	Attained float64
	// GPUs is how many GPUs it holds while it runs (a fraction counts
	// whole).
	GPUs int
	// Running is true while it holds GPUs; SegStart is when its current
	// attempt began.
	Running  bool
	SegStart float64
	// Queue and User are its queue and owner, for policies that weigh
	// tenants.
	Queue, User string
	// Promoted and PromotedBase are aging state that Rekey keeps (gangway:
	// levels of credit, and their count when the current wait began).
	// Replay rebuilds them from a job's history, so nothing of it needs
	// storing.
	Promoted, PromotedBase int
	// Lane is the job's place in LanePolicy's overdue lane. LaneRun, for
	// a caller that keeps no state between passes (the controller): its
	// running attempt was started in the lane (recorded on the attempt).
	Lane    LaneState
	LaneRun bool
}

// AttainedAt is the GPU-seconds the job has received by now.
func (j *Job) AttainedAt(now float64) float64 {
	if !j.Running {
		return j.Attained
	}
	return j.Attained + (now-j.SegStart)*float64(j.GPUs)
}

// Start begins an attempt at now.
func (j *Job) Start(now float64) {
	j.Running, j.SegStart = true, now
}

// Wait begins a wait at now: on arrival, or after an attempt ended (the
// caller adds the attempt's GPU-seconds to Attained).
func (j *Job) Wait(now float64) {
	j.Running, j.PendSince, j.PromotedBase = false, now, j.Promoted
}

// Key orders jobs: lower first, by A then B. Callers break ties (submit
// order, then ID).
type Key struct{ A, B float64 }

// Less reports whether k orders before o.
func (k Key) Less(o Key) bool {
	if k.A != o.A {
		return k.A < o.A
	}
	return k.B < o.B
}

// Policy orders one queue's jobs. Its methods are pure functions of the
// job and now, except Rekey, which may update the job's aging state; they
// must not allocate, since the simulator calls them per event. A
// pending or running job's Key may change only at the times NextRekey
// gives.
type Policy interface {
	// Name is the name New takes.
	Name() string
	// Mode is how the scheduler walks the queue.
	Mode() scheduler.Mode
	// Key is j's place in line at now.
	Key(j *Job, now float64) Key
	// NextRekey is when j's key next changes on its own (aging, a level
	// crossed); +Inf for never. Not called for finished jobs.
	NextRekey(j *Job, now float64) float64
	// Rekey applies what happens to j at now, a time NextRekey gave.
	Rekey(j *Job, now float64)
	// Preempts reports that Priority reaches the scheduler, which then
	// preempts running jobs of lower priority in the queue (those not
	// Protected) for pending ones. False: every job has priority 0.
	Preempts() bool
	// Levels is the highest Priority; priorities are 0..Levels.
	Levels() int
	// Priority is j's scheduler priority at now: higher wins.
	Priority(j *Job, now float64) int
	// Protected reports a running job that must not be preempted now
	// (it has just started and may not have checkpointed yet).
	Protected(j *Job, now float64) bool
	// Starving reports a pending job that has waited too long: it may
	// preempt any job ranked below it.
	Starving(j *Job, now float64) bool
}

var (
	regMu    sync.RWMutex // guards registry
	registry = map[string]func() Policy{}
)

// Register makes a policy available to New under name (lower case). It
// panics when the name is taken: call it from an init function.
func Register(name string, newPolicy func() Policy) {
	regMu.Lock()
	defer regMu.Unlock()
	if _, dup := registry[name]; dup || name != strings.ToLower(name) {
		panic(fmt.Sprintf("policy: Register %q twice or not lower case", name))
	}
	registry[name] = newPolicy
}

// Names lists the policies New knows, sorted.
func Names() []string {
	regMu.RLock()
	defer regMu.RUnlock()
	out := make([]string, 0, len(registry))
	for n := range registry {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// New returns the named policy with its default settings; "" is Default.
func New(name string) (Policy, error) {
	n := strings.ToLower(strings.TrimSpace(name))
	if n == "" {
		n = Default
	}
	regMu.RLock()
	f := registry[n]
	regMu.RUnlock()
	if f == nil {
		return nil, fmt.Errorf("unknown policy %q (known: %s)", name, strings.Join(Names(), ", "))
	}
	return f(), nil
}

// Segment is one finished or running attempt of a job.
type Segment struct {
	Start, End float64
	// GPUs it held; 0 means the job's.
	GPUs int
	// Open: it is still running (End is ignored).
	Open bool
}

// maxReplaySteps bounds the rekey events Replay applies per wait or
// attempt, against a policy whose NextRekey does not advance.
const maxReplaySteps = 1 << 12

// Replay rebuilds j's state at now from its history, as if the
// simulator had replayed it: j arrives at j.Submit, runs segs in order
// (sorted by Start, not overlapping) and waits between them, with every
// rekey event the policy gives applied on the way. It sets PendSince,
// Attained, Running, SegStart and the aging state; Submit and GPUs must be
// set. This is how the controller computes a policy's view of a job from
// its status, without storing anything.
func Replay(p Policy, j *Job, segs []Segment, now float64) {
	j.Attained, j.Promoted = 0, 0
	j.Wait(j.Submit)
	t := j.Submit
	for _, s := range segs {
		rekeyUntil(p, j, t, s.Start)
		j.Start(s.Start)
		if s.Open {
			t = s.Start
			break
		}
		rekeyUntil(p, j, s.Start, s.End)
		g := s.GPUs
		if g == 0 {
			g = j.GPUs
		}
		j.Attained += max(0, s.End-s.Start) * float64(g)
		j.Wait(s.End)
		t = s.End
	}
	rekeyUntil(p, j, t, now)
}

// rekeyUntil applies j's rekey events from `from` up to and including
// until.
func rekeyUntil(p Policy, j *Job, from, until float64) {
	t := from
	for range maxReplaySteps {
		next := p.NextRekey(j, t)
		if math.IsInf(next, 1) || next > until {
			return
		}
		t = max(next, t)
		p.Rekey(j, t)
	}
}
