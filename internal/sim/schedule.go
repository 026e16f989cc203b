package sim

// This file is the simulator's only door to internal/scheduler: every
// placement (and the gangway policy's choice of preemption victims) goes
// through a scheduler pass, stepped as scheduler.ScheduleWith (the entry
// point the server's controller calls) steps it until nothing left can
// be placed. Policies reach it only as request order and priority; the
// scheduler decides where.

import (
	"fmt"
	"math"
	"math/bits"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/gangway/gangway/internal/scheduler"
	"github.com/gangway/gangway/internal/sim/trace"
	"github.com/gangway/gangway/internal/topology"
)

// Placement names how gangs are laid onto nodes.
type Placement uint8

const (
	// GangwayPlacement is what gangway itself does: the scheduler's
	// Topology strategy (tightest NVLink domain, leaf or spine, best fit).
	GangwayPlacement Placement = iota
	// Consolidate puts a gang of up to one node's GPUs on one node (best
	// fit) and bigger gangs on whole idle nodes: the Helios reference's
	// "consolidate".
	Consolidate
	// BestFit ignores leaves: one node with the fewest free GPUs that fit,
	// else the fewest nodes.
	BestFit
	// Random offers the scheduler, for each gang, only randomly chosen
	// nodes that can hold it (seeded).
	Random
	// BestFitNodes is BestFit on the same gangs as gangway's placement:
	// a gang that fills whole nodes asks for whole nodes, where BestFit
	// may spread it over partly used ones. It isolates the choice of
	// nodes from the shape of the gang.
	BestFitNodes
)

// PlacementNames lists the placements ParsePlacement knows.
func PlacementNames() []string {
	return []string{"gangway", "consolidate", "bestfit", "random", "bestfit-nodes"}
}

// ParsePlacement parses a placement name.
func ParsePlacement(s string) (Placement, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "gangway", "default", "topology", "":
		return GangwayPlacement, nil
	case "consolidate", "fewest-nodes":
		return Consolidate, nil
	case "bestfit", "best-fit":
		return BestFit, nil
	case "random":
		return Random, nil
	case "bestfit-nodes":
		return BestFitNodes, nil
	}
	return 0, fmt.Errorf("unknown placement %q (known: %s)", s, strings.Join(PlacementNames(), ", "))
}

func (p Placement) String() string {
	if int(p) < len(PlacementNames()) {
		return PlacementNames()[p]
	}
	return fmt.Sprintf("placement(%d)", p)
}

func (p Placement) strategy() scheduler.Strategy {
	switch p {
	case Consolidate:
		return scheduler.Consolidate
	case BestFit, Random, BestFitNodes:
		return scheduler.BestFit
	}
	return scheduler.Topology
}

// placed is one gang the scheduler placed.
type placed struct {
	j     *job
	slots []slot
}

// outcome is what one scheduling call decided.
type outcome struct {
	placed []placed
	// victims are running jobs the scheduler wants stopped so that a
	// pending gang can start.
	victims []*job
	// blocked: some candidate did not start.
	blocked bool
}

// call describes one scheduling call.
type call struct {
	now  float64
	mode QueueMode
	// preempt lets the scheduler choose victims among running, by
	// priority.
	preempt bool
	// running are the jobs holding GPUs; they are sent only when the
	// scheduler needs them (backfill, preemption).
	running []*job
	// estimates fills estimated durations and ends from the trace (an
	// oracle; backfill needs them).
	estimates bool
	// reservations is Options.MaxReservations (0: one).
	reservations int
	prio         func(*job, float64) int
	protected    func(*job, float64) bool
	// context, when set, is every running job, sent to the scheduler as
	// the controller sends them; only those in running may be preempted.
	context []*job
}

