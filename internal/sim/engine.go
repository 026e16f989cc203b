package sim

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/gangway/gangway/internal/api"
	"github.com/gangway/gangway/internal/goodput"
	"github.com/gangway/gangway/internal/scheduler/policy"
	"github.com/gangway/gangway/internal/sim/trace"
)

// Config is one simulation run.
type Config struct {
	Shape     Shape
	Policy    Policy
	Placement Placement
	// PreemptCost is the checkpoint-and-restore time, in seconds, that a
	// preempted gang of the given size owes on its next start; nil means
	// HeliosPreemptCost.
	PreemptCost func(gpus int) float64
	// Failures, when set, injects interruptions.
	Failures *Failures
	// Checkpoint is how jobs checkpoint; it matters only with failures.
	Checkpoint Checkpointing
	// Horizon stops the run at this many seconds after the first submit;
	// 0 runs until every job has finished.
	Horizon float64
	// Seed seeds failures and random placement.
	Seed uint64
	// SampleEvery is the spacing of the time series in seconds; 0 picks
	// one that gives about 2,000 points.
	SampleEvery float64
	// Progress, when set, is called with jobs finished and total, about
	// 200 times per run, on Run's goroutine.
	Progress func(done, total int)
}

// ErrStuck means jobs remain that can never be placed (wider than the
// cluster, or asking for a GPU model it lacks).
var ErrStuck = errors.New("sim: jobs can never be placed")

type engine struct {
	cfg Config
	pol Policy
	// lane is pol when it follows segments (LanePolicy).
	lane      laned
	regranted []*job
	c         *cluster
	pl        *placer
	jobs      []job
	now       float64
	seq       uint64
	heap      evHeap
	next      int // next arrival
	done      int
	pq        pqueue // pending, sorted by lastKey
	run       []*job
	busy      int // GPUs held by running jobs
	rng       *rand.Rand
	fail      *Failures
	cost      func(int) float64
	chunk     []*job

	// accounting
	held, useful            float64 // GPU-seconds
	lost                    map[string]float64
	preemptions             int
	interruptions           map[string]int
	usage                   goodput.Tally // as live accounting would see the run
	pendTime, blockedTime   float64
	headBlocked             bool
	series                  Series
	sampleEvery, nextSample float64
	lastProgress            int
	ranSince                float64 // first submit

	// Pass skipping: freed is set when GPUs come back, fresh when a job
	// enters the queue (freshMin its key), blocked when the last strict
	// pass stopped at the job keyed blockedAt.
	freed, fresh, blocked bool
	freshMin, blockedAt   key

	// runSorted holds running jobs in key order for preemptive policies;
	// runDirty forces a rebuild.
	runSorted, runTmp []rk
	runDirty          bool
}

