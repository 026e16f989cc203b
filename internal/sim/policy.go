package sim

import (
	"fmt"
	"math"
	"sort"
	"strings"
)

// QueueMode is how a non-preemptive policy hands its queue to the
// scheduler.
type QueueMode uint8

const (
	// Strict stops at the first gang that does not fit (strict FIFO).
	Strict QueueMode = iota
	// Greedy lets later gangs start when an earlier one does not fit.
	Greedy
	// Backfill reserves room for the blocked head of the queue and lets
	// later gangs start only where they do not delay it.
	Backfill
)

// Policy decides which jobs should run and in what order; where they run
// is the scheduler's decision. Policies are chosen by name (ParsePolicy).
type Policy interface {
	// Name is the policy's name, as ParsePolicy takes it.
	Name() string
	// Oracle reports whether the policy reads job durations from the
	// trace, which no production scheduler knows.
	Oracle() bool
	preemptive() bool
	mode() QueueMode
	// key orders jobs: lower runs first. For a pending job it must not
	// change until nextRekey.
	key(j *job, now float64) key
	// nextRekey is when j's key next changes on its own; +Inf for never.
	nextRekey(j *job, now float64) float64
	// rekey applies what happens at that time (aging).
	rekey(j *job, now float64)
	// protected reports a running job that must not be preempted now.
	protected(j *job, now float64) bool
	// schedPreempt hands preemption to the scheduler: requests and
	// running jobs carry priority(), and the scheduler picks victims
	// (fewest, least work lost, topology-compatible), as in production.
	// Policies for which preemptive() is true instead preempt by GPU
	// count in policy order, as the Helios simulator does.
	schedPreempt() bool
	priority(j *job, now float64) int
	// stableKeys reports that a running job's key changes only at its
	// rekey events.
	stableKeys() bool
	// starving reports a pending job that has waited too long.
	starving(j *job, now float64) bool
}

// PolicyNames lists the policies ParsePolicy knows.
func PolicyNames() []string {
	return []string{"fifo", "fifo-backfill", "sjf", "srtf", "tiresias", "gangway", "live"}
}

// ParsePolicy returns the named policy with its default settings.
func ParsePolicy(name string) (Policy, error) {
	switch strings.ToLower(strings.TrimSpace(name)) {
	case "fifo", "strict-fifo":
		return fifo{}, nil
	case "fifo-backfill", "backfill", "easy":
		return fifo{backfill: true}, nil
	case "sjf":
		return sjf{}, nil
	case "srtf":
		return srtf{}, nil
	case "tiresias", "las", "2d-las":
		return Tiresias(3600), nil
	case "gangway", "default":
		return Gangway(), nil
	case "live", "server":
		return live{}, nil
	}
	return nil, fmt.Errorf("unknown policy %q (known: %s)", name, strings.Join(PolicyNames(), ", "))
}

type never struct{}

func (never) nextRekey(*job, float64) float64 { return math.Inf(1) }
func (never) rekey(*job, float64)             {}
func (never) protected(*job, float64) bool    { return false }
func (never) schedPreempt() bool              { return false }
func (never) priority(*job, float64) int      { return 0 }
func (never) stableKeys() bool                { return true }
func (never) starving(*job, float64) bool     { return false }

// fifo starts jobs in submit order; without backfill a job that does not
// fit blocks every job behind it (the Helios reference's FIFO).
type fifo struct {
	never
	backfill bool
}

func (p fifo) Name() string {
	if p.backfill {
		return "fifo-backfill"
	}
	return "fifo"
}
func (p fifo) Oracle() bool   { return p.backfill } // backfill reads durations as its estimates
func (fifo) preemptive() bool { return false }
func (p fifo) mode() QueueMode {
	if p.backfill {
		return Backfill
	}
	return Strict
}
func (fifo) key(j *job, _ float64) key { return key{a: j.submit, idx: j.idx} }

