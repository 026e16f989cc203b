package scheduler

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/gangway/gangway/internal/topology"
	"github.com/google/go-cmp/cmp"
)

// randomCase builds a random cluster, running jobs, queues and backlog.
func randomCase(t testing.TB, rng *rand.Rand) (Snapshot, []Request, Options) {
	t.Helper()
	gpn := []int{4, 8}[rng.IntN(2)]
	spec := topology.UniformSpec{
		Nodes:          4 + rng.IntN(21),
		GPUsPerNode:    gpn,
		NodesPerLeaf:   []int{0, 2, 4}[rng.IntN(3)],
		LeavesPerSpine: []int{0, 2}[rng.IntN(2)],
		NVLink:         true,
	}
	if rng.IntN(2) == 0 {
		spec.Rails = gpn
	}
	if gpn == 4 && rng.IntN(2) == 0 {
		spec.NodesPerDomain = 2
	}
	topo, err := topology.Uniform(spec)
	if err != nil {
		t.Fatal(err)
	}
	queues := []string{"a", "b", "c"}
	var running []Running
	var shared = map[string][]SharedGPU{}
	for n := range topo.NumNodes() {
		node := topo.NodeName(topology.NodeID(n))
		for g := 0; g < gpn; {
			size := 1 + rng.IntN(gpn)
			switch roll := rng.IntN(10); {
			case roll < 4: // free
				g += size
				continue
			case roll == 4: // shared by time slices
				shared[node] = append(shared[node], SharedGPU{Index: g, UsedMilli: 100 * (1 + rng.IntN(9))})
				g++
				continue
			case roll == 5: // MIG
				shared[node] = append(shared[node], SharedGPU{Index: g, MIGUsed: uint8(1 << uint(rng.IntN(7)))})
				g++
				continue
			}
			size = min(size, gpn-g)
			r := Running{
				JobID: fmt.Sprintf("r-%s-%d", node, g), Queue: queues[rng.IntN(3)], Priority: rng.IntN(4),
				Ranks:       []Slot{{Node: node, GPUs: gpus(g, g+size)}},
				StartedAt:   int64(rng.IntN(1000)) * int64(time.Second),
				Preemptible: rng.IntN(2) == 0, Stopping: rng.IntN(10) == 0,
			}
			if rng.IntN(3) > 0 {
				r.EstimatedEnd = 1000*int64(time.Second) + int64(rng.IntN(5000))*int64(time.Second)
			}
			if rng.IntN(2) == 0 {
				r.LastCheckpoint = r.StartedAt + int64(rng.IntN(500))*int64(time.Second)
			}
			running = append(running, r)
			g += size
		}
	}
	snap := withRunningOn(topo, running)
	snap.Now = 1000 * int64(time.Second)
	for i := range snap.Nodes {
		n := &snap.Nodes[i]
		for _, s := range shared[n.Name] {
			n.Shared = append(n.Shared, s)
			n.Free = removeInt(n.Free, s.Index)
		}
		n.Labels = map[string]string{"zone": []string{"x", "y"}[rng.IntN(2)]}
	}
	for _, q := range queues {
		if rng.IntN(3) == 0 {
			continue
		}
		cfg := Queue{Name: q, GuaranteeGPUs: rng.IntN(33), Weight: float64(1 + rng.IntN(3))}
		if rng.IntN(2) == 0 {
			cfg.Cohort = "x"
		}
		if rng.IntN(3) == 0 {
			cfg.BorrowLimitGPUs = ptr(rng.IntN(9))
		}
		snap.Queues = append(snap.Queues, cfg)
	}
	var reqs []Request
	for i := range 30 {
		r := Request{
			JobID: fmt.Sprintf("j%02d", i), Queue: queues[rng.IntN(3)], Priority: rng.IntN(4),
			Order: int64(rng.IntN(10)), Ranks: 1 + rng.IntN(16), GPUsPerRank: []int{0, 1, 2, 8}[rng.IntN(4)],
		}
		switch rng.IntN(8) {
		case 0:
			r.Ranks, r.GPUsPerRank, r.GPUMilli = 1+rng.IntN(3), 0, 100*(1+rng.IntN(9))
		case 1:
			r.Ranks, r.GPUsPerRank, r.MIGProfile = 1+rng.IntN(3), 0, []string{"1g.10gb", "2g.20gb", "3g.40gb", "7g.80gb"}[rng.IntN(4)]
		case 2:
			r.TP = []int{2, 4}[rng.IntN(2)]
			r.Ranks = r.TP * (1 + rng.IntN(4))
		case 3:
			r.RanksPerNode = 1 + rng.IntN(2)
			r.Ranks = r.RanksPerNode * (1 + rng.IntN(4))
		}
		if rng.IntN(4) == 0 {
			r.Required = topology.Levels[rng.IntN(3)]
		}
		if rng.IntN(6) == 0 {
			r.NodeSelector = map[string]string{"zone": "x"}
		}
		if rng.IntN(2) == 0 {
			r.EstimatedDuration = time.Duration(1+rng.IntN(3000)) * time.Second
		}
		reqs = append(reqs, r)
	}
	opts := Options{Mode: Mode(rng.IntN(3)), Strategy: Strategy(rng.IntN(3)), NoPreemption: rng.IntN(4) == 0}
	addHost(rng, &snap, reqs, &opts)
	return snap, reqs, opts
}

