package controller

import (
	"testing"

	"github.com/gangway/gangway/internal/api"
	"github.com/gangway/gangway/internal/scheduler"
	"github.com/gangway/gangway/internal/topology"
	"github.com/google/go-cmp/cmp"
)

func twoNodes() map[string]*api.Node {
	nodes := map[string]*api.Node{}
	for _, name := range []string{"a", "b"} {
		n := &api.Node{Name: name, Labels: map[string]string{"leaf": "l1"}}
		for i := 0; i < 4; i++ {
			n.GPUs = append(n.GPUs, api.GPU{Index: i, NUMANode: i / 2, Rail: i, NVLinkPeers: others(i, 4)})
		}
		nodes[name] = n
	}
	return nodes
}

func others(i, n int) []int {
	var out []int
	for k := 0; k < n; k++ {
		if k != i {
			out = append(out, k)
		}
	}
	return out
}

func TestTopoCacheRebuildsOnlyOnChange(t *testing.T) {
	var tc topoCache
	topo, err := tc.get(twoNodes(), 0)
	if err != nil {
		t.Fatal(err)
	}
	if topo.NumNodes() != 2 || topo.NumLeaves() != 1 {
		t.Fatalf("topology has %d nodes, %d leaves", topo.NumNodes(), topo.NumLeaves())
	}
	if again, _ := tc.get(twoNodes(), 0); again != topo {
		t.Error("unchanged nodes rebuilt the topology")
	}
	n := twoNodes()
	n["b"].Labels["leaf"] = "l2"
	if changed, _ := tc.get(n, 0); changed == topo || changed.NumLeaves() != 2 {
		t.Error("a relabelled node did not rebuild the topology")
	}
	// With the cache's node generation: the same generation is trusted
	// without reading the nodes, a new one is checked.
	var gc topoCache
	first, _ := gc.get(twoNodes(), 7)
	if same, _ := gc.get(n, 7); same != first {
		t.Error("same node generation: the topology was rebuilt")
	}
	next, _ := gc.get(n, 8)
	if next == first || next.NumLeaves() != 2 {
		t.Error("new node generation with relabelled nodes: the topology was not rebuilt")
	}
	if again, _ := gc.get(n, 9); again != next {
		t.Error("new generation, same nodes: the topology was rebuilt")
	}
}

