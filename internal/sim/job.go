package sim

import (
	"math"

	"github.com/gangway/gangway/internal/scheduler"
	"github.com/gangway/gangway/internal/scheduler/policy"
	"github.com/gangway/gangway/internal/sim/trace"
)

type jobPhase uint8

const (
	phaseFuture jobPhase = iota // not yet arrived
	phasePending
	phaseRunning
	phaseDone
)

// slot is the GPUs a job holds on one node; for a fractional rank, one
// GPU of which it holds milli thousandths.
type slot struct {
	node  int32
	mask  uint64
	milli int16
}

// job is one trace job as it moves through the simulation.
//
// A running job is in a segment that began at segStart: it first spends
// segOverhead seconds restoring (no progress), then computes, stopping for
// ckptCost seconds after every ckptEvery seconds of work to write a
// checkpoint. All of this is closed-form, so no event fires per checkpoint.
type job struct {
	idx    int32
	t      *trace.Job
	submit float64
	dur    float64
	gpus   int
	milli  int // thousandths of each GPU; 1000 for whole GPUs
	phase  jobPhase
	// pod: an openb pod, one process whose GPUs sit on one node.
	pod bool

	// remaining is useful work left at the start of the current segment
	// (or now, when not running), in seconds.
	remaining float64
	// owedRestart and owedPreempt are seconds of non-progress time owed
	// at the next start: restarting after a failure, restoring after a
	// preemption.
	owedRestart, owedPreempt float64
	// attained is GPU-seconds held in finished segments.
	attained float64

	segStart    float64
	segRestart  float64 // owedRestart paid in this segment
	segPreempt  float64 // owedPreempt paid in this segment
	segEnd      float64 // when the segment completes the job
	ckptEvery   float64 // 0: no periodic checkpoints
	ckptCost    float64
	firstStart  float64
	end         float64
	queued      float64
	maxWait     float64 // longest single wait
	pendSince   float64
	preemptions int
	failures    int
	epoch       uint32 // bumps when the segment ends; stale events carry old epochs
	rankVer     uint32 // bumps when a running job's key changes
	slots       []slot
	ranks       []scheduler.Slot // slots as the scheduler wants them in Running; nil until needed
	runPos      int              // index in engine.running
	lastKey     key              // key under which it sits in the pending queue
	rekeyAt     float64
	firstNodes  string
	// ps is the job as internal/scheduler/policy sees it: pstate fills
	// it from the fields above; its aging state (Promoted, PromotedBase)
	// lives only there.
	ps policy.Job
}

// pstate is j as the policies of internal/scheduler/policy see it, in
// j's own storage, so that a call allocates nothing.
func (j *job) pstate() *policy.Job {
	s := &j.ps
	s.Submit, s.PendSince, s.Attained, s.GPUs = j.submit, j.pendSince, j.attained, j.gpus
	s.Running, s.SegStart = j.phase == phaseRunning, j.segStart
	return s
}

func (j *job) segOverhead() float64 { return j.segRestart + j.segPreempt }

// nCkpt is how many checkpoints a run of w seconds of work writes: one
// after every full interval, none at the very end.
func nCkpt(w, every float64) float64 {
	if every <= 0 || w <= 0 {
		return 0
	}
	return math.Ceil(w/every-1e-9) - 1
}

// progress is the useful work done in the current segment by time t, and
// the part of it a checkpoint has committed.
func (j *job) progress(t float64) (done, committed float64) {
	e := t - j.segStart - j.segOverhead()
	if e <= 0 {
		return 0, 0
	}
	if j.ckptEvery <= 0 {
		return min(e, j.remaining), 0
	}
	cycle := j.ckptEvery + j.ckptCost
	k := math.Floor(e / cycle)
	rem := e - k*cycle
	done = k*j.ckptEvery + min(rem, j.ckptEvery)
	committed = k * j.ckptEvery
	return min(done, j.remaining), min(committed, j.remaining)
}

// committedAt is when the current segment's last checkpoint by t was
// committed (its write done), or segStart if it has none: what live
// accounting takes as the point work resumes from.
func (j *job) committedAt(t float64) float64 {
	e := t - j.segStart - j.segOverhead()
	if e <= 0 || j.ckptEvery <= 0 {
		return j.segStart
	}
	cycle := j.ckptEvery + j.ckptCost
	k := math.Floor(e / cycle)
	if k == 0 {
		return j.segStart
	}
	return j.segStart + j.segOverhead() + k*cycle
}

// remainingAt is the work left at t, counting owed overhead.
func (j *job) remainingAt(t float64) float64 {
	if j.phase != phaseRunning {
		return j.remaining + j.owedRestart + j.owedPreempt
	}
	done, _ := j.progress(t)
	paid := max(0, min(t-j.segStart, j.segOverhead()))
	return j.remaining - done + j.segOverhead() - paid
}

// attainedAt is GPU-seconds received by t.
func (j *job) attainedAt(t float64) float64 {
	if j.phase != phaseRunning {
		return j.attained
	}
	return j.attained + (t-j.segStart)*float64(j.gpus)
}

// key orders jobs for a policy: lower first.
type key struct {
	a, b float64
	idx  int32
}

func (k key) less(o key) bool {
	if k.a != o.a {
		return k.a < o.a
	}
	if k.b != o.b {
		return k.b < o.b
	}
	return k.idx < o.idx
}
