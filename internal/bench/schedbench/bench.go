// Package schedbench measures the scheduler on a synthetic cluster with a
// backlog drawn from a real trace: placements per second, how long one
// decision takes, and peak heap. It backs `gangway bench scheduler` (Main)
// and the scheduler's `go test -bench` benchmarks (Run).
//
// The harness plays the controller: it keeps the cluster's free GPUs and
// running jobs, builds a scheduler.Snapshot before each pass (not timed),
// applies the plan, stops preempted jobs and requeues them, and advances a
// simulated clock to the next job ends. Only scheduler code is timed:
// NewPass (which builds the scheduler's counters from the snapshot), every
// Step, and Plan.
//
// It imports the standard library, internal/scheduler,
// internal/topology and internal/base/cmdkit.
package schedbench

import (
	"container/heap"
	"context"
	"fmt"
	"math/bits"
	"math/rand/v2"
	"runtime"
	"slices"
	"sort"
	"time"

	"github.com/gangway/gangway/internal/scheduler"
	"github.com/gangway/gangway/internal/topology"
)

// Config describes one benchmark run.
type Config struct {
	// The cluster: Nodes × GPUsPerNode, NodesPerLeaf nodes per leaf,
	// LeavesPerSpine leaves per spine, Rails rails.
	Nodes, GPUsPerNode, NodesPerLeaf, LeavesPerSpine, Rails int
	// Backlog is how many jobs wait at the start; GangShare of them are
	// gangs with sizes from GangSizes (tp 8), the rest have the trace's
	// sizes and durations.
	Backlog   int
	GangShare float64
	GangSizes []int
	// Trace is the size mix; TraceName says where it came from.
	Trace     []TraceJob
	TraceName string
	// Queues tenants share the cluster, each guaranteed an equal part of
	// half of it, in one cohort.
	Queues int
	// HighPriorityShare of the jobs have priority 1 and may preempt
	// others of their queue.
	HighPriorityShare float64
	Seed              uint64
	Mode              scheduler.Mode
	Strategy          scheduler.Strategy
	// BatchGPUs is how many GPUs must free up between passes; 0 means
	// 2% of the cluster.
	BatchGPUs int
	// MaxPasses stops the run early; 0 runs until every job has started.
	MaxPasses int
	// GangLevels, when true, makes gangs that fit a leaf require one leaf
	// and bigger gangs require one spine.
	GangLevels bool
}

// GangLevel returns the topology level a gang of size GPUs requires.
func (c Config) GangLevel(size int) topology.Level {
	if !c.GangLevels {
		return topology.LevelNone
	}
	if size <= c.NodesPerLeaf*c.GPUsPerNode {
		return topology.LevelLeaf
	}
	return topology.LevelSpine
}

// DefaultConfig is the benchmark: 4,096 nodes × 8 GPUs, leaves of
// 32 nodes, 16 leaves per spine, 8 rails; 50,000 jobs, 1% of them gangs of
// 64 to 1,024 GPUs; 8 queues.
func DefaultConfig() Config {
	return Config{
		Nodes: 4096, GPUsPerNode: 8, NodesPerLeaf: 32, LeavesPerSpine: 16, Rails: 8,
		Backlog: 50000, GangShare: 0.01, GangSizes: []int{64, 128, 256, 512, 1024},
		Queues: 8, HighPriorityShare: 0.05, Seed: 1,
	}
}

// ClusterInfo describes the cluster a run used.
type ClusterInfo struct {
	Nodes          int `json:"nodes"`
	GPUsPerNode    int `json:"gpus_per_node"`
	GPUs           int `json:"gpus"`
	NodesPerLeaf   int `json:"nodes_per_leaf"`
	LeavesPerSpine int `json:"leaves_per_spine"`
	Leaves         int `json:"leaves"`
	Spines         int `json:"spines"`
	Rails          int `json:"rails"`
}

// BacklogInfo describes the backlog a run used.
type BacklogInfo struct {
	Jobs      int         `json:"jobs"`
	Trace     string      `json:"trace"`
	TraceJobs int         `json:"trace_jobs"`
	Gangs     int         `json:"gangs"`
	GangSizes []int       `json:"gang_sizes"`
	Sizes     map[int]int `json:"sizes"`
	Queues    int         `json:"queues"`
	HighPrio  int         `json:"high_priority_jobs"`
}