// Run replays jobs (sorted by Submit, as trace readers return them) on the
// configured cluster and returns what happened. It blocks until the run
// ends or ctx is done.
func Run(ctx context.Context, cfg Config, jobs []trace.Job) (*Result, error) {
	if cfg.Policy == nil {
		return nil, errors.New("sim: no policy")
	}
	c, err := newCluster(cfg.Shape)
	if err != nil {
		return nil, err
	}
	if cfg.Failures != nil {
		if err := cfg.Failures.Validate(); err != nil {
			return nil, err
		}
	}
	if cfg.Horizon < 0 || math.IsNaN(cfg.Horizon) {
		return nil, fmt.Errorf("sim: horizon must not be negative (got %v)", cfg.Horizon)
	}
	pl, err := newPlacer(c, cfg.Placement, cfg.Seed, len(jobs))
	if err != nil {
		return nil, err
	}
	e := &engine{
		cfg: cfg, pol: cfg.Policy, c: c,
		pl:            pl,
		rng:           rand.New(rand.NewPCG(cfg.Seed, 0x5eed)),
		fail:          cfg.Failures,
		cost:          cfg.PreemptCost,
		lost:          map[string]float64{},
		interruptions: map[string]int{},
	}
	if e.cost == nil {
		e.cost = HeliosPreemptCost
	}
	if l, ok := e.pol.(laned); ok {
		l.setup(c.gpus, len(jobs))
		e.lane = l
	}
	e.jobs = make([]job, len(jobs))
	for i := range jobs {
		t := &jobs[i]
		if i > 0 && t.Submit < jobs[i-1].Submit {
			return nil, fmt.Errorf("sim: jobs must be sorted by submit time (job %s at %v after %v)", t.ID, t.Submit, jobs[i-1].Submit)
		}
		if t.GPUs < 1 {
			return nil, fmt.Errorf("sim: job %s asks for %d GPUs; the simulator runs GPU jobs (drop CPU jobs when reading)", t.ID, t.GPUs)
		}
		if t.GPUs > c.gpus {
			return nil, fmt.Errorf("%w: job %s asks for %d GPUs, the cluster has %d", ErrStuck, t.ID, t.GPUs, c.gpus)
		}
		if math.IsNaN(t.Duration) || t.Duration < 0 || math.IsInf(t.Duration, 0) {
			return nil, fmt.Errorf("sim: job %s has duration %v", t.ID, t.Duration)
		}
		m := t.GPUMilli
		if m <= 0 || m > 1000 {
			m = 1000
		}
		if m < 1000 && t.GPUs != 1 {
			return nil, fmt.Errorf("sim: job %s shares GPUs (%d thousandths) across %d GPUs; only one-GPU jobs may share", t.ID, m, t.GPUs)
		}
		e.jobs[i] = job{idx: int32(i), t: t, submit: t.Submit, dur: t.Duration, gpus: t.GPUs, milli: m,
			remaining: t.Duration, firstStart: -1, end: -1, ps: policy.Job{Queue: t.Queue, User: t.User}}
	}
	if e.lane != nil && e.lane.turn() > 0 {
		// A turn no longer than a restore would be spent restoring: the
		// jobs taking turns would never finish.
		widest := 0
		for i := range jobs {
			widest = max(widest, jobs[i].GPUs)
		}
		if c := e.cost(widest); c >= e.lane.turn() {
			return nil, fmt.Errorf("sim: lane turn %v is not longer than the %v a preempted %d-GPU gang spends restoring its checkpoint: jobs taking turns in the lane would make no progress; set a longer laneTurn",
				time.Duration(e.lane.turn()*float64(time.Second)), time.Duration(c*float64(time.Second)), widest)
		}
	}
	if len(jobs) > 0 {
		e.ranSince = jobs[0].Submit
		e.now = jobs[0].Submit
	}
	e.setupSeries(jobs)
	if e.fail != nil && e.fail.Interruptions > 0 {
		e.scheduleFailure()
	}
	if err := e.loop(ctx); err != nil {
		return nil, err
	}
	return e.result(), nil
}

func (e *engine) push(ev event) {
	e.seq++
	ev.seq = e.seq
	e.heap.push(ev)
}

func (e *engine) loop(ctx context.Context) error {
	n := len(e.jobs)
	horizon := math.Inf(1)
	if e.cfg.Horizon > 0 {
		horizon = e.ranSince + e.cfg.Horizon
	}
	for iter := 0; ; iter++ {
		if iter&4095 == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		t := math.Inf(1)
		if len(e.heap) > 0 {
			t = e.heap[0].t
		}
		if e.next < n {
			t = min(t, e.jobs[e.next].submit)
		}
		if e.done == n && e.cfg.Horizon == 0 {
			break
		}
		if math.IsInf(t, 1) || t > horizon {
			if !math.IsInf(horizon, 1) {
				e.advance(horizon)
				e.now = horizon
			}
			break
		}
		e.advance(t)
		e.now = t
		dirty := false
		for len(e.heap) > 0 && e.heap[0].t <= t && e.heap[0].kind < evRekey {
			if e.handle(e.heap.pop()) {
				dirty = true
			}
		}
		for e.next < n && e.jobs[e.next].submit <= t {
			e.arrive(&e.jobs[e.next])
			e.next++
			dirty = true
		}
		for len(e.heap) > 0 && e.heap[0].t <= t {
			if e.handle(e.heap.pop()) {
				dirty = true
			}
		}
		if e.lane != nil {
			e.regranted = e.lane.regrant(e.regranted[:0])
			for _, j := range e.regranted {
				e.removePending(j)
				e.insertPending(j)
				dirty = true
			}
		}
		if dirty && e.passDue() {
			if err := e.pass(); err != nil {
				return err
			}
		}
		if e.cfg.Progress != nil {
			if p := e.done * 200 / max(n, 1); p != e.lastProgress {
				e.lastProgress = p
				e.cfg.Progress(e.done, n)
			}
		}
	}
	if e.done < n && e.cfg.Horizon == 0 {
		var stuck []string
		cur := e.pq.cursor()
		for j := cur.next(); j != nil && len(stuck) < 3; j = cur.next() {
			stuck = append(stuck, fmt.Sprintf("%s (%d GPUs)", j.t.ID, j.gpus))
		}
		return fmt.Errorf("%w: %d jobs left pending with nothing running, e.g. %v", ErrStuck, n-e.done, stuck)
	}
	return nil
}