// live is what the server's controller runs today: jobs in submit order
// (priorities and queues as the trace gives them: none), the scheduler in
// Backfill mode with ServerReservations reservations, each job's time
// limit as its estimate. Traces carry no time limits, so no end is known:
// a blocked gang's reservation has no start and only gangs that leave its
// GPUs alone pass it. Unlike fifo-backfill it reads no durations.
type live struct{ never }

func (live) Name() string              { return "live" }
func (live) Oracle() bool              { return false }
func (live) preemptive() bool          { return false }
func (live) mode() QueueMode           { return Backfill }
func (live) key(j *job, _ float64) key { return key{a: j.submit, idx: j.idx} }

// sjf starts the shortest job first, by its true duration, strictly: the
// shortest job that does not fit blocks the rest (the Helios reference).
type sjf struct{ never }

func (sjf) Name() string              { return "sjf" }
func (sjf) Oracle() bool              { return true }
func (sjf) preemptive() bool          { return false }
func (sjf) mode() QueueMode           { return Strict }
func (sjf) key(j *job, _ float64) key { return key{a: j.dur, idx: j.idx} }

// srtf runs the jobs with the least remaining time, preempting others, by
// GPU count (the Helios reference's SRTF).
type srtf struct{ never }

func (srtf) Name() string     { return "srtf" }
func (srtf) Oracle() bool     { return true }
func (srtf) preemptive() bool { return true }
func (srtf) stableKeys() bool { return false }
func (srtf) mode() QueueMode  { return Greedy }
func (srtf) key(j *job, now float64) key {
	return key{a: j.remainingAt(now), idx: j.idx}
}

// tiresias is 2D-LAS (Tiresias, NSDI'19, discretized): queue 0 holds jobs
// that have received less than Threshold GPU-seconds, queue 1 the rest;
// within a queue, first come first served; queue 0 preempts queue 1.
type tiresias struct {
	never
	thresholds []float64
}

// Tiresias returns 2D-LAS with the given queue thresholds in GPU-seconds.
func Tiresias(thresholds ...float64) Policy {
	return tiresias{thresholds: thresholds}
}

func (tiresias) Name() string     { return "tiresias" }
func (tiresias) Oracle() bool     { return false }
func (tiresias) preemptive() bool { return true }
func (tiresias) mode() QueueMode  { return Greedy }
func (p tiresias) key(j *job, now float64) key {
	return key{a: float64(levelOf(p.thresholds, j.attainedAt(now))), b: j.submit, idx: j.idx}
}
func (p tiresias) nextRekey(j *job, now float64) float64 {
	if j.phase != phaseRunning {
		return math.Inf(1)
	}
	return crossing(p.thresholds, j.attainedAt(now), j.gpus, now)
}

// levelOf is the queue of a job that has attained a GPU-seconds: the
// number of thresholds it has reached (within rounding).
func levelOf(th []float64, a float64) int {
	a += 1e-6
	return sort.Search(len(th), func(i int) bool { return th[i] > a })
}

// crossing is when a running job at attained a with g GPUs reaches the next
// threshold above a.
func crossing(th []float64, a float64, g int, now float64) float64 {
	l := levelOf(th, a)
	if l >= len(th) || g <= 0 {
		return math.Inf(1)
	}
	return now + (th[l]-a)/float64(g)
}

// GangwayPolicy is gangway's default: it knows no durations. Jobs sit in
// multi-level queues by attained GPU-service (least attained first, as
// LAS approximates shortest-remaining-first on heavy-tailed workloads;
// first come first served within a level). A waiting job's priority ages
// up one level each time it has waited AgingFactor × its run time so far
// (at least MinAging), and a job that has waited StarveAfter in one go
// jumps to the top level, so no job starves. A job that has just started
// is not preempted for MinRun. Levels reach the scheduler as priorities,
// and the scheduler chooses the victims.
type GangwayPolicy struct {
	Thresholds  []float64 // GPU-seconds
	AgingFactor float64
	MinAging    float64 // seconds
	StarveAfter float64 // seconds
	MinRun      float64 // seconds
	// MaxQuantum, when set, protects a job at level L for
	// min(MaxQuantum, MinRun·2^L) after it starts: longer-running jobs get
	// longer slices, as in multi-level feedback queues.
	MaxQuantum float64 // seconds
}