// addHost gives half the cases CPU and memory: node capacities, what
// running ranks hold, requests that ask for some, host-only requests,
// selectors with alternatives, and sometimes an explicit workload.
func addHost(rng *rand.Rand, snap *Snapshot, reqs []Request, opts *Options) {
	if rng.IntN(2) == 0 {
		return
	}
	cpuUsed, memUsed := map[string]int64{}, map[string]int64{}
	for i := range snap.Running {
		for k := range snap.Running[i].Ranks {
			sl := &snap.Running[i].Ranks[k]
			if rng.IntN(2) == 0 {
				sl.CPUMillis = int64(1+rng.IntN(8)) * 1000
				sl.MemoryBytes = int64(1+rng.IntN(16)) * gib
				cpuUsed[sl.Node] += sl.CPUMillis
				memUsed[sl.Node] += sl.MemoryBytes
			}
		}
	}
	for i := range snap.Nodes {
		n := &snap.Nodes[i]
		if rng.IntN(5) == 0 {
			continue // capacity unknown
		}
		n.CPUMillis = int64([]int{16, 32, 64}[rng.IntN(3)])*1000 + cpuUsed[n.Name]
		n.CPUMillisUsed = cpuUsed[n.Name] + int64(rng.IntN(8))*1000
		n.MemoryBytes = int64([]int{64, 256}[rng.IntN(2)])*gib + memUsed[n.Name]
		n.MemoryBytesUsed = memUsed[n.Name] + int64(rng.IntN(32))*gib
	}
	for i := range reqs {
		r := &reqs[i]
		if rng.IntN(3) == 0 {
			r.CPUMillisPerRank = int64(1+rng.IntN(16)) * 1000
			r.MemoryBytesPerRank = int64(rng.IntN(64)) * gib
		}
		if rng.IntN(12) == 0 {
			*r = Request{JobID: r.JobID, Queue: r.Queue, Priority: r.Priority, Order: r.Order, Ranks: 1 + rng.IntN(3),
				HostOnly: true, CPUMillisPerRank: int64(1+rng.IntN(16)) * 1000}
		}
		if rng.IntN(8) == 0 {
			r.NodeSelectorIn = map[string][]string{"zone": [][]string{{"x", "y"}, {"y"}, {"y", "y", "w"}}[rng.IntN(3)]}
		}
	}
	if rng.IntN(3) == 0 {
		for range 1 + rng.IntN(6) {
			d := Demand{GPUs: rng.IntN(9), Weight: float64(rng.IntN(5))}
			if rng.IntN(3) == 0 {
				d.GPUs, d.GPUMilli = 0, 100*(1+rng.IntN(9))
			}
			if rng.IntN(2) == 0 {
				d.CPUMillis = int64(rng.IntN(16)) * 1000
			}
			if rng.IntN(4) == 0 {
				d.NodeSelector = map[string]string{"zone": "x"}
			}
			opts.Workload = append(opts.Workload, d)
		}
	}
}