// handle applies one event; it reports whether a scheduling pass is due.
func (e *engine) handle(ev event) bool {
	switch ev.kind {
	case evComplete:
		j := &e.jobs[ev.job]
		if j.phase != phaseRunning || j.epoch != ev.epoch {
			return false
		}
		e.complete(j)
		return true
	case evRekey:
		j := &e.jobs[ev.job]
		if j.epoch != ev.epoch || (j.phase != phaseRunning && j.phase != phasePending) {
			return false
		}
		if j.phase == phasePending {
			e.removePending(j)
			e.pol.rekey(j, e.now)
			e.insertPending(j)
		} else {
			if e.lane != nil {
				e.lane.running(j, e.now)
			}
			// Its old entry in runSorted goes stale; add it anew.
			j.rankVer++
			e.addSorted(j)
		}
		e.scheduleRekey(j)
		return true
	case evFailure:
		e.failure()
		e.scheduleFailure()
		return true
	case evRepair:
		if ev.gpu < 0 {
			e.c.setUp(int(ev.node), true)
			e.freed = true
		} else {
			e.c.breakGPU(int(ev.node), int(ev.gpu), false)
			e.freed = true
		}
		return true
	}
	return false
}

func (e *engine) arrive(j *job) {
	j.phase = phasePending
	j.pendSince = e.now
	j.ps.PromotedBase = j.ps.Promoted
	e.insertPending(j)
	e.scheduleRekey(j)
}

func (e *engine) scheduleRekey(j *job) {
	t := e.pol.nextRekey(j, e.now)
	if math.IsInf(t, 1) {
		return
	}
	e.push(event{t: max(t, e.now), kind: evRekey, job: j.idx, epoch: j.epoch})
}

// insertPending puts j into the pending queue under its current key.
func (e *engine) insertPending(j *job) {
	j.lastKey = e.pol.key(j, e.now)
	e.pq.insert(j)
	if !e.fresh || j.lastKey.less(e.freshMin) {
		e.fresh, e.freshMin = true, j.lastKey
	}
}

func (e *engine) removePending(j *job) {
	if e.pq.remove(j) {
		return
	}
	panic(fmt.Sprintf("sim: job %s not in the pending queue", j.t.ID))
}

