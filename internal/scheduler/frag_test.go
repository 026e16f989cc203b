package scheduler

import (
	"fmt"
	"math"
	"testing"

	"github.com/gangway/gangway/internal/topology"
	"github.com/google/go-cmp/cmp"
)

// TestFragmentationPlacement checks where the Topology strategy puts gangs
// that fit one node, fractional and host-only ranks, against plain best
// fit on the same input.
func TestFragmentationPlacement(t *testing.T) {
	spec := topology.UniformSpec{Nodes: 4, GPUsPerNode: 8, NodesPerLeaf: 2, NVLink: true}
	twoGPUJobs := func(nodes ...string) []Running {
		var out []Running
		for _, n := range nodes {
			for g := 0; g < 8; g += 2 {
				out = append(out, Running{JobID: fmt.Sprintf("r-%s-%d", n, g), Ranks: []Slot{{Node: n, GPUs: gpus(g, g+2)}}})
			}
		}
		return out
	}
	tests := []struct {
		name     string
		busy     map[string][]int
		shared   map[string][]SharedGPU
		running  []Running
		cpu      map[string][2]int64
		workload []Demand
		req      Request
		// want and wantBestFit are "node/gpu" of the first rank ("node"
		// for host-only ranks) under Topology and under BestFit.
		want, wantBestFit string
	}{
		{
			name: "a GPU leaves the node that still fits the common shape",
			// node1 has 2 free GPUs, node2 3: taking one of node1's
			// leaves a GPU no 2-GPU job can use.
			busy:     map[string][]int{"node1": gpus(0, 6), "node2": gpus(0, 5), "node3": gpus(0, 8), "node4": gpus(0, 8)},
			workload: []Demand{{GPUs: 2, Weight: 1}},
			req:      Request{JobID: "j", Ranks: 1},
			want:     "node2/5", wantBestFit: "node1/6",
		},
		{
			name: "the workload is learned from running jobs",
			busy: map[string][]int{"node1": gpus(0, 6), "node2": gpus(0, 5)},
			// Eight running 2-GPU jobs fill node3 and node4.
			running: twoGPUJobs("node3", "node4"),
			req:     Request{JobID: "j", Ranks: 1},
			want:    "node2/5", wantBestFit: "node1/6",
		},
		{
			name:     "with only one-GPU shapes it is best fit",
			busy:     map[string][]int{"node1": gpus(0, 6), "node2": gpus(0, 5), "node3": gpus(0, 8), "node4": gpus(0, 8)},
			workload: []Demand{{GPUs: 1, Weight: 1}},
			req:      Request{JobID: "j", Ranks: 1},
			want:     "node1/6", wantBestFit: "node1/6",
		},
		{
			name: "a share keeps room for the common share",
			// Joining GPU 0 (700 left) leaves 200, too little for a 300;
			// a fresh GPU leaves 500 and 700, both room for one.
			shared:   map[string][]SharedGPU{"node1": {{Index: 0, UsedMilli: 300}}},
			busy:     map[string][]int{"node2": gpus(0, 8), "node3": gpus(0, 8), "node4": gpus(0, 8)},
			workload: []Demand{{GPUMilli: 300, Weight: 1}},
			req:      Request{JobID: "j", Ranks: 1, GPUMilli: 500},
			want:     "node1/1", wantBestFit: "node1/0",
		},
		{
			name:     "a share that fills a GPU exactly joins it",
			shared:   map[string][]SharedGPU{"node1": {{Index: 0, UsedMilli: 700}}},
			workload: []Demand{{GPUMilli: 300, Weight: 1}, {GPUs: 8, Weight: 1}},
			req:      Request{JobID: "j", Ranks: 1, GPUMilli: 300},
			want:     "node1/0", wantBestFit: "node1/0",
		},
		{
			name: "CPU-only work goes where the GPUs are taken",
			// node1's GPUs are all busy; node2's are free but its CPU,
			// less 24 CPUs, could no longer feed a 16-CPU GPU job.
			busy:     map[string][]int{"node1": gpus(0, 8), "node3": gpus(0, 8), "node4": gpus(0, 8)},
			cpu:      map[string][2]int64{"node1": {64, 16}, "node2": {64, 32}, "node3": {64, 64}, "node4": {64, 64}},
			workload: []Demand{{GPUs: 1, CPUMillis: 16000, Weight: 1}},
			req:      Request{JobID: "j", Ranks: 1, HostOnly: true, CPUMillisPerRank: 24000},
			want:     "node1", wantBestFit: "node2",
		},
		{
			name: "CPU weighs in the fragmentation of GPU nodes",
			// Both nodes have 4 free GPUs; node2 keeps 16 CPUs after the
			// job, node1 only 4, too few for the common 8-CPU job.
			busy:     map[string][]int{"node1": gpus(0, 4), "node2": gpus(0, 4), "node3": gpus(0, 8), "node4": gpus(0, 8)},
			cpu:      map[string][2]int64{"node1": {64, 52}, "node2": {64, 40}, "node3": {64, 0}, "node4": {64, 0}},
			workload: []Demand{{GPUs: 1, CPUMillis: 8000, Weight: 1}},
			req:      Request{JobID: "j", Ranks: 1, CPUMillisPerRank: 8000},
			want:     "node2/4", wantBestFit: "node1/4",
		},
		{
			name: "a selector in the workload keeps its nodes for it",
			// node1 is an A100, the rest H100; the common shape needs an
			// A100. Two equal nodes: the GPU goes to the H100.
			busy:     map[string][]int{"node1": gpus(0, 6), "node2": gpus(0, 6), "node3": gpus(0, 8), "node4": gpus(0, 8)},
			workload: []Demand{{GPUs: 2, Weight: 1, NodeSelectorIn: map[string][]string{"gpu": {"A100", "A800"}}}},
			req:      Request{JobID: "j", Ranks: 1},
			want:     "node2/6", wantBestFit: "node1/6",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			topo, _ := topology.Uniform(spec)
			snap := withRunningOn(topo, tt.running)
			for i := range snap.Nodes {
				n := &snap.Nodes[i]
				for _, g := range tt.busy[n.Name] {
					n.Free = removeInt(n.Free, g)
				}
				for _, s := range tt.shared[n.Name] {
					n.Shared = append(n.Shared, s)
					n.Free = removeInt(n.Free, s.Index)
				}
				n.Labels = map[string]string{"gpu": "H100"}
				if n.Name == "node1" {
					n.Labels["gpu"] = "A100"
				}
			}
			withHost(&snap, tt.cpu, nil)
			reqs := []Request{tt.req}
			for _, c := range []struct {
				strat Strategy
				want  string
			}{{Topology, tt.want}, {BestFit, tt.wantBestFit}} {
				plan := ScheduleWith(snap, reqs, Options{Strategy: c.strat, Workload: tt.workload})
				checkPlan(t, snap, reqs, plan)
				pl := placementOf(plan, "j")
				if pl == nil {
					t.Fatalf("%s: not placed: %+v", c.strat, plan.Pending)
				}
				got := pl.Ranks[0].Node
				if len(pl.Ranks[0].GPUs) > 0 {
					got = fmt.Sprintf("%s/%d", got, pl.Ranks[0].GPUs[0])
				}
				if got != c.want {
					t.Errorf("%s: placed on %s, want %s", c.strat, got, c.want)
				}
			}
		})
	}
}