// Result is what a run measured. Decision times are per Step: one
// request decided (placed, or pending with its reason, possibly after a
// preemption search or a backfill reservation).
type Result struct {
	PlacementsPerS float64 `json:"placements_per_s"`
	P50DecisionMs  float64 `json:"p50_decision_ms"`
	P99DecisionMs  float64 `json:"p99_decision_ms"`
	// Over decisions that placed a gang.
	P50PlacedMs float64 `json:"p50_placed_decision_ms"`
	P99PlacedMs float64 `json:"p99_placed_decision_ms"`
	// Over decisions about 1,024-GPU gangs (placed or not), and those
	// that placed one.
	P99Gang1024Ms       float64 `json:"p99_decision_ms_1024_gpu_gang"`
	P99Gang1024PlacedMs float64 `json:"p99_placed_decision_ms_1024_gpu_gang"`
	MaxDecisionMs       float64 `json:"max_decision_ms"`
	// CPU counts the same in CPU time of the scheduling thread (Linux):
	// time spent descheduled on a busy machine is left out.
	CPU           *CPUFigures `json:"cpu,omitempty"`
	PeakHeapBytes uint64      `json:"peak_heap_bytes"`
	// NewPass, which builds the counters from the snapshot, per pass.
	P50SnapshotMs float64 `json:"p50_new_pass_ms"`
	P99SnapshotMs float64 `json:"p99_new_pass_ms"`

	Passes      int     `json:"passes"`
	Decisions   int     `json:"decisions"`
	Placements  int     `json:"placements"`
	Gangs1024   int     `json:"placed_1024_gpu_gangs"`
	Preemptions int     `json:"preemptions"`
	Reserved    int     `json:"reservations"`
	SchedulerS  float64 `json:"scheduler_seconds"`
	Drained     bool    `json:"drained"`
	// TopologyBlocked counts pending decisions where enough GPUs were
	// free in total but not in the shape the gang needed
	// (PendingTopology): the cost of fragmentation.
	TopologyBlocked int `json:"topology_blocked_decisions"`
	// MeanUtilization is the busy share of GPUs after each pass.
	MeanUtilization float64 `json:"mean_utilization"`
	// HeadBlockedShare is the share of simulated time in which the first
	// gang left waiting in a pass had enough free GPUs in total but not
	// in its shape (BENCHMARKS.md's fragmentation figure).
	HeadBlockedShare float64 `json:"head_blocked_share"`
	// MeanWholeFreeNodes and MeanWholeFreeLeaves are the idle nodes and
	// leaves after each pass; MeanStrandedShare is the share of free GPUs
	// on partly used nodes.
	MeanWholeFreeNodes  float64 `json:"mean_whole_free_nodes"`
	MeanWholeFreeLeaves float64 `json:"mean_whole_free_leaves"`
	MeanStrandedShare   float64 `json:"mean_stranded_share"`
	// MeanLeaves and MeanSpines are what multi-node gangs span.
	MeanLeaves float64 `json:"mean_leaves_per_multinode_gang"`
	MeanSpines float64 `json:"mean_spines_per_multinode_gang"`

	Mode       string      `json:"mode"`
	Strategy   string      `json:"strategy"`
	Cluster    ClusterInfo `json:"cluster"`
	Backlog    BacklogInfo `json:"backlog"`
	GoMaxProcs int         `json:"gomaxprocs"`
}

// CPUFigures are decision costs in thread CPU time.
type CPUFigures struct {
	PlacementsPerS      float64 `json:"placements_per_s"`
	P50DecisionMs       float64 `json:"p50_decision_ms"`
	P99DecisionMs       float64 `json:"p99_decision_ms"`
	P99PlacedMs         float64 `json:"p99_placed_decision_ms"`
	P99Gang1024Ms       float64 `json:"p99_decision_ms_1024_gpu_gang"`
	P99Gang1024PlacedMs float64 `json:"p99_placed_decision_ms_1024_gpu_gang"`
	MaxDecisionMs       float64 `json:"max_decision_ms"`
	SchedulerS          float64 `json:"scheduler_seconds"`
}