func TestRankLayout(t *testing.T) {
	// The scheduler numbered the grid (coordinates set): kept as is.
	pl := scheduler.Placement{JobID: "1", TPGroupsCrossingDomain: 0, RailMismatches: 1, Ranks: []scheduler.Slot{
		{Node: "a", GPUs: []int{0}, TP: 0}, {Node: "a", GPUs: []int{1}, TP: 1},
		{Node: "b", GPUs: []int{0}, TP: 0, DP: 1}, {Node: "b", GPUs: []int{1}, TP: 1, DP: 1},
	}}
	spec := &api.JobSpec{GPUsPerRank: 1, Parallelism: &api.Parallelism{TP: 2}}
	got, grid := rankLayout(spec, pl)
	want := []api.RankPlacement{
		{Rank: 0, Node: "a", NodeRank: 0, LocalRank: 0, GPUs: []int{0}},
		{Rank: 1, Node: "a", NodeRank: 0, LocalRank: 1, GPUs: []int{1}, TP: 1},
		{Rank: 2, Node: "b", NodeRank: 1, LocalRank: 0, GPUs: []int{0}, DP: 1},
		{Rank: 3, Node: "b", NodeRank: 1, LocalRank: 1, GPUs: []int{1}, TP: 1, DP: 1},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("placement (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(&api.Grid{TP: 2, PP: 1, DP: 2, Order: "tp-pp-dp", RailMismatches: 1}, grid); diff != "" {
		t.Errorf("grid (-want +got):\n%s", diff)
	}
	// No grid: no coordinates, no grid record.
	if _, g := rankLayout(&api.JobSpec{GPUsPerRank: 1}, pl); g != nil {
		t.Errorf("grid without parallelism = %+v", g)
	}
}

func TestCoordsWithoutTopology(t *testing.T) {
	for _, order := range []string{"tp-pp-dp", "tp-dp-pp"} {
		seen := map[[3]int]bool{}
		spec := &api.JobSpec{GPUsPerRank: 2, Parallelism: &api.Parallelism{TP: 2, PP: 3, Order: order}}
		pl := scheduler.Placement{}
		for i := 0; i < 12; i++ {
			pl.Ranks = append(pl.Ranks, scheduler.Slot{Node: "a", GPUs: []int{2 * i, 2*i + 1}})
		}
		out, grid := rankLayout(spec, pl)
		if grid.DP != 2 {
			t.Fatalf("%s: grid %+v", order, grid)
		}
		for _, p := range out {
			c := [3]int{p.TP, p.PP, p.DP}
			if seen[c] || p.TP >= 2 || p.PP >= 3 || p.DP >= 2 {
				t.Errorf("%s: rank %d has bad or repeated coordinates %v", order, p.Rank, c)
			}
			seen[c] = true
		}
	}
}

func TestTopologyFileAddsLeavesAndSpines(t *testing.T) {
	conf := "# two leaves under one spine\nSwitchName=leaf1 Nodes=a\nSwitchName=leaf2 Nodes=b\nSwitchName=spine1 Switches=leaf[1-2]\n"
	tf, err := topology.ParseFile("topology.conf", []byte(conf))
	if err != nil {
		t.Fatal(err)
	}
	nodes := twoNodes()
	delete(nodes["a"].Labels, "leaf")
	delete(nodes["b"].Labels, "leaf")
	tc := topoCache{files: []topology.File{tf}}
	topo, err := tc.get(nodes, 0)
	if err != nil {
		t.Fatal(err)
	}
	if topo.NumLeaves() != 2 || topo.NumSpines() != 1 {
		t.Errorf("leaves %d spines %d; want 2 and 1", topo.NumLeaves(), topo.NumSpines())
	}
	// A label that contradicts the file is an error naming both sources.
	nodes["a"].Labels["leaf"] = "leaf2"
	if _, err := (&topoCache{files: []topology.File{tf}}).get(nodes, 0); err == nil {
		t.Error("a leaf label contradicting topology.conf was accepted")
	}
}

func TestAddHostUse(t *testing.T) {
	const gib = int64(1) << 30
	jobs := map[string]*api.Job{
		"1": {ID: "1", Spec: api.JobSpec{Resources: &api.Resources{CPUMillis: 3000, MemoryBytes: 8 * gib}}},
		"2": {ID: "2", Spec: api.JobSpec{}}, // no resources: holds nothing counted
	}
	snap := scheduler.Snapshot{
		Nodes: []scheduler.Node{
			{Name: "a", Total: 4, Free: []int{2, 3}, CPUMillis: 8000, MemoryBytes: 64 * gib},
			{Name: "b", Total: 4, Free: []int{0, 1, 2}, CPUMillis: 8000, MemoryBytes: 64 * gib},
		},
		Running: []scheduler.Running{
			{JobID: "1", Ranks: []scheduler.Slot{{Node: "a", GPUs: []int{0}}, {Node: "a", GPUs: []int{1}}}},
			{JobID: "2", Ranks: []scheduler.Slot{{Node: "b", GPUs: []int{3}}}},
		},
	}
	addHostUse(&snap, jobs)
	if d := cmp.Diff([]int64{6000, 16 * gib, 0, 0}, []int64{snap.Nodes[0].CPUMillisUsed, snap.Nodes[0].MemoryBytesUsed,
		snap.Nodes[1].CPUMillisUsed, snap.Nodes[1].MemoryBytesUsed}); d != "" {
		t.Errorf("used per node (-want +got):\n%s", d)
	}
	if r := snap.Running[0]; r.CPUMillis != 6000 || r.MemoryBytes != 16*gib || r.Ranks[1].CPUMillis != 3000 {
		t.Errorf("running job 1: %+v", r)
	}
	// Node a has 2 of 8 CPUs left: a rank asking for 4 goes to b, though
	// a is the tighter fit by GPUs.
	plan := scheduler.Schedule(snap, []scheduler.Request{{JobID: "3", Ranks: 1, CPUMillisPerRank: 4000}})
	if len(plan.Placements) != 1 || plan.Placements[0].Ranks[0].Node != "b" {
		t.Errorf("placements %+v, pending %+v; want job 3 on b", plan.Placements, plan.Pending)
	}
}