// start begins a segment of j on slots, whose GPUs the placer has taken.
func (e *engine) start(j *job, slots []slot) error {
	if j.phase != phasePending {
		return fmt.Errorf("sim: start job %s: not pending", j.t.ID)
	}
	e.removePending(j)
	for _, s := range slots {
		n := &e.c.nodes[s.node]
		if !slices.Contains(n.jobs, j.idx) {
			n.jobs = append(n.jobs, j.idx)
		}
	}
	j.slots = slots
	j.phase = phaseRunning
	j.epoch++
	j.segStart = e.now
	j.segRestart, j.segPreempt = j.owedRestart, j.owedPreempt
	j.owedRestart, j.owedPreempt = 0, 0
	j.ckptEvery, j.ckptCost = 0, 0
	if e.fail != nil {
		nodeGPUs := 0
		for _, s := range slots {
			nodeGPUs += e.c.nodes[s.node].total
		}
		j.ckptEvery = e.cfg.Checkpoint.interval(e.fail, j.gpus, nodeGPUs)
		if j.ckptEvery > 0 {
			j.ckptCost = e.cfg.Checkpoint.Cost
		}
	}
	j.segEnd = e.now + j.segOverhead() + j.remaining + j.ckptCost*nCkpt(j.remaining, j.ckptEvery)
	if j.firstStart >= 0 {
		e.usage.Backoff += (e.now - j.pendSince) * float64(j.gpus) // between two of its segments
	}
	j.queued += e.now - j.pendSince
	j.maxWait = max(j.maxWait, e.now-j.pendSince)
	if j.firstStart < 0 {
		j.firstStart = e.now
		var b []byte
		for k, s := range slots {
			if k > 0 {
				b = append(b, ' ')
			}
			b = fmt.Appendf(b, "%s:%d", e.c.nodes[s.node].name, bits.OnesCount64(s.mask))
		}
		j.firstNodes = string(b)
	}
	if e.lane != nil {
		e.lane.started(j)
	}
	j.runPos = len(e.run)
	e.run = append(e.run, j)
	e.addSorted(j)
	e.busy += j.gpus
	e.push(event{t: j.segEnd, kind: evComplete, job: j.idx, epoch: j.epoch})
	e.scheduleRekey(j)
	return nil
}

// stop ends j's segment at now: it releases its GPUs and books the
// segment's GPU-seconds. kept is the work that survives.
func (e *engine) stop(j *job, kept float64, lostCause string) {
	held := e.now - j.segStart
	g := float64(j.gpus)
	done, _ := j.progress(e.now)
	paid := max(0, min(held, j.segOverhead()))
	paidRestart := min(paid, j.segRestart)
	paidPreempt := paid - paidRestart
	stall := max(0, held-paid-done)
	e.held += held * g
	e.useful += kept * g
	e.lost["restart"] += paidRestart * g
	e.lost["preemption"] += paidPreempt * g
	e.lost["checkpoint"] += stall * g
	if lostCause != "" {
		e.lost["lost_work_"+lostCause] += (done - kept) * g
		saved := j.committedAt(e.now) - j.segStart
		e.usage.Useful += saved * g
		e.usage.AddLost(liveCause[lostCause], (held-saved)*g)
	} else {
		e.usage.Useful += held * g // completed, or preempted: checkpointed as it stopped
	}
	j.attained += held * g
	j.remaining -= kept
	if j.remaining < 1e-9 {
		j.remaining = 0
	}
	j.owedRestart += j.segRestart - paidRestart
	j.owedPreempt += j.segPreempt - paidPreempt
	e.c.unapply(j, j.slots)
	e.freed = true
	for _, s := range j.slots {
		n := &e.c.nodes[s.node]
		if k := slices.Index(n.jobs, j.idx); k >= 0 {
			n.jobs = slices.Delete(n.jobs, k, k+1)
		}
	}
	j.slots, j.ranks = nil, nil
	last := len(e.run) - 1
	e.run[j.runPos] = e.run[last]
	e.run[j.runPos].runPos = j.runPos
	e.run = e.run[:last]
	e.busy -= j.gpus
	j.epoch++
	if e.lane != nil {
		e.lane.stopped(j)
	}
}

func (e *engine) complete(j *job) {
	e.stop(j, j.remaining, "")
	j.phase = phaseDone
	j.end = e.now
	e.done++
}

// requeue puts a stopped job back in line.
func (e *engine) requeue(j *job) {
	j.phase = phasePending
	j.pendSince = e.now
	j.ps.PromotedBase = j.ps.Promoted
	e.insertPending(j)
	e.scheduleRekey(j)
}

func (e *engine) preempt(j *job) {
	done, _ := j.progress(e.now)
	e.stop(j, done, "")
	j.owedPreempt += e.cost(j.gpus)
	j.preemptions++
	e.preemptions++
	e.requeue(j)
}

