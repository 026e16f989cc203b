package sim

import (
	"maps"
	"math"
	"slices"

	"github.com/gangway/gangway/internal/api"
	"github.com/gangway/gangway/internal/base/stats"
	"github.com/gangway/gangway/internal/sim/trace"
)

// Summary is one run's headline figures. Times are seconds; percentiles
// interpolate linearly between order statistics, as numpy's default does.
type Summary struct {
	Policy    string  `json:"policy"`
	Placement string  `json:"placement"`
	Jobs      int     `json:"jobs"`
	AvgJCT    float64 `json:"avg_jct_s"`
	P50JCT    float64 `json:"p50_jct_s"`
	P95JCT    float64 `json:"p95_jct_s"`
	P99JCT    float64 `json:"p99_jct_s"`
	AvgQueue  float64 `json:"avg_queue_s"`
	MaxQueue  float64 `json:"max_queue_s"`
	// MaxWait is the longest single wait of any job (MaxQueue adds up
	// all of a job's waits, between preemptions too).
	MaxWait float64 `json:"max_wait_s"`
	// WaitedOver24h is the share of the jobs that arrived whose waits
	// added up to more than 24 hours (so far, for those unfinished at
	// the horizon).
	WaitedOver24h float64 `json:"waited_over_24h_share"`
	// Slowdown of the finished jobs: JCT over run time, the run time
	// being the job's duration in the trace (its useful work) but at
	// least SlowdownFloor seconds, so that a 1-second job that waited a
	// minute does not read as 60 (bounded slowdown). The average and
	// percentiles are over finished jobs, like JCT's.
	AvgSlowdown float64 `json:"slowdown_avg"`
	P50Slowdown float64 `json:"slowdown_p50"`
	P99Slowdown float64 `json:"slowdown_p99"`
	MaxSlowdown float64 `json:"slowdown_max"`
	// Makespan is from the first submission to the last finish; with a
	// horizon, to the horizon unless every job finished before it.
	Makespan       float64 `json:"makespan_s"`
	GPUUtilization float64 `json:"gpu_utilization"`
	Preemptions    int     `json:"preemptions"`
	// Goodput is useful GPU-seconds over GPU-seconds held: what
	// preemption, restarts, checkpoints and lost work did not waste.
	Goodput float64 `json:"goodput"`

	// Unfinished counts jobs still pending or running at the horizon.
	Unfinished int `json:"unfinished,omitempty"`
	// FragBlocked is the share of the time with a queue during which the
	// job at its head waited although enough GPUs were free in total.
	FragBlocked float64 `json:"frag_blocked_share"`
	// ETTR is effective training time: useful time over wall time since
	// each job first started, weighted by GPUs (Llama 3's measure).
	ETTR float64 `json:"ettr,omitempty"`
	// Interruptions by cause, and GPU-hours lost by cause.
	Interruptions map[string]int     `json:"interruptions,omitempty"`
	GPUHoursLost  map[string]float64 `json:"gpu_hours_lost,omitempty"`
	// SchedulerCalls counts calls into the scheduler.
	SchedulerCalls int `json:"scheduler_calls"`
	// Usage is the run as `gangway report usage` would account for it
	// (its row, keyed by the policy): an interrupted segment's work is
	// useful up to its last committed checkpoint and lost after it,
	// charged to api.CauseGPUFault, CauseNodeLost or CauseUserError (a
	// software crash); completed and preempted segments are useful
	// throughout; segments open at the horizon are running; the wait
	// between a job's segments is restart backoff. Live accounting cannot
	// tell restore, relaunch and checkpoint-writing time from training,
	// so they count as useful here too: GPUHoursLost has the simulator's
	// own finer account.
	Usage *api.UsageRow `json:"usage,omitempty"`
}

// SlowdownFloor is the least run time, in seconds, a slowdown divides
// by.
const SlowdownFloor = 10.0

// waitLimit is the wait the summary counts jobs beyond (24 hours).
const waitLimit = 24 * 3600.0