// TestFragOf checks the model's arithmetic on one node against the
// definition, shape by shape.
func TestFragOf(t *testing.T) {
	_, snap := testCluster(t, topology.UniformSpec{Nodes: 1, GPUsPerNode: 4, NVLink: true}, nil)
	snap.Nodes[0].CPUMillis = 32000
	p := NewPass(snap, nil, Options{Workload: []Demand{
		{GPUs: 2, Weight: 1},                          // fits with 2 whole GPUs: only the shares are fragments
		{GPUMilli: 500, Weight: 1},                    // fits: the 300 share is a fragment
		{GPUs: 1, CPUMillis: 16000, Weight: 1},        // does not fit the CPU left: everything is
		{GPUs: 0, CPUMillis: 1000, Weight: 1},         // host-only: weighs in the total only
		{GPUs: 1, Weight: 0},                          // ignored
		{GPUMilli: 500, Weight: 1, NodeSelector: nil}, // merges with the other 500
	}})
	m := p.c.fm
	if m == nil {
		t.Fatal("no model")
	}
	// 2 whole GPUs, shares with 300 and 600 free, 8 CPUs free.
	got := m.fragOf(0, 2, []int16{300, 600}, 8000, hostUnlimited)
	idle := 2*1000.0 + 900
	want := (1*900 + 2*300 + 1*idle) / 5
	if math.Abs(got-want) > 1e-9 {
		t.Errorf("fragOf = %v, want %v", got, want)
	}
	type group struct {
		GPUs, Milli int
		W           float64
	}
	var groups []group
	for _, g := range m.groups {
		groups = append(groups, group{g.gpus, g.milli, g.w})
	}
	if d := cmp.Diff([]group{{0, 500, 0.4}, {1, 0, 0.2}, {2, 0, 0.2}}, groups); d != "" {
		t.Errorf("groups (-want +got):\n%s", d)
	}
}