// placer builds scheduler snapshots from the simulated cluster and turns
// plans back into GPU masks. It reuses its buffers across calls.
type placer struct {
	strategy Placement
	topo     *topology.Topology
	rng      *rand.Rand
	ids      []string // job index → scheduler JobID
	snap     []scheduler.Node
	shared   []scheduler.SharedGPU // backing of snap's Shared lists
	reqs     []scheduler.Request
	running  []scheduler.Running // backing of the snapshot's Running
	// byIdx maps a job's index to the job, for the jobs of the current
	// call: those whose inCall is calls (candidates and running jobs
	// that may be stopped); offered marks, likewise, the running jobs
	// offered as victims.
	byIdx           []*job
	inCall, offered []int
	calls           int
	perNode         int // GPUs of the widest node
	// workload, when set, is the request mix the scheduler's
	// fragmentation-aware placement weighs (scheduler.Options.Workload);
	// nil lets the scheduler learn it from each pass.
	workload []scheduler.Demand
}

func newPlacer(c *cluster, strategy Placement, seed uint64, njobs int) (*placer, error) {
	b := topology.NewBuilder()
	for i := range c.nodes {
		n := &c.nodes[i]
		if err := b.AddNode(topology.NodeSpec{Name: n.name, GPUs: n.total, NVLink: true}); err != nil {
			return nil, fmt.Errorf("topology: %w", err)
		}
		if err := b.AddLabels(n.name, n.labels); err != nil {
			return nil, fmt.Errorf("topology: %w", err)
		}
	}
	topo, err := b.Build()
	if err != nil {
		return nil, fmt.Errorf("topology: %w", err)
	}
	return &placer{
		strategy: strategy, topo: topo, perNode: c.perNode,
		rng:   rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15)),
		ids:   make([]string, njobs),
		byIdx: make([]*job, njobs), inCall: make([]int, njobs), offered: make([]int, njobs),
	}, nil
}

// snapshot fills p.snap with every up node; keep, when set, filters
// nodes.
func (p *placer) snapshot(c *cluster, keep func(*node) bool) {
	p.snap = p.snap[:0]
	p.shared = p.shared[:0]
	for i := range c.nodes {
		n := &c.nodes[i]
		if !n.up || (keep != nil && !keep(n)) {
			continue
		}
		free := c.freeIndices(i)
		var shared []scheduler.SharedGPU
		if len(n.share) > 0 {
			at := len(p.shared)
			for g := range n.total {
				if used := n.share[g]; used > 0 && used < 1000 {
					p.shared = append(p.shared, scheduler.SharedGPU{Index: g, UsedMilli: int(used)})
				}
			}
			shared = p.shared[at:len(p.shared):len(p.shared)]
		}
		// Full nodes are listed too, as the controller lists every
		// schedulable node: preemption may free them.
		sn := scheduler.Node{Name: n.name, Free: free, Shared: shared, Total: n.total, Labels: n.labels}
		if n.cpuCap > 0 {
			sn.CPUMillis, sn.CPUMillisUsed = n.cpuCap, n.cpuCap-n.cpuFree
		}
		if n.memCap > 0 {
			sn.MemoryBytes, sn.MemoryBytesUsed = n.memCap<<20, (n.memCap-n.memFree)<<20
		}
		p.snap = append(p.snap, sn)
	}
}

func (p *placer) jobID(j *job) string {
	if p.ids[j.idx] == "" {
		p.ids[j.idx] = strconv.Itoa(int(j.idx))
	}
	return p.ids[j.idx]
}

func nanos(s float64) int64 {
	if s >= math.MaxInt64/1e9 {
		return math.MaxInt64
	}
	return int64(math.Round(s * 1e9))
}