// TestPlanProperties checks on random inputs that every plan gives no GPU
// twice, places gangs all or nothing, decides every request once, and is
// the same whatever the order of the requests, nodes and running jobs.
func TestPlanProperties(t *testing.T) {
	n := 300
	if testing.Short() {
		n = 50
	}
	for seed := range uint64(n) {
		rng := rand.New(rand.NewPCG(seed, 3))
		snap, reqs, opts := randomCase(t, rng)
		plan := ScheduleWith(snap, reqs, opts)
		checkPlan(t, snap, reqs, plan)
		if t.Failed() {
			t.Fatalf("seed %d (%+v)", seed, opts)
		}

		again := ScheduleWith(snap, reqs, opts)
		if diff := cmp.Diff(plan, again); diff != "" {
			t.Fatalf("seed %d: same inputs, different plan (-first +second):\n%s", seed, diff)
		}

		shuffled := snap
		shuffled.Nodes = append([]Node(nil), snap.Nodes...)
		shuffled.Running = append([]Running(nil), snap.Running...)
		r2 := append([]Request(nil), reqs...)
		rng.Shuffle(len(shuffled.Nodes), func(i, j int) { shuffled.Nodes[i], shuffled.Nodes[j] = shuffled.Nodes[j], shuffled.Nodes[i] })
		rng.Shuffle(len(shuffled.Running), func(i, j int) {
			shuffled.Running[i], shuffled.Running[j] = shuffled.Running[j], shuffled.Running[i]
		})
		rng.Shuffle(len(r2), func(i, j int) { r2[i], r2[j] = r2[j], r2[i] })
		for i := range shuffled.Nodes {
			n := &shuffled.Nodes[i]
			n.Shared = append([]SharedGPU(nil), n.Shared...)
			rng.Shuffle(len(n.Shared), func(i, j int) { n.Shared[i], n.Shared[j] = n.Shared[j], n.Shared[i] })
		}
		o2 := opts
		o2.Workload = append([]Demand(nil), opts.Workload...)
		rng.Shuffle(len(o2.Workload), func(i, j int) { o2.Workload[i], o2.Workload[j] = o2.Workload[j], o2.Workload[i] })
		if diff := cmp.Diff(plan, ScheduleWith(shuffled, r2, o2)); diff != "" {
			t.Fatalf("seed %d: shuffled inputs, different plan (-sorted +shuffled):\n%s", seed, diff)
		}
	}
}

// TestExhaustedPlacesNothingMore checks on random inputs that once a pass
// reports Exhausted no later request is placed, so that a caller that
// stops there gets ScheduleWith's placements and preemptions. Half the
// cases are made of plain gangs (whole GPUs, no estimates, no
// preemption), for which it stops early behind a backlog.
func TestExhaustedPlacesNothingMore(t *testing.T) {
	n := 300
	if testing.Short() {
		n = 50
	}
	early := 0
	for seed := range uint64(n) {
		rng := rand.New(rand.NewPCG(seed, 4))
		snap, reqs, opts := randomCase(t, rng)
		if seed%2 == 0 {
			opts.NoPreemption = true
			plain := reqs[:0]
			for _, r := range reqs {
				if r.HostOnly || r.GPUMilli > 0 || r.MIGProfile != "" {
					continue
				}
				r.EstimatedDuration = 0
				plain = append(plain, r)
			}
			reqs = plain
		}
		p := NewPass(snap, reqs, opts)
		stopped := -1
		for k := 0; ; k++ {
			if stopped < 0 && p.Exhausted() {
				stopped = k
			}
			d, more := p.Step()
			if !more {
				break
			}
			if stopped >= 0 && d.Placed {
				t.Fatalf("seed %d (%+v): %s placed after the pass was exhausted at request %d", seed, opts, d.JobID, stopped)
			}
		}
		if stopped < 0 || stopped == len(reqs) {
			continue
		}
		early++
		p = NewPass(snap, reqs, opts)
		for !p.Exhausted() {
			p.Step()
		}
		got, want := p.Plan(), ScheduleWith(snap, reqs, opts)
		if diff := cmp.Diff(want.Placements, got.Placements); diff != "" {
			t.Fatalf("seed %d: placements when stopped at exhaustion (-all +stopped):\n%s", seed, diff)
		}
		if diff := cmp.Diff(want.Preemptions, got.Preemptions); diff != "" {
			t.Fatalf("seed %d: preemptions when stopped at exhaustion (-all +stopped):\n%s", seed, diff)
		}
	}
	if early < n/10 {
		t.Errorf("only %d of %d passes were exhausted before their last request", early, n)
	}
	t.Logf("%d of %d passes exhausted before their last request", early, n)
}