// JobResult is what happened to one job. Start is -1 for a job that never
// ran, End -1 for one that did not finish.
type JobResult struct {
	ID          string  `json:"id"`
	GPUs        int     `json:"gpus"`
	Submit      float64 `json:"submit_s"`
	Duration    float64 `json:"duration_s"`
	Start       float64 `json:"start_s"`
	End         float64 `json:"end_s"`
	Queue       float64 `json:"queue_s"`
	MaxWait     float64 `json:"max_wait_s"`
	Preemptions int     `json:"preemptions"`
	Failures    int     `json:"failures"`
	// Nodes is where the job first started: node:GPUs pairs.
	Nodes string `json:"nodes,omitempty"`
}

// JCT is the job's completion time, or -1 if it did not finish.
func (r JobResult) JCT() float64 {
	if r.End < 0 {
		return -1
	}
	return r.End - r.Submit
}

// Slowdown is the job's JCT over its duration, the duration at least
// SlowdownFloor, or -1 if it did not finish.
func (r JobResult) Slowdown() float64 {
	if r.End < 0 {
		return -1
	}
	return r.JCT() / max(r.Duration, SlowdownFloor)
}

// Series samples the cluster over time.
type Series struct {
	T       []float64 `json:"t_s"`
	Pending []int     `json:"pending"`
	Busy    []int     `json:"busy_gpus"`
	Healthy []int     `json:"healthy_gpus"`
}

// Result is everything a run produced.
type Result struct {
	Summary Summary     `json:"summary"`
	Jobs    []JobResult `json:"-"`
	Series  Series      `json:"-"`
	GPUs    int         `json:"gpus"`
}

func (e *engine) setupSeries(jobs []trace.Job) {
	e.sampleEvery = e.cfg.SampleEvery
	if e.sampleEvery <= 0 {
		span := e.cfg.Horizon
		if span == 0 && len(jobs) > 1 {
			span = jobs[len(jobs)-1].Submit - jobs[0].Submit
		}
		e.sampleEvery = max(60, math.Ceil(span/2000))
	}
	e.nextSample = e.ranSince
}

// advance accounts for the time from e.now to t, over which nothing
// changes.
func (e *engine) advance(t float64) {
	dt := t - e.now
	if dt <= 0 {
		return
	}
	if e.pq.len() > 0 {
		e.pendTime += dt
		if e.headBlocked {
			e.blockedTime += dt
		}
	}
	for e.nextSample < t {
		s := &e.series
		s.T = append(s.T, e.nextSample-e.ranSince)
		s.Pending = append(s.Pending, e.pq.len())
		s.Busy = append(s.Busy, e.busy)
		s.Healthy = append(s.Healthy, e.c.healthy)
		e.nextSample += e.sampleEvery
		if len(s.T) >= 20000 {
			e.decimate()
		}
	}
}

// decimate halves the series' resolution when a run outlasts its plan.
func (e *engine) decimate() {
	s := &e.series
	k := 0
	for i := 0; i < len(s.T); i += 2 {
		s.T[k], s.Pending[k], s.Busy[k], s.Healthy[k] = s.T[i], s.Pending[i], s.Busy[i], s.Healthy[i]
		k++
	}
	s.T, s.Pending, s.Busy, s.Healthy = s.T[:k], s.Pending[:k], s.Busy[:k], s.Healthy[:k]
	e.sampleEvery *= 2
	e.nextSample = e.ranSince + s.T[k-1] + e.sampleEvery
}