// request fills r, a zero Request, for j.
func (p *placer) request(r *scheduler.Request, j *job, order int64, o *call) {
	r.JobID, r.Order, r.Ranks, r.GPUsPerRank = p.jobID(j), order, j.gpus, 1
	switch {
	case j.gpus == 0:
		// A CPU-only pod (openb).
		r.Ranks, r.GPUsPerRank, r.HostOnly = 1, 0, true
	case j.pod:
		// One process with all its GPUs on one node (openb).
		r.Ranks, r.GPUsPerRank = 1, j.gpus
	case p.perNode > 0 && j.gpus > p.perNode && j.gpus%p.perNode == 0 && p.strategy != BestFit:
		// A gang of whole nodes asks for one rank of a node's GPUs per
		// node, as a multi-node training job runs: same placement (whole
		// nodes), a node's worth of fewer ranks to lay out.
		r.Ranks, r.GPUsPerRank = j.gpus/p.perNode, p.perNode
	}
	if j.milli > 0 && j.milli < 1000 {
		r.GPUsPerRank, r.GPUMilli = 0, j.milli
	}
	// Host needs per rank, rounded up.
	ranks := int64(r.Ranks)
	r.CPUMillisPerRank = (j.t.CPUMilli + ranks - 1) / ranks
	r.MemoryBytesPerRank = ((j.t.MemoryMiB + ranks - 1) / ranks) << 20
	if o.prio != nil {
		r.Priority = o.prio(j, o.now)
	}
	switch ms := j.t.GPUModels; {
	case j.gpus == 0:
	case len(ms) == 1:
		r.NodeSelector = map[string]string{LabelGPUModel: ms[0]}
	case len(ms) > 1:
		r.NodeSelectorIn = map[string][]string{LabelGPUModel: ms}
	}
	if o.estimates {
		r.EstimatedDuration = time.Duration(nanos(max(j.remainingAt(o.now), 1e-6)))
	}
}

func (p *placer) runningList(c *cluster, o *call) []scheduler.Running {
	src := o.running
	if o.context != nil {
		src = o.context
		for _, j := range o.running {
			p.offered[j.idx] = p.calls
		}
	}
	if len(src) == 0 || (!o.preempt && o.mode != Backfill && o.context == nil) {
		return nil
	}
	out := p.running[:0]
	for _, j := range src {
		if j.ranks == nil {
			// The segment's slots do not change while it runs.
			for _, s := range j.slots {
				sl := scheduler.Slot{Node: c.nodes[s.node].name}
				for m := s.mask; m != 0; m &= m - 1 {
					sl.GPUs = append(sl.GPUs, bits.TrailingZeros64(m))
				}
				if s.milli > 0 {
					sl.Milli = int(s.milli)
				}
				cpu, mem := hostShare(j, s)
				sl.CPUMillis, sl.MemoryBytes = cpu, mem<<20
				j.ranks = append(j.ranks, sl)
			}
		}
		r := scheduler.Running{JobID: p.jobID(j), StartedAt: nanos(j.segStart), Ranks: j.ranks}
		if o.estimates {
			r.EstimatedEnd = nanos(j.segEnd)
		}
		if o.preempt {
			if o.prio != nil {
				r.Priority = o.prio(j, o.now)
			}
			r.Preemptible = o.protected == nil || !o.protected(j, o.now)
			if o.context != nil && p.offered[j.idx] != p.calls {
				r.Preemptible = false
			}
			// A preempted job is told to checkpoint first and loses no
			// work (its checkpoint-and-restore cost is charged instead).
			r.LastCheckpoint = nanos(o.now)
		}
		out = append(out, r)
	}
	p.running = out
	return out
}

// serverReservations is how many blocked gangs the server's controller
// reserves for (the live policy's MaxReservations).
const serverReservations = scheduler.ServerReservations

// maxSearches bounds victim searches per call: the gangs that cannot get
// victims now will try again at the next event.
const maxSearches = 2

func (p *placer) options(o *call) scheduler.Options {
	opts := scheduler.Options{Strategy: p.strategy.strategy(), NoPreemption: !o.preempt, MaxPreemptionSearches: maxSearches, Workload: p.workload,
		MaxReservations: o.reservations}
	switch o.mode {
	case Strict:
		opts.Mode = scheduler.Strict
	case Backfill:
		opts.Mode = scheduler.Backfill
	default:
		opts.Mode = scheduler.Greedy
	}
	return opts
}