// liveCause is the cause live accounting charges an interruption of the
// failure model to: a rank's crash is a non-zero exit, a user error to
// gangway's reading.
var liveCause = map[string]api.Cause{"gpu": api.CauseGPUFault, "host": api.CauseNodeLost, "software": api.CauseUserError}

// interrupt stops j after a fault: work since its last checkpoint is lost.
func (e *engine) interrupt(j *job, cause string) {
	_, committed := j.progress(e.now)
	e.stop(j, committed, cause)
	j.owedRestart += e.fail.RestartCost
	j.failures++
	e.requeue(j)
}

// passDue reports whether a pass could start anything: something freed
// GPUs, or a job entered the queue where it might start. Skipping the
// others keeps a long blocked queue cheap; the outcome is the same.
func (e *engine) passDue() bool {
	if e.freed || e.pol.preemptive() || e.pol.schedPreempt() || !e.fresh {
		return true
	}
	switch e.pol.mode() {
	case Strict:
		return !e.blocked || e.freshMin.less(e.blockedAt)
	case Backfill:
		return !e.blocked || e.freshMin.less(e.blockedAt) || e.c.free > 0
	}
	return e.c.free > 0 || e.c.anyShared()
}

// pass runs the policy and the scheduler once at now.
func (e *engine) pass() error {
	e.freed, e.fresh, e.blocked = false, false, false
	var err error
	switch {
	case e.pol.preemptive():
		err = e.passQuota()
	case e.pol.schedPreempt():
		err = e.passPriority()
	case e.pol.mode() == Backfill:
		err = e.passBackfill()
	default:
		err = e.passQueue(e.pol.mode() == Strict)
	}
	e.headBlocked = e.pq.len() > 0 && e.pq.first().gpus <= e.c.free
	return err
}

// feasible is a cheap necessary condition for j to fit now.
func (e *engine) feasible(j *job) bool {
	if j.milli < 1000 {
		return e.c.free > 0 || e.c.shareRoom(j.milli)
	}
	return j.gpus <= e.c.free
}

// startAll starts placed jobs.
func (e *engine) startAll(got []placed) error {
	for _, p := range got {
		if err := e.start(p.j, p.slots); err != nil {
			return err
		}
	}
	return nil
}

// passQueue hands the pending queue to the scheduler in policy order, in
// chunks of growing size, skipping gangs that cannot fit (greedy) or
// stopping at the first that does not (strict).
func (e *engine) passQueue(strict bool) error {
	mode := Greedy
	if strict {
		mode = Strict
	}
	size := 32
	// minFail is the narrowest whole-GPU gang without constraints that did
	// not fit in this pass: any gang at least as wide cannot fit either
	// (a placement of it would contain one of the narrower gang), so the
	// greedy walk skips them instead of asking again.
	minFail := math.MaxInt
	cur := e.pq.cursor()
	for cur.peek() != nil && (e.c.free > 0 || e.c.anyShared()) {
		e.chunk = e.chunk[:0]
		stop := false
		for len(e.chunk) < size {
			j := cur.next()
			if j == nil {
				break
			}
			if !e.feasible(j) || (!strict && j.gpus >= minFail && e.plain(j)) {
				if strict {
					stop = true
					break
				}
				continue
			}
			e.chunk = append(e.chunk, j)
		}
		if len(e.chunk) > 0 {
			last := e.chunk[len(e.chunk)-1].lastKey
			out, err := e.pl.place(e.c, e.chunk, call{now: e.now, mode: mode, context: e.run})
			if err != nil {
				return err
			}
			if err := e.startAll(out.placed); err != nil {
				return err
			}
			stop = stop || (strict && out.blocked)
			if !strict && out.blocked {
				for _, j := range e.chunk {
					if j.phase == phasePending && e.plain(j) {
						minFail = min(minFail, j.gpus)
					}
				}
			}
			cur = e.pq.after(last)
		} else if !stop {
			break
		}
		if stop {
			if j := e.pq.first(); j != nil {
				e.blocked, e.blockedAt = true, j.lastKey
			}
			break
		}
		size = min(size*2, 4096)
	}
	return nil
}