type benchJob struct {
	req  scheduler.Request
	left int64 // ns of work left
	size int
}

type runningJob struct {
	job   *benchJob
	run   scheduler.Running
	nodes []int32
	masks []uint64
	end   int64
	stop  bool
	at    int // heap index
}

type endHeap []*runningJob

func (h endHeap) Len() int { return len(h) }
func (h endHeap) Less(i, j int) bool {
	if h[i].end != h[j].end {
		return h[i].end < h[j].end
	}
	return h[i].run.JobID < h[j].run.JobID
}
func (h endHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i]; h[i].at = i; h[j].at = j }
func (h *endHeap) Push(x any)   { r := x.(*runningJob); r.at = len(*h); *h = append(*h, r) }
func (h *endHeap) Pop() any {
	old := *h
	r := old[len(old)-1]
	*h = old[:len(old)-1]
	r.at = -1
	return r
}

// Run runs the benchmark in this goroutine. It returns early with ctx's
// error when ctx ends.
func Run(ctx context.Context, cfg Config) (Result, error) {
	if len(cfg.Trace) == 0 {
		return Result{}, fmt.Errorf("no trace jobs to draw sizes from")
	}
	if cfg.Nodes < 1 || cfg.GPUsPerNode < 1 || cfg.GPUsPerNode > 64 || cfg.Backlog < 1 || cfg.Queues < 1 {
		return Result{}, fmt.Errorf("invalid config: %d nodes × %d GPUs, backlog %d, %d queues", cfg.Nodes, cfg.GPUsPerNode, cfg.Backlog, cfg.Queues)
	}
	topo, err := topology.Uniform(topology.UniformSpec{
		Nodes: cfg.Nodes, GPUsPerNode: cfg.GPUsPerNode, NodesPerLeaf: cfg.NodesPerLeaf,
		LeavesPerSpine: cfg.LeavesPerSpine, Rails: cfg.Rails, NVLink: true,
	})
	if err != nil {
		return Result{}, fmt.Errorf("build cluster: %w", err)
	}
	gpusTotal := cfg.Nodes * cfg.GPUsPerNode
	res := Result{
		Mode: cfg.Mode.String(), Strategy: cfg.Strategy.String(), GoMaxProcs: runtime.GOMAXPROCS(0),
		Cluster: ClusterInfo{Nodes: cfg.Nodes, GPUsPerNode: cfg.GPUsPerNode, GPUs: gpusTotal,
			NodesPerLeaf: cfg.NodesPerLeaf, LeavesPerSpine: cfg.LeavesPerSpine,
			Leaves: topo.NumLeaves(), Spines: topo.NumSpines(), Rails: cfg.Rails},
	}

	// The backlog.
	rng := rand.New(rand.NewPCG(cfg.Seed, 0x5eed))
	queueNames := make([]string, cfg.Queues)
	queues := make([]scheduler.Queue, cfg.Queues)
	for i := range queues {
		queueNames[i] = fmt.Sprintf("team-%d", i+1)
		queues[i] = scheduler.Queue{Name: queueNames[i], Cohort: "org", GuaranteeGPUs: gpusTotal / 2 / cfg.Queues, Weight: 1}
	}
	bl := BacklogInfo{Jobs: cfg.Backlog, Trace: cfg.TraceName, TraceJobs: len(cfg.Trace), GangSizes: cfg.GangSizes, Sizes: map[int]int{}, Queues: cfg.Queues}
	pending := make([]*benchJob, 0, cfg.Backlog)
	for i := range cfg.Backlog {
		j := &benchJob{}
		r := scheduler.Request{JobID: fmt.Sprintf("job-%06d", i), Queue: queueNames[rng.IntN(cfg.Queues)], Order: int64(i), GPUsPerRank: 1}
		if len(cfg.GangSizes) > 0 && rng.Float64() < cfg.GangShare {
			j.size = cfg.GangSizes[rng.IntN(len(cfg.GangSizes))]
			r.Ranks, r.TP = j.size, 8
			r.Required = cfg.GangLevel(j.size)
			j.left = int64(time.Hour) + rng.Int64N(int64(11*time.Hour))
			bl.Gangs++
		} else {
			tj := cfg.Trace[rng.IntN(len(cfg.Trace))]
			j.size = tj.GPUs
			r.Ranks = tj.GPUs
			j.left = max(int64(tj.Duration), int64(time.Second))
		}
		if rng.Float64() < cfg.HighPriorityShare {
			r.Priority = 1
			bl.HighPrio++
		}
		r.EstimatedDuration = time.Duration(j.left)
		j.req = r
		bl.Sizes[j.size]++
		pending = append(pending, j)
	}
	res.Backlog = bl

	// The harness's cluster state.
	free := make([]uint64, cfg.Nodes)
	full := uint64(1)<<uint(cfg.GPUsPerNode) - 1
	if cfg.GPUsPerNode == 64 {
		full = ^uint64(0)
	}
	for n := range free {
		free[n] = full
	}
	nodes := make([]scheduler.Node, cfg.Nodes)
	for n := range nodes {
		nodes[n] = scheduler.Node{Name: topo.NodeName(topology.NodeID(n)), Total: cfg.GPUsPerNode, Free: make([]int, 0, cfg.GPUsPerNode)}
	}
	running := map[string]*runningJob{}
	ends := &endHeap{}
	busy := 0
	batch := cfg.BatchGPUs
	if batch <= 0 {
		batch = max(1, gpusTotal/50)
	}
	var all, placed, gang, gangPlaced, build hist
	var runs []scheduler.Running
	var reqs []scheduler.Request
	byID := map[string]*benchJob{}
	now := int64(0)
	var utilSum float64
	var ms runtime.MemStats
	sampleHeap := func() {
		runtime.ReadMemStats(&ms)
		res.PeakHeapBytes = max(res.PeakHeapBytes, ms.HeapAlloc)
	}
	release := func(rj *runningJob) {
		for i, n := range rj.nodes {
			free[n] |= rj.masks[i]
			busy -= bits.OnesCount64(rj.masks[i])
		}
		delete(running, rj.run.JobID)
	}
	var schedNs, schedCPU int64
	var cpuAll, cpuPlaced, cpuGang, cpuGangPlaced hist
	_, haveCPU := threadCPU()
	if haveCPU {
		// The thread CPU clock must follow this goroutine.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
	}
	var multi int
	var headBlocked, elapsed float64 // simulated ns
	var leavesSum, spinesSum, wholeNodesSum, wholeLeavesSum, strandedSum float64
	for pass := 0; cfg.MaxPasses == 0 || pass < cfg.MaxPasses; pass++ {
		if err := ctx.Err(); err != nil {
			return res, err
		}
		if len(pending) == 0 {
			res.Drained = true
			break
		}
		// The snapshot (not timed).
		for n := range nodes {
			f := nodes[n].Free[:0]
			for m := free[n]; m != 0; m &= m - 1 {
				f = append(f, bits.TrailingZeros64(m))
			}
			nodes[n].Free = f
		}
		runs = runs[:0]
		for _, rj := range *ends {
			runs = append(runs, rj.run)
		}
		reqs = reqs[:0]
		clear(byID)
		for _, j := range pending {
			reqs = append(reqs, j.req)
			byID[j.req.JobID] = j
		}
		snap := scheduler.Snapshot{Now: now, Nodes: nodes, Topology: topo, Running: runs, Queues: queues}

		opts := scheduler.Options{Mode: cfg.Mode, Strategy: cfg.Strategy}
		var headKind scheduler.PendingKind // of the first gang left waiting
		c0, _ := threadCPU()
		t0 := time.Now()
		p := scheduler.NewPass(snap, reqs, opts)
		t1 := time.Now()
		c1, _ := threadCPU()
		build.add(t1.Sub(t0))
		passNs := int64(t1.Sub(t0))
		passCPU := int64(c1 - c0)
		for {
			cs, _ := threadCPU()
			s := time.Now()
			d, more := p.Step()
			el := time.Since(s)
			ce, _ := threadCPU()
			if !more {
				break
			}
			cel := ce - cs
			passNs += int64(el)
			passCPU += int64(cel)
			res.Decisions++
			all.add(el)
			cpuAll.add(cel)
			if d.Placed {
				placed.add(el)
				cpuPlaced.add(cel)
			}
			if d.GPUs == 1024 {
				gang.add(el)
				cpuGang.add(cel)
				if d.Placed {
					gangPlaced.add(el)
					cpuGangPlaced.add(cel)
				}
			}
			if d.Kind == scheduler.PendingTopology {
				res.TopologyBlocked++
			}
			if !d.Placed && headKind == 0 {
				headKind = d.Kind
			}
		}
		cs, _ := threadCPU()
		s := time.Now()
		plan := p.Plan()
		passNs += int64(time.Since(s))
		ce, _ := threadCPU()
		passCPU += int64(ce - cs)
		schedNs += passNs
		schedCPU += passCPU
		sampleHeap()
		res.Passes++

		// Apply the plan (not timed).
		for _, v := range plan.Preemptions {
			if rj := running[v.JobID]; rj != nil {
				rj.stop = true
				rj.run.Stopping = true
			}
		}
		started := map[string]bool{}
		for _, pl := range plan.Placements {
			j := byID[pl.JobID]
			rj := &runningJob{job: j, end: now + j.left}
			perNode := map[int32]uint64{}
			for _, sl := range pl.Ranks {
				id, _ := topo.NodeByName(sl.Node)
				for _, g := range sl.GPUs {
					perNode[int32(id)] |= 1 << uint(g)
				}
			}
			for n, m := range perNode {
				if free[n]&m != m {
					return res, fmt.Errorf("pass %d: %s given busy GPUs on %s", pass, pl.JobID, topo.NodeName(topology.NodeID(n)))
				}
				free[n] &^= m
				busy += bits.OnesCount64(m)
				rj.nodes = append(rj.nodes, n)
				rj.masks = append(rj.masks, m)
			}
			rj.run = scheduler.Running{JobID: pl.JobID, Queue: j.req.Queue, Priority: j.req.Priority, Ranks: pl.Ranks,
				StartedAt: now, EstimatedEnd: rj.end, LastCheckpoint: now, Preemptible: true}
			running[pl.JobID] = rj
			heap.Push(ends, rj)
			started[pl.JobID] = true
			res.Placements++
			if pl.Nodes > 1 {
				multi++
				leavesSum += float64(pl.Leaves)
				spinesSum += float64(pl.Spines)
			}
			if j.size == 1024 {
				res.Gangs1024++
			}
		}
		res.Preemptions += len(plan.Preemptions)
		res.Reserved += len(plan.Reservations)
		pending = slices.DeleteFunc(pending, func(j *benchJob) bool { return started[j.req.JobID] })
		utilSum += float64(busy) / float64(gpusTotal)
		wholeNodes, stranded, freeGPUs := 0, 0, 0
		for l := range topo.NumLeaves() {
			idle := true
			for _, n := range topo.LeafNodes(topology.LeafID(l)) {
				k := bits.OnesCount64(free[n])
				freeGPUs += k
				switch {
				case free[n] == full:
					wholeNodes++
				case k > 0:
					stranded += k
					idle = false
				default:
					idle = false
				}
			}
			if idle {
				wholeLeavesSum++
			}
		}
		wholeNodesSum += float64(wholeNodes)
		if freeGPUs > 0 {
			strandedSum += float64(stranded) / float64(freeGPUs)
		}

		// Preempted jobs stop now and wait again with the work they have
		// left (they checkpointed on the signal).
		var requeue []*benchJob
		for _, rj := range slices.Clone(*ends) {
			if rj.stop {
				heap.Remove(ends, rj.at)
				release(rj)
				rj.job.left = max(int64(time.Second), rj.end-now)
				rj.job.req.EstimatedDuration = time.Duration(rj.job.left)
				requeue = append(requeue, rj.job)
			}
		}
		if len(requeue) > 0 {
			pending = append(pending, requeue...)
			sort.SliceStable(pending, func(a, b int) bool { return pending[a].req.Order < pending[b].req.Order })
		}
		// Advance the clock until batch GPUs are free again.
		if ends.Len() == 0 && len(plan.Placements) == 0 && len(requeue) == 0 {
			break // nothing runs and nothing more will start
		}
		freed, was := 0, now
		for ends.Len() > 0 && freed < batch {
			rj := heap.Pop(ends).(*runningJob)
			now = max(now, rj.end)
			for _, m := range rj.masks {
				freed += bits.OnesCount64(m)
			}
			release(rj)
		}
		elapsed += float64(now - was)
		if headKind == scheduler.PendingTopology {
			headBlocked += float64(now - was)
		}
	}
	res.SchedulerS = float64(schedNs) / 1e9
	if schedNs > 0 {
		res.PlacementsPerS = float64(res.Placements) / res.SchedulerS
	}
	res.P50DecisionMs, res.P99DecisionMs = all.quantile(0.5), all.quantile(0.99)
	res.P50PlacedMs, res.P99PlacedMs = placed.quantile(0.5), placed.quantile(0.99)
	res.P99Gang1024Ms, res.P99Gang1024PlacedMs = gang.quantile(0.99), gangPlaced.quantile(0.99)
	res.MaxDecisionMs = all.maxMs()
	res.P50SnapshotMs, res.P99SnapshotMs = build.quantile(0.5), build.quantile(0.99)
	if haveCPU && schedCPU > 0 {
		res.CPU = &CPUFigures{
			PlacementsPerS: float64(res.Placements) / (float64(schedCPU) / 1e9),
			P50DecisionMs:  cpuAll.quantile(0.5), P99DecisionMs: cpuAll.quantile(0.99),
			P99PlacedMs:   cpuPlaced.quantile(0.99),
			P99Gang1024Ms: cpuGang.quantile(0.99), P99Gang1024PlacedMs: cpuGangPlaced.quantile(0.99),
			MaxDecisionMs: cpuAll.maxMs(), SchedulerS: float64(schedCPU) / 1e9,
		}
	}
	if res.Passes > 0 {
		n := float64(res.Passes)
		res.MeanUtilization = utilSum / n
		if elapsed > 0 {
			res.HeadBlockedShare = headBlocked / elapsed
		}
		res.MeanWholeFreeNodes = wholeNodesSum / n
		res.MeanWholeFreeLeaves = wholeLeavesSum / n
		res.MeanStrandedShare = strandedSum / n
	}
	if multi > 0 {
		res.MeanLeaves, res.MeanSpines = leavesSum/float64(multi), spinesSum/float64(multi)
	}
	return res, nil
}