// place asks the scheduler to decide cands, in this order, and takes the
// GPUs of the gangs it placed; the caller starts them and stops victims.
func (p *placer) place(c *cluster, cands []*job, o call) (outcome, error) {
	if len(cands) == 0 {
		return outcome{}, nil
	}
	if p.strategy == Random {
		return p.placeRandom(c, cands, &o)
	}
	p.snapshot(c, nil)
	out, err := p.schedule(c, cands, &o)
	if err != nil {
		return outcome{}, err
	}
	for _, pl := range out.placed {
		if err := c.apply(pl); err != nil {
			return outcome{}, err
		}
	}
	return out, nil
}

func (p *placer) schedule(c *cluster, cands []*job, o *call) (outcome, error) {
	p.calls++
	p.reqs = p.reqs[:0]
	for k, j := range cands {
		p.reqs = append(p.reqs, scheduler.Request{})
		p.request(&p.reqs[k], j, int64(k), o)
		p.byIdx[j.idx], p.inCall[j.idx] = j, p.calls
	}
	for _, j := range o.running {
		p.byIdx[j.idx], p.inCall[j.idx] = j, p.calls
	}
	snap := scheduler.Snapshot{Now: nanos(o.now), Nodes: p.snap, Topology: p.topo, Running: p.runningList(c, o)}
	// ScheduleWith's loop, stopped once nothing left can start: behind a
	// long backlog the rest would only get pending reasons, which the
	// simulator does not read. The placements are ScheduleWith's.
	pass := scheduler.NewPass(snap, p.reqs, p.options(o))
	decided := 0
	for decided < len(p.reqs) && !pass.Exhausted() {
		pass.Step()
		decided++
	}
	return p.collect(c, pass.Plan(), decided < len(p.reqs))
}

// collect turns a plan into an outcome; undecided says that the pass
// stopped before deciding every request.
func (p *placer) collect(c *cluster, plan scheduler.Plan, undecided bool) (outcome, error) {
	var out outcome
	out.blocked = len(plan.Pending) > 0 || undecided
	for _, pl := range plan.Placements {
		j := p.lookup(pl.JobID)
		if j == nil {
			return outcome{}, fmt.Errorf("scheduler placed unknown job %q", pl.JobID)
		}
		slots, err := toSlots(c, pl)
		if err != nil {
			return outcome{}, fmt.Errorf("placement of job %s: %w", j.t.ID, err)
		}
		out.placed = append(out.placed, placed{j: j, slots: slots})
	}
	seen := map[*job]bool{}
	for _, pe := range plan.Preemptions {
		j := p.lookup(pe.JobID)
		if j == nil || j.phase != phaseRunning {
			return outcome{}, fmt.Errorf("scheduler preempts unknown or idle job %q", pe.JobID)
		}
		if !seen[j] {
			seen[j] = true
			out.victims = append(out.victims, j)
		}
	}
	return out, nil
}

// lookup returns the job of the current call whose scheduler JobID is
// id, or nil.
func (p *placer) lookup(id string) *job {
	i, err := strconv.Atoi(id)
	if err != nil || i < 0 || i >= len(p.inCall) || p.inCall[i] != p.calls {
		return nil
	}
	return p.byIdx[i]
}