// plain reports a whole-GPU job with no placement constraints, for which
// failing to fit is monotone in width.
func (e *engine) plain(j *job) bool {
	return j.milli >= 1000 && len(j.t.GPUModels) == 0 && !e.c.hostBound(j)
}

// passBackfill lets the scheduler backfill: the first blocked gang gets a
// reservation from running jobs' estimated ends (their true ends for an
// oracle policy; none known for live, which also reserves for several
// gangs as the server does), and later gangs start only where they cannot
// delay it. Like Slurm's bf_max_job_test it looks at a bounded window of
// the queue.
func (e *engine) passBackfill() error {
	if err := e.passQueue(true); err != nil {
		return err
	}
	if e.pq.len() < 2 || e.c.free == 0 {
		return nil
	}
	e.chunk = e.chunk[:0]
	cur := e.pq.cursor()
	for j := cur.next(); j != nil; j = cur.next() {
		if len(e.chunk) >= backfillWindow {
			break
		}
		if len(e.chunk) == 0 || e.feasible(j) {
			e.chunk = append(e.chunk, j)
		}
	}
	c := call{now: e.now, mode: Backfill, running: e.run, estimates: e.pol.Oracle()}
	if s, ok := e.pol.(shared); ok && s.server {
		c.reservations = serverReservations
	}
	out, err := e.pl.place(e.c, e.chunk, c)
	if err != nil {
		return err
	}
	return e.startAll(out.placed)
}

// backfillWindow bounds the gangs one backfill pass considers.
const backfillWindow = 500

// rank walks pending and running jobs in policy order, giving each its
// GPUs while the healthy GPUs last: starts are pending jobs that should
// run, victims running jobs that should yield. Protected running jobs keep
// their GPUs first.
func (e *engine) rank() (starts, victims []*job) {
	now := e.now
	e.sortRunning()
	quota := e.c.healthy
	run := e.runTmp[:0]
	for _, r := range e.runSorted {
		j := r.j
		if !r.live() {
			continue
		}
		if e.pol.protected(j, now) {
			quota -= j.gpus
			continue
		}
		run = append(run, r)
	}
	e.runTmp = run
	ri := 0
	cur := e.pq.cursor()
	for quota > 0 && (cur.peek() != nil || ri < len(run)) {
		if p := cur.peek(); p == nil || (ri < len(run) && run[ri].k.less(p.lastKey)) {
			j := run[ri].j
			ri++
			if j.gpus <= quota {
				quota -= j.gpus
			} else {
				victims = append(victims, j)
			}
			continue
		}
		j := cur.next()
		if j.gpus <= quota {
			quota -= j.gpus
			starts = append(starts, j)
		}
	}
	for ; ri < len(run); ri++ {
		victims = append(victims, run[ri].j)
	}
	return starts, victims
}

// passQuota preempts every running job that loses its place by GPU count
// and starts the chosen pending ones where the scheduler can place them:
// the Helios reference's SRTF semantics (used for SRTF and Tiresias).
func (e *engine) passQuota() error {
	starts, victims := e.rank()
	if len(starts) == 0 {
		return nil
	}
	for _, v := range victims {
		e.preempt(v)
	}
	out, err := e.pl.place(e.c, starts, call{now: e.now, mode: Greedy, context: e.run})
	if err != nil {
		return err
	}
	return e.startAll(out.placed)
}

