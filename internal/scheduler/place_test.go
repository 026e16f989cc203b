package scheduler

import (
	"testing"

	"github.com/gangway/gangway/internal/topology"
	"github.com/google/go-cmp/cmp"
)

// nvl is a cluster of multi-node NVLink domains: 4 nodes of 4 GPUs per
// domain, 8 nodes per leaf.
var nvl = topology.UniformSpec{Nodes: 16, GPUsPerNode: 4, NodesPerLeaf: 8, LeavesPerSpine: 2, NodesPerDomain: 4, Rails: 4, NVLink: true}

func TestPlacement(t *testing.T) {
	partial := func(nodes ...string) map[string][]int {
		m := map[string][]int{}
		for _, n := range nodes {
			m[n] = gpus(0, 4)
		}
		return m
	}
	allNodes := func() []string {
		var out []string
		for i := 1; i <= 16; i++ {
			out = append(out, "node"+string(rune('0'+i/10))+string(rune('0'+i%10)))
		}
		return out
	}
	tests := []struct {
		name   string
		spec   topology.UniformSpec
		busy   map[string][]int
		mutate func(*Snapshot)
		opts   Options
		req    Request

		wantNodes          []string
		wantLeaves         int
		wantSpines         int
		wantKind           PendingKind
		wantReason         string
		check              func(t *testing.T, topo *topology.Topology, pl *Placement)
		wantRailMismatches int
	}{
		{
			name:      "one GPU goes to the fullest node that fits",
			busy:      map[string][]int{"node03": gpus(0, 6), "node01": gpus(0, 4)},
			req:       Request{JobID: "j", Ranks: 1},
			wantNodes: []string{"node03"},
		},
		{
			name: "equal nodes: Topology picks the one in the fuller leaf",
			busy: map[string][]int{"node02": gpus(0, 7), "node10": gpus(0, 7), "node11": gpus(0, 8)},
			req:  Request{JobID: "j", Ranks: 1}, wantNodes: []string{"node10"},
		},
		{
			name: "equal nodes: BestFit picks the lowest id",
			busy: map[string][]int{"node02": gpus(0, 7), "node10": gpus(0, 7), "node11": gpus(0, 8)},
			opts: Options{Strategy: BestFit},
			req:  Request{JobID: "j", Ranks: 1}, wantNodes: []string{"node02"},
		},
		{
			name:      "16 GPUs: whole nodes of the fullest leaf that holds them",
			busy:      map[string][]int{"node01": gpus(0, 8)},
			req:       Request{JobID: "j", Ranks: 16},
			wantNodes: []string{"node02", "node03"}, wantLeaves: 1, wantSpines: 1,
		},
		{
			name:       "48 GPUs: one leaf and a half, inside one spine",
			req:        Request{JobID: "j", Ranks: 6, GPUsPerRank: 8},
			wantNodes:  []string{"node01", "node02", "node03", "node04", "node05", "node06"},
			wantLeaves: 2, wantSpines: 1,
		},
		{
			name:       "required leaf: pending, naming the emptiest leaf",
			busy:       map[string][]int{"node01": gpus(0, 8), "node05": gpus(0, 8), "node09": gpus(0, 8), "node13": gpus(0, 8)},
			req:        Request{JobID: "j", Ranks: 32, Required: topology.LevelLeaf},
			wantKind:   PendingTopology,
			wantReason: "needs 32 GPUs (32 ranks × 1) under one leaf; the emptiest leaf (leaf leaf1) has 24 free",
		},
		{
			name:      "required spine: only the untouched spine holds 64 GPUs",
			busy:      map[string][]int{"node01": {0}},
			req:       Request{JobID: "j", Ranks: 8, GPUsPerRank: 8, Required: topology.LevelSpine},
			wantNodes: []string{"node09", "node10", "node11", "node12", "node13", "node14", "node15", "node16"},
		},
		{
			name: "TP groups of 8 take the only whole nodes",
			busy: func() map[string][]int {
				m := partial(allNodes()...)
				delete(m, "node07")
				delete(m, "node12")
				return m
			}(),
			req:       Request{JobID: "j", Ranks: 16, TP: 8},
			wantNodes: []string{"node07", "node12"},
			check: func(t *testing.T, topo *topology.Topology, pl *Placement) {
				if pl.TPGroupsCrossingDomain != 0 {
					t.Errorf("TPGroupsCrossingDomain = %d", pl.TPGroupsCrossingDomain)
				}
				checkTPGroupsInDomains(t, topo, pl)
			},
		},
		{
			name:       "TP group bigger than any free block: pending",
			busy:       partial(allNodes()...),
			req:        Request{JobID: "j", Ranks: 16, TP: 8},
			wantKind:   PendingTopology,
			wantReason: "needs 16 GPUs as 2 tensor-parallel groups of 8 GPUs, each inside one NVLink domain; 64 GPUs are free in the cluster but only 0 blocks of 8 GPUs fit on single nodes",
		},
		{
			name: "rails agree across partly used nodes",
			busy: func() map[string][]int {
				m := map[string][]int{}
				for _, n := range allNodes()[2:] {
					m[n] = gpus(0, 8)
				}
				m["node01"] = []int{6, 7}
				m["node02"] = []int{0, 1}
				return m
			}(),
			req:       Request{JobID: "j", Ranks: 8, RanksPerNode: 4},
			wantNodes: []string{"node01", "node02"},
			check: func(t *testing.T, topo *topology.Topology, pl *Placement) {
				for _, s := range pl.Ranks {
					if s.GPUs[0] < 2 || s.GPUs[0] > 5 {
						t.Errorf("rank on %s GPU %d: want GPUs 2-5, the rails free on both nodes", s.Node, s.GPUs[0])
					}
				}
			},
		},
		{
			name:      "ranks per node",
			req:       Request{JobID: "j", Ranks: 4, RanksPerNode: 2, GPUsPerRank: 2},
			wantNodes: []string{"node01", "node02"},
		},
		{
			name: "node selector",
			mutate: func(s *Snapshot) {
				s.Nodes[4].Labels = map[string]string{"gpu": "h100"}
			},
			req:       Request{JobID: "j", Ranks: 2, NodeSelector: map[string]string{"gpu": "h100"}},
			wantNodes: []string{"node05"},
		},
		{
			name:       "node selector nobody matches",
			req:        Request{JobID: "j", Ranks: 1, NodeSelector: map[string]string{"gpu": "b200"}},
			wantKind:   PendingCapacity,
			wantReason: "needs 1 GPU on one node on nodes with {gpu=b200}; no ready node has labels {gpu=b200}",
		},
		{
			name: "Consolidate wants whole idle nodes",
			busy: func() map[string][]int {
				m := partial(allNodes()...)
				delete(m, "node16")
				return m
			}(),
			opts:       Options{Strategy: Consolidate},
			req:        Request{JobID: "j", Ranks: 16},
			wantKind:   PendingTopology,
			wantReason: "needs 16 GPUs (16 ranks × 1) on whole idle nodes; 1 nodes are idle (68 GPUs free in the cluster)",
		},
		{
			name: "Topology uses partly free nodes Consolidate would not",
			busy: func() map[string][]int {
				m := partial(allNodes()...)
				delete(m, "node16")
				return m
			}(),
			req:        Request{JobID: "j", Ranks: 16},
			wantLeaves: 1,
		},
		{
			name: "TP 8 inside a 4-node NVLink domain of 4-GPU nodes",
			spec: nvl,
			busy: map[string][]int{"node01": {0}},
			req:  Request{JobID: "j", Ranks: 16, TP: 8},
			check: func(t *testing.T, topo *topology.Topology, pl *Placement) {
				if pl.TPGroupsCrossingDomain != 0 {
					t.Errorf("TPGroupsCrossingDomain = %d", pl.TPGroupsCrossingDomain)
				}
				checkTPGroupsInDomains(t, topo, pl)
			},
			wantNodes: []string{"node05", "node06", "node07", "node08"},
		},
		{
			name:      "required nvlink-domain spans the nodes of one rack",
			spec:      nvl,
			req:       Request{JobID: "j", Ranks: 12, Required: topology.LevelNVLinkDomain},
			wantNodes: []string{"node01", "node02", "node03"},
		},
		{
			name:       "required nvlink-domain bigger than any domain",
			req:        Request{JobID: "j", Ranks: 12, Required: topology.LevelNVLinkDomain},
			wantKind:   PendingTopology,
			wantReason: "needs 12 GPUs (12 ranks × 1) under one NVLink domain; the emptiest NVLink domain (node node01) has 8 free",
		},
		{
			name:       "sizes that do not multiply",
			req:        Request{JobID: "j", Ranks: 8, TP: 8, PP: 2},
			wantKind:   PendingInvalid,
			wantReason: "tp 8 × pp 2 is 16, which does not divide the gang's 8 ranks",
		},
		{
			name:       "bigger than the cluster",
			req:        Request{JobID: "j", Ranks: 17, GPUsPerRank: 8},
			wantKind:   PendingCapacity,
			wantReason: "needs 136 GPUs (17 ranks × 8); the cluster has only 128 GPUs",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec := tt.spec
			if spec.Nodes == 0 {
				spec = small
			}
			topo, snap := testCluster(t, spec, tt.busy)
			if tt.mutate != nil {
				tt.mutate(&snap)
			}
			reqs := []Request{tt.req}
			plan := ScheduleWith(snap, reqs, tt.opts)
			checkPlan(t, snap, reqs, plan)
			pl := placementOf(plan, "j")
			if tt.wantKind != 0 {
				pe := pendingOf(plan, "j")
				if pe == nil {
					t.Fatalf("placed on %v, want pending %s", nodesOf(pl), tt.wantKind)
				}
				if pe.Kind != tt.wantKind {
					t.Errorf("kind = %s, want %s", pe.Kind, tt.wantKind)
				}
				if diff := cmp.Diff(tt.wantReason, pe.Reason); diff != "" {
					t.Errorf("reason (-want +got):\n%s", diff)
				}
				return
			}
			if pl == nil {
				t.Fatalf("pending: %s", pendingOf(plan, "j").Reason)
			}
			if tt.wantNodes != nil {
				if diff := cmp.Diff(tt.wantNodes, nodesOf(pl)); diff != "" {
					t.Errorf("nodes (-want +got):\n%s", diff)
				}
			}
			if tt.wantLeaves != 0 && pl.Leaves != tt.wantLeaves {
				t.Errorf("spans %d leaves, want %d", pl.Leaves, tt.wantLeaves)
			}
			if tt.wantSpines != 0 && pl.Spines != tt.wantSpines {
				t.Errorf("spans %d spines, want %d", pl.Spines, tt.wantSpines)
			}
			if pl.RailMismatches != tt.wantRailMismatches {
				t.Errorf("RailMismatches = %d, want %d", pl.RailMismatches, tt.wantRailMismatches)
			}
			if tt.check != nil {
				tt.check(t, topo, pl)
			}
		})
	}
}