func toSlots(c *cluster, pl scheduler.Placement) ([]slot, error) {
	var slots []slot
	at := map[int32]int{} // node → index of its whole-GPU slot
	for _, r := range pl.Ranks {
		i, ok := c.byName[r.Node]
		if !ok {
			return nil, fmt.Errorf("unknown node %q", r.Node)
		}
		var m uint64
		for _, g := range r.GPUs {
			if g < 0 || g >= c.nodes[i].total {
				return nil, fmt.Errorf("node %s has no GPU %d", r.Node, g)
			}
			m |= 1 << uint(g)
		}
		if r.Milli > 0 {
			if len(r.GPUs) != 1 {
				return nil, fmt.Errorf("fractional rank on %s with %d GPUs", r.Node, len(r.GPUs))
			}
			slots = append(slots, slot{node: int32(i), mask: m, milli: int16(r.Milli)})
			continue
		}
		if k, ok := at[int32(i)]; ok {
			if slots[k].mask&m != 0 {
				return nil, fmt.Errorf("GPU given twice on node %s", r.Node)
			}
			slots[k].mask |= m
			continue
		}
		at[int32(i)] = len(slots)
		slots = append(slots, slot{node: int32(i), mask: m})
	}
	return slots, nil
}

// setWorkload gives the scheduler the shapes of jobs, counted, as the
// workload its fragmentation-aware placement weighs: FGD's "target
// workload", taken from the pod list it replays, with FGD's key (GPUs,
// share, CPU, GPU models; not memory, which placement still checks).
func (p *placer) setWorkload(jobs []trace.Job) {
	type key struct {
		gpus, milli int
		cpu         int64
		models      string
	}
	count := map[key]float64{}
	var order []key
	for i := range jobs {
		j := &jobs[i]
		k := key{gpus: j.GPUs, cpu: j.CPUMilli, models: strings.Join(j.GPUModels, "|")}
		if j.GPUs == 1 && j.GPUMilli > 0 && j.GPUMilli < 1000 {
			k.gpus, k.milli = 0, j.GPUMilli
		}
		if count[k] == 0 {
			order = append(order, k)
		}
		count[k]++
	}
	p.workload = p.workload[:0]
	for _, k := range order {
		d := scheduler.Demand{GPUs: k.gpus, GPUMilli: k.milli, CPUMillis: k.cpu, Weight: count[k]}
		switch ms := strings.Split(k.models, "|"); {
		case k.models == "" || (k.gpus == 0 && k.milli == 0):
		case len(ms) == 1:
			d.NodeSelector = map[string]string{LabelGPUModel: ms[0]}
		default:
			d.NodeSelectorIn = map[string][]string{LabelGPUModel: ms}
		}
		p.workload = append(p.workload, d)
	}
}

// placeRandom offers the scheduler, for each gang, only randomly chosen
// nodes that can hold it, one gang per call, so the choice of nodes is
// random while the GPU assignment stays the scheduler's.
func (p *placer) placeRandom(c *cluster, cands []*job, o *call) (outcome, error) {
	var all outcome
	var elig []int
	for _, j := range cands {
		elig = elig[:0]
		for i := range c.nodes {
			n := &c.nodes[i]
			if n.up && c.fits(n, j) && (n.free != 0 || n.hasShareRoom(j.milli)) {
				elig = append(elig, i)
			}
		}
		p.rng.Shuffle(len(elig), func(a, b int) { elig[a], elig[b] = elig[b], elig[a] })
		pick := map[int]bool{}
		need := j.gpus
		for _, i := range elig {
			if need <= 0 {
				break
			}
			pick[i] = true
			if j.milli > 0 && j.milli < 1000 {
				need--
			} else {
				need -= bits.OnesCount64(c.nodes[i].free)
			}
		}
		var out outcome
		if need <= 0 {
			p.snapshot(c, func(n *node) bool { return pick[c.byName[n.name]] })
			var err error
			if out, err = p.schedule(c, []*job{j}, o); err != nil {
				return outcome{}, err
			}
			// Victims, if any, can only be on the nodes offered.
			all.victims = append(all.victims, out.victims...)
		}
		if len(out.placed) == 0 {
			all.blocked = true
			if o.mode == Strict {
				break
			}
			continue
		}
		if err := c.apply(out.placed[0]); err != nil {
			return outcome{}, err
		}
		all.placed = append(all.placed, out.placed[0])
	}
	return all, nil
}