// Gangway returns the default policy with its default settings: level
// thresholds at 1, 2, 4, ... 4,096 GPU-hours.
func Gangway() *GangwayPolicy {
	var th []float64
	for t := 3600.0; t <= 3600*4096; t *= 2 {
		th = append(th, t)
	}
	// No job waits more than 4 h at a stretch before it ranks first, and
	// aging starts at 2 h so that it acts before that. With a day, preempted
	// long jobs waited so long that on Philly October at load 0.8 p99 JCT
	// rose 0.7% above FIFO's; shorter bounds lower p99 and the longest wait
	// at every load tried, average JCT as good or better, at the cost of
	// more preemptions under the heaviest load (docs/simulation.md §2).
	return &GangwayPolicy{Thresholds: th, AgingFactor: 2, MinAging: 2 * 3600, StarveAfter: 4 * 3600, MinRun: 120}
}

func (*GangwayPolicy) Name() string       { return "gangway" }
func (*GangwayPolicy) Oracle() bool       { return false }
func (*GangwayPolicy) preemptive() bool   { return false }
func (*GangwayPolicy) mode() QueueMode    { return Greedy }
func (*GangwayPolicy) schedPreempt() bool { return true }

// priority maps the level to a scheduler priority: level 0 is highest,
// and a starving job ranks above every level, so that it may preempt
// jobs of its own level too.
func (p *GangwayPolicy) priority(j *job, now float64) int {
	if p.starving(j, now) {
		return len(p.Thresholds) + 1
	}
	return len(p.Thresholds) - p.level(j, now)
}

// level is the job's queue after aging credit.
func (p *GangwayPolicy) level(j *job, now float64) int {
	l := levelOf(p.Thresholds, j.attainedAt(now)) - j.promoted
	return max(l, 0)
}

func (p *GangwayPolicy) key(j *job, now float64) key {
	return key{a: float64(p.level(j, now)), b: j.submit, idx: j.idx}
}

// agingWait is how long a job must wait for its next promotion.
func (p *GangwayPolicy) agingWait(j *job) float64 {
	ran := 0.0
	if j.gpus > 0 {
		ran = j.attained / float64(j.gpus)
	}
	return max(p.MinAging, p.AgingFactor*ran)
}

func (p *GangwayPolicy) nextRekey(j *job, now float64) float64 {
	switch j.phase {
	case phaseRunning:
		return crossing(p.Thresholds, j.attainedAt(now), j.gpus, now)
	case phasePending:
		if p.level(j, now) == 0 {
			return math.Inf(1)
		}
		t := j.pendSince + float64(j.promoted+1-j.promotedBase)*p.agingWait(j)
		if p.StarveAfter > 0 {
			t = min(t, max(now, j.pendSince+p.StarveAfter))
		}
		return t
	}
	return math.Inf(1)
}

func (p *GangwayPolicy) rekey(j *job, now float64) {
	if j.phase != phasePending {
		return
	}
	if p.StarveAfter > 0 && now-j.pendSince >= p.StarveAfter {
		j.promoted = levelOf(p.Thresholds, j.attainedAt(now))
		return
	}
	if p.level(j, now) > 0 {
		j.promoted++
	}
}

func (p *GangwayPolicy) protected(j *job, now float64) bool {
	q := p.MinRun
	if p.MaxQuantum > q {
		q = min(p.MaxQuantum, p.MinRun*math.Exp2(float64(p.level(j, now))))
	}
	return now-j.segStart < q
}

func (*GangwayPolicy) stableKeys() bool { return true }

func (p *GangwayPolicy) starving(j *job, now float64) bool {
	return p.StarveAfter > 0 && j.phase == phasePending && now-j.pendSince >= p.StarveAfter
}