// passPriority is the production path. The policy ranks jobs by GPU count
// as passQuota does, but only marks the running jobs that lose their
// place as preemptible; the chosen pending gangs go to the scheduler in
// policy order with the policy's priorities, and the scheduler places what
// fits and, for what does not, picks the fewest victims among the
// preemptible ones in a topology-compatible slot. Victims are stopped at
// once (they checkpoint and owe their restore cost) and the scheduler runs
// again at the same instant, as the controller's next pass would. Idle
// GPUs left over go to later jobs, which rank lowest and are the first
// victims. The controller offers victims by policy.Victims, the same rule
// over a list (TestVictimsRule keeps the two together); the simulator
// keeps its own walk over its incremental queues, which stops early.
func (e *engine) passPriority() error {
	for round := 0; round < 16; round++ {
		starts, victims := e.rank()
		if len(starts) == 0 {
			break
		}
		o := call{now: e.now, mode: Greedy, prio: e.pol.priority, context: e.run}
		if head := e.pq.first(); head != nil && e.pol.starving(head, e.now) {
			// A starving head may preempt any job ranked below it, even
			// when GPUs are free by count: a wide gang needs whole nodes
			// that neither the quota's victims nor the free GPUs give.
			victims = e.below(head)
		} else {
			victims = lowest(victims, starts)
		}
		starts = e.reachable(starts, victims)
		if len(starts) == 0 {
			break
		}
		if len(victims) > 0 {
			// Only the jobs that lose their place are offered as
			// victims; with one queue the others matter to nothing
			// the scheduler decides here.
			o.preempt, o.running = true, victims
		}
		out, err := e.pl.place(e.c, starts, o)
		if err != nil {
			return err
		}
		if err := e.startAll(out.placed); err != nil {
			return err
		}
		if len(out.victims) == 0 {
			break
		}
		for _, v := range out.victims {
			e.preempt(v)
		}
	}
	if e.c.free > 0 && e.pq.len() > 0 {
		return e.passQueue(false)
	}
	return nil
}

// scheduleFailure draws the next interruption of the whole fleet.
func (e *engine) scheduleFailure() {
	rate := e.fail.PerGPURate() * float64(e.c.gpus)
	if rate <= 0 {
		return
	}
	dt := e.rng.ExpFloat64() / rate
	e.push(event{t: e.now + dt, kind: evFailure})
}

// failure applies one interruption: a node drawn by GPU count, a cause by
// the model's shares. Faults on down nodes or broken GPUs are thinned away.
func (e *engine) failure() {
	g := e.rng.IntN(e.c.gpus)
	ni := 0
	// Nodes in order; a binary search over a prefix sum would be faster,
	// but interruptions are rare.
	for ; ni < len(e.c.nodes); ni++ {
		if g < e.c.nodes[ni].total {
			break
		}
		g -= e.c.nodes[ni].total
	}
	n := &e.c.nodes[ni]
	if !n.up || n.broken&(1<<uint(g)) != 0 {
		return
	}
	u := e.rng.Float64()
	f := e.fail
	var cause string
	switch {
	case u < f.GPUShare:
		cause = "gpu"
	case u < f.GPUShare+f.HostShare:
		cause = "host"
	default:
		cause = "software"
	}
	e.interruptions[cause]++
	jobOnGPU := func() *job {
		for _, ji := range n.jobs {
			j := &e.jobs[ji]
			for _, s := range j.slots {
				if int(s.node) == ni && s.mask&(1<<uint(g)) != 0 {
					return j
				}
			}
		}
		return nil
	}
	switch cause {
	case "gpu":
		if j := jobOnGPU(); j != nil {
			e.interrupt(j, cause)
		}
		e.c.breakGPU(ni, g, true)
		e.push(event{t: e.now + e.rng.ExpFloat64()*f.RepairGPU, kind: evRepair, node: int32(ni), gpu: int8(g)})
	case "host":
		for len(n.jobs) > 0 {
			e.interrupt(&e.jobs[n.jobs[0]], cause)
		}
		e.c.setUp(ni, false)
		e.push(event{t: e.now + e.rng.ExpFloat64()*f.RepairHost, kind: evRepair, node: int32(ni), gpu: -1})
	default:
		if j := jobOnGPU(); j != nil {
			e.interrupt(j, cause)
		}
	}
}

// rk is a running job under the key it had when it was ranked; the entry
// is stale once the job stopped (epoch) or was ranked again (ver).
type rk struct {
	k     key
	j     *job
	epoch uint32
	ver   uint32
}

func (r rk) live() bool {
	return r.j.phase == phaseRunning && r.j.epoch == r.epoch && r.j.rankVer == r.ver
}