// hist is a latency histogram: 100 ns buckets to 100 µs, 10 µs buckets
// to 10 ms, 1 ms buckets to 1 s. Quantiles are bucket upper bounds.
type hist struct {
	b     [3000]int64
	n     int64
	maxNs int64
}

func bucket(ns int64) int {
	switch {
	case ns < 100_000:
		return int(ns / 100)
	case ns < 10_000_000:
		return 1000 + int((ns-100_000)/10_000)
	case ns < 1_000_000_000:
		return 1990 + int((ns-10_000_000)/1_000_000)
	}
	return 2999
}

func upper(i int) int64 {
	switch {
	case i < 1000:
		return int64(i+1) * 100
	case i < 1990:
		return 100_000 + int64(i-1000+1)*10_000
	}
	return 10_000_000 + int64(i-1990+1)*1_000_000
}

func (h *hist) add(d time.Duration) {
	ns := int64(d)
	h.b[bucket(ns)]++
	h.n++
	h.maxNs = max(h.maxNs, ns)
}

// quantile returns the q-quantile in milliseconds (0 when empty).
func (h *hist) quantile(q float64) float64 {
	if h.n == 0 {
		return 0
	}
	rank := int64(q*float64(h.n-1)) + 1
	var seen int64
	for i, c := range h.b {
		seen += c
		if seen >= rank {
			return float64(min(upper(i), h.maxNs)) / 1e6
		}
	}
	return float64(h.maxNs) / 1e6
}

func (h *hist) maxMs() float64 { return float64(h.maxNs) / 1e6 }