func (e *engine) result() *Result {
	// Book the segments still open (at the horizon) as if they
	// checkpointed there.
	var openHeld, openUseful float64
	for _, j := range e.run {
		done, _ := j.progress(e.now)
		g := float64(j.gpus)
		openHeld += (e.now - j.segStart) * g
		openUseful += done * g
	}
	r := &Result{GPUs: e.c.gpus}
	s := &r.Summary
	s.Policy = e.pol.Name()
	s.Placement = e.cfg.Placement.String()
	s.Preemptions = e.preemptions
	s.SchedulerCalls = e.pl.calls
	var jcts, slows []float64
	var queueSum float64
	arrived, waitedLong := 0, 0
	var ettrNum, ettrDen float64
	makespan := 0.0
	r.Jobs = make([]JobResult, len(e.jobs))
	for i := range e.jobs {
		j := &e.jobs[i]
		q, w := j.queued, j.maxWait
		if j.phase == phasePending {
			q += e.now - j.pendSince
			w = max(w, e.now-j.pendSince)
		}
		s.MaxWait = max(s.MaxWait, w)
		jr := JobResult{ID: j.t.ID, GPUs: j.gpus, Submit: j.submit - e.ranSince, Duration: j.dur,
			Start: -1, End: -1, Queue: q, MaxWait: w, Preemptions: j.preemptions, Failures: j.failures, Nodes: j.firstNodes}
		if j.firstStart >= 0 {
			jr.Start = j.firstStart - e.ranSince
		}
		if j.phase != phaseFuture {
			arrived++
			if q > waitLimit {
				waitedLong++
			}
		}
		if j.phase == phaseDone {
			jr.End = j.end - e.ranSince
			jcts = append(jcts, j.end-j.submit)
			slows = append(slows, jr.Slowdown())
			queueSum += q
			s.MaxQueue = max(s.MaxQueue, q)
			makespan = max(makespan, jr.End)
		} else if j.phase != phaseFuture {
			s.Unfinished++
			s.MaxQueue = max(s.MaxQueue, q)
		}
		if j.firstStart >= 0 {
			end := j.end
			if j.phase != phaseDone {
				end = e.now
			}
			work := j.dur - j.remaining
			if j.phase == phaseRunning {
				d, _ := j.progress(e.now)
				work += d
			}
			ettrNum += work * float64(j.gpus)
			ettrDen += (end - j.firstStart) * float64(j.gpus)
		}
		r.Jobs[i] = jr
	}
	s.Jobs = len(jcts)
	if len(jcts) > 0 {
		s.AvgJCT = stats.Mean(jcts)
		slices.Sort(jcts)
		s.P50JCT = stats.Percentile(jcts, 50)
		s.P95JCT = stats.Percentile(jcts, 95)
		s.P99JCT = stats.Percentile(jcts, 99)
		s.AvgQueue = queueSum / float64(len(jcts))
		s.AvgSlowdown = stats.Mean(slows)
		slices.Sort(slows)
		s.P50Slowdown = stats.Percentile(slows, 50)
		s.P99Slowdown = stats.Percentile(slows, 99)
		s.MaxSlowdown = slows[len(slows)-1]
	}
	if arrived > 0 {
		s.WaitedOver24h = float64(waitedLong) / float64(arrived)
	}
	if e.cfg.Horizon > 0 && len(jcts) < len(e.jobs) {
		// Some job had not finished (or arrived) by the horizon: the
		// run lasted until it.
		makespan = e.now - e.ranSince
	}
	s.Makespan = makespan
	held, useful := e.held+openHeld, e.useful+openUseful
	if makespan > 0 {
		s.GPUUtilization = held / (float64(e.c.gpus) * makespan)
	}
	s.Goodput = 1
	if held > 0 {
		s.Goodput = useful / held
	}
	if e.pendTime > 0 {
		s.FragBlocked = e.blockedTime / e.pendTime
	}
	if e.fail != nil {
		s.Interruptions = map[string]int{}
		for k, v := range e.interruptions {
			s.Interruptions[k] = v
		}
		if ettrDen > 0 {
			s.ETTR = ettrNum / ettrDen
		}
	}
	s.GPUHoursLost = map[string]float64{}
	for k, v := range e.lost {
		if v > 0 {
			s.GPUHoursLost[k] = v / 3600
		}
	}
	if len(s.GPUHoursLost) == 0 {
		s.GPUHoursLost = nil
	}
	s.Usage = e.usageRow(s.Policy)
	r.Series = e.series
	return r
}

// usageRow is the live accounting's row for the run so far: the tally of
// stopped segments, with the open ones running and the jobs waiting to
// start again in backoff.
func (e *engine) usageRow(key string) *api.UsageRow {
	t := e.usage
	t.Lost = maps.Clone(e.usage.Lost)
	t.Jobs = 0
	for i := range e.jobs {
		j := &e.jobs[i]
		if j.firstStart < 0 {
			continue
		}
		t.Jobs++
		g := float64(j.gpus)
		switch j.phase {
		case phaseRunning:
			t.Running += (e.now - j.segStart) * g
		case phasePending:
			t.Backoff += (e.now - j.pendSince) * g
		}
	}
	row := t.Row(key)
	return &row
}