// checkTPGroupsInDomains asserts that the ranks of every tensor-parallel
// group (same PP and DP coordinates) sit in one NVLink domain.
func checkTPGroupsInDomains(t *testing.T, topo *topology.Topology, pl *Placement) {
	t.Helper()
	dom := map[[2]int]topology.DomainID{}
	for i, s := range pl.Ranks {
		id, _ := topo.NodeByName(s.Node)
		key := [2]int{s.PP, s.DP}
		if d, ok := dom[key]; ok && d != topo.Domain(id) {
			t.Errorf("rank %d (pp %d, dp %d) on %s: its TP group crosses NVLink domains", i, s.PP, s.DP, s.Node)
		}
		dom[key] = topo.Domain(id)
	}
}

// TestRankOrderFollowsTopology checks that a placed gang's ranks carry
// grid coordinates in the requested order and that pipeline stages of a
// replica stay under one leaf when they can.
func TestRankOrderFollowsTopology(t *testing.T) {
	_, snap := testCluster(t, small, nil)
	reqs := []Request{{JobID: "j", Ranks: 64, TP: 8, PP: 4, DP: 2}}
	plan := Schedule(snap, reqs)
	checkPlan(t, snap, reqs, plan)
	pl := placementOf(plan, "j")
	if pl == nil {
		t.Fatalf("pending: %+v", plan.Pending)
	}
	for r, s := range pl.Ranks {
		if want := s.TP + 8*(s.PP+4*s.DP); want != r {
			t.Errorf("rank %d has tp %d pp %d dp %d, which number as %d in tp-pp-dp order", r, s.TP, s.PP, s.DP, want)
		}
	}
	if pl.PPStepsCrossingLeaf != 0 || pl.TPGroupsCrossingDomain != 0 || pl.Leaves != 2 {
		t.Errorf("PP steps crossing leaves %d, TP groups crossing domains %d, leaves %d; want 0, 0, 2",
			pl.PPStepsCrossingLeaf, pl.TPGroupsCrossingDomain, pl.Leaves)
	}
}

// TestLabelsMakeTheTopology checks that without a Topology the snapshot's
// node labels place the nodes: a 16-GPU gang stays under one leaf even
// when node names interleave leaves.
func TestLabelsMakeTheTopology(t *testing.T) {
	var snap Snapshot
	for i, name := range []string{"a1", "a2", "a3", "a4"} {
		leaf := []string{"x", "y"}[i%2]
		snap.Nodes = append(snap.Nodes, Node{Name: name, Total: 8, Free: gpus(0, 8), Labels: map[string]string{"leaf": leaf}})
	}
	snap.Nodes[0].Free = gpus(0, 4) // leaf x: a1 (4 free), a3 (8 free)
	reqs := []Request{{JobID: "j", Ranks: 16}}
	plan := Schedule(snap, reqs)
	checkPlan(t, snap, reqs, plan)
	pl := placementOf(plan, "j")
	if pl == nil {
		t.Fatalf("pending: %+v", plan.Pending)
	}
	if diff := cmp.Diff([]string{"a2", "a4"}, nodesOf(pl)); diff != "" {
		t.Errorf("nodes (-want +got):\n%s", diff)
	}
	if len(plan.Warnings) != 0 {
		t.Errorf("warnings: %v", plan.Warnings)
	}
}