func cmpRK(a, b rk) int {
	if a.k.less(b.k) {
		return -1
	}
	if b.k.less(a.k) {
		return 1
	}
	return 0
}

// sortRunning brings runSorted up to date: running jobs in key order. For
// policies whose keys only change at rekey events the list is kept
// between passes (stale entries of stopped jobs are skipped); otherwise
// it is rebuilt.
func (e *engine) sortRunning() {
	live := 0
	for _, r := range e.runSorted {
		if r.live() {
			live++
		}
	}
	if !e.pol.stableKeys() || e.runDirty || live != len(e.run) || len(e.runSorted) > 2*len(e.run)+64 {
		e.runSorted = e.runSorted[:0]
		for _, j := range e.run {
			e.runSorted = append(e.runSorted, rk{e.pol.key(j, e.now), j, j.epoch, j.rankVer})
		}
		slices.SortFunc(e.runSorted, cmpRK)
		e.runDirty = false
	}
}

// addSorted inserts a job that just started into runSorted.
func (e *engine) addSorted(j *job) {
	if !e.pol.stableKeys() || e.runDirty {
		e.runDirty = true
		return
	}
	r := rk{e.pol.key(j, e.now), j, j.epoch, j.rankVer}
	i, _ := slices.BinarySearchFunc(e.runSorted, r, cmpRK)
	e.runSorted = slices.Insert(e.runSorted, i, r)
}

// lowest keeps the lowest-ranked victims (the end of the list) holding
// about twice the GPUs the starts need, at most maxVictims jobs: the
// scheduler's victim search is quadratic-ish in candidates, and the jobs
// that rank lowest are the ones that should yield first.
func lowest(victims, starts []*job) []*job {
	need := 0
	for _, j := range starts {
		need += j.gpus
	}
	held := 0
	k := len(victims)
	for k > 0 && len(victims)-k < maxVictims && held < 2*need+8 {
		k--
		held += victims[k].gpus
	}
	return victims[k:]
}

// maxVictims bounds the running jobs offered as victims in one call.
const maxVictims = 24

// reachable drops the starts that could not fit even if every victim
// stopped (a necessary condition, by GPU counts per node), so that the
// scheduler does not search victims for them in vain.
func (e *engine) reachable(starts, victims []*job) []*job {
	freeable := make(map[int32]int, len(victims))
	total, widest := e.c.free, e.c.maxFree()
	for _, v := range victims {
		for _, s := range v.slots {
			if s.milli == 0 {
				freeable[s.node] += bits.OnesCount64(s.mask)
				total += bits.OnesCount64(s.mask)
			}
		}
	}
	whole := 0
	for i, k := range freeable {
		n := &e.c.nodes[i]
		f := n.nfree() + k
		widest = max(widest, f)
		if f == n.total {
			whole++
		}
	}
	for i := range e.c.nodes {
		if n := &e.c.nodes[i]; n.up && n.nfree() == n.total && freeable[int32(i)] == 0 {
			whole++
		}
	}
	strat := e.cfg.Placement
	per := e.c.perNode
	out := starts[:0]
	for _, j := range starts {
		ok := j.gpus <= total
		switch {
		case !ok || j.milli < 1000:
		case j.gpus > per && j.gpus%per == 0 && strat != BestFit:
			// Asked for as whole nodes (schedule.go).
			ok = j.gpus/per <= whole
		case j.gpus > per && strat == Consolidate:
			ok = (j.gpus+per-1)/per <= whole
		case j.gpus <= per && (strat == Consolidate || strat == BestFit):
			ok = j.gpus <= widest
		}
		if ok {
			out = append(out, j)
		}
	}
	return out
}

// below lists the running jobs that rank after j and are not protected.
func (e *engine) below(j *job) []*job {
	e.sortRunning()
	var out []*job
	for _, r := range e.runSorted {
		if r.live() && j.lastKey.less(r.k) && !e.pol.protected(r.j, e.now) {
			out = append(out, r.j)
		}
	}
	return out
}
