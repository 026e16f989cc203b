package policy

import (
	"math"
	"sort"

	"github.com/gangway/gangway/internal/scheduler"
)

func init() {
	Register("gangway-4h", func() Policy { return Gangway() })
	Register("las", func() Policy { return Gangway() })
}

// GangwayPolicy is least-attained-service with aging and a wall-clock
// starvation bound, gangway's default until the overdue lane
// (LanePolicy) replaced it; registered as "gangway-4h" and "las". It knows
// no durations. Jobs sit in multi-level queues by attained GPU-service
// (least attained first, as LAS approximates shortest-remaining-first on
// heavy-tailed workloads; first come first served within a level). A
// waiting job's priority ages up one level each time it has waited
// AgingFactor × its run time so far (at least MinAging), and a job that
// has waited StarveAfter in one go jumps to the top level, so no job
// starves. A job that has just started is not preempted for MinRun.
// Levels reach the scheduler as priorities, and the scheduler chooses the
// victims.
type GangwayPolicy struct {
	Thresholds  []float64 // GPU-seconds, ascending
	AgingFactor float64
	MinAging    float64 // seconds
	StarveAfter float64 // seconds; 0: never
	MinRun      float64 // seconds
	// MaxQuantum, when set, protects a job at level L for
	// min(MaxQuantum, MinRun·2^L) after it starts: longer-running jobs get
	// longer slices, as in multi-level feedback queues.
	MaxQuantum float64 // seconds
}

var _ Policy = (*GangwayPolicy)(nil)

// Gangway returns the policy with its default settings: level thresholds
// at 1, 2, 4, ... 4,096 GPU-hours.
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

func (*GangwayPolicy) Name() string         { return "gangway-4h" }
func (*GangwayPolicy) Mode() scheduler.Mode { return scheduler.Greedy }
func (*GangwayPolicy) Preempts() bool       { return true }

// Levels: a starving job ranks above every level.
func (p *GangwayPolicy) Levels() int { return len(p.Thresholds) + 1 }

// Priority maps the level to a scheduler priority: level 0 is highest,
// and a starving job ranks above every level, so that it may preempt
// jobs of its own level too.
func (p *GangwayPolicy) Priority(j *Job, now float64) int {
	if p.Starving(j, now) {
		return len(p.Thresholds) + 1
	}
	return len(p.Thresholds) - p.level(j, now)
}

// level is the job's queue after aging credit.
func (p *GangwayPolicy) level(j *Job, now float64) int {
	l := LevelOf(p.Thresholds, j.AttainedAt(now)) - j.Promoted
	return max(l, 0)
}

func (p *GangwayPolicy) Key(j *Job, now float64) Key {
	return Key{A: float64(p.level(j, now)), B: j.Submit}
}

// agingWait is how long a job must wait for its next promotion.
func (p *GangwayPolicy) agingWait(j *Job) float64 {
	ran := 0.0
	if j.GPUs > 0 {
		ran = j.Attained / float64(j.GPUs)
	}
	return max(p.MinAging, p.AgingFactor*ran)
}

func (p *GangwayPolicy) NextRekey(j *Job, now float64) float64 {
	if j.Running {
		return Crossing(p.Thresholds, j.AttainedAt(now), j.GPUs, now)
	}
	if p.level(j, now) == 0 {
		return math.Inf(1)
	}
	t := j.PendSince + float64(j.Promoted+1-j.PromotedBase)*p.agingWait(j)
	if p.StarveAfter > 0 {
		t = min(t, max(now, j.PendSince+p.StarveAfter))
	}
	return t
}

func (p *GangwayPolicy) Rekey(j *Job, now float64) {
	if j.Running {
		return
	}
	if p.StarveAfter > 0 && now-j.PendSince >= p.StarveAfter {
		j.Promoted = LevelOf(p.Thresholds, j.AttainedAt(now))
		return
	}
	if p.level(j, now) > 0 {
		j.Promoted++
	}
}

func (p *GangwayPolicy) Protected(j *Job, now float64) bool {
	q := p.MinRun
	if p.MaxQuantum > q {
		q = min(p.MaxQuantum, p.MinRun*math.Exp2(float64(p.level(j, now))))
	}
	return now-j.SegStart < q
}

func (p *GangwayPolicy) Starving(j *Job, now float64) bool {
	return p.StarveAfter > 0 && !j.Running && now-j.PendSince >= p.StarveAfter
}

// LevelOf is the queue of a job that has attained a GPU-seconds under
// thresholds th: the number of thresholds it has reached (within
// rounding).
func LevelOf(th []float64, a float64) int {
	a += 1e-6
	return sort.Search(len(th), func(i int) bool { return th[i] > a })
}

// Crossing is when a running job at attained a with g GPUs reaches the
// next threshold of th above a; +Inf if none.
func Crossing(th []float64, a float64, g int, now float64) float64 {
	l := LevelOf(th, a)
	if l >= len(th) || g <= 0 {
		return math.Inf(1)
	}
	return now + (th[l]-a)/float64(g)
}
