package controller

import (
	"testing"

	"github.com/gangway/gangway/internal/api"
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

func TestRankLayoutKeepsTPInsideNodes(t *testing.T) {
	var tc topoCache
	topo, err := tc.get(twoNodes())
	if err != nil {
		t.Fatal(err)
	}
	if again, _ := tc.get(twoNodes()); again != topo {
		t.Error("unchanged nodes rebuilt the topology")
	}
	// The scheduler's slots interleave the nodes; TP=4 must still keep each
	// tensor-parallel group on one node.
	slots := []slot{{"a", []int{0}}, {"b", []int{0}}, {"a", []int{1}}, {"b", []int{1}},
		{"a", []int{2}}, {"b", []int{2}}, {"a", []int{3}}, {"b", []int{3}}}
	spec := &api.JobSpec{GPUsPerRank: 1, Parallelism: &api.Parallelism{TP: 4}}
	pl, grid, err := rankLayout(spec, slots, topo)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(&api.Grid{TP: 4, PP: 1, DP: 2, Order: "tp-pp-dp"}, grid); diff != "" {
		t.Errorf("grid (-want +got):\n%s", diff)
	}
	groupNode := map[int]string{}
	usedGPU := map[string]bool{}
	for _, p := range pl {
		if n, ok := groupNode[p.DP]; ok && n != p.Node {
			t.Errorf("TP group of dp=%d spans %s and %s", p.DP, n, p.Node)
		}
		groupNode[p.DP] = p.Node
		k := p.Node + "/" + string(rune('0'+p.GPUs[0]))
		if usedGPU[k] {
			t.Errorf("GPU %s used twice", k)
		}
		usedGPU[k] = true
		if p.TP != p.Rank%4 || p.DP != p.Rank/4 {
			t.Errorf("rank %d has tp=%d dp=%d, want %d %d", p.Rank, p.TP, p.DP, p.Rank%4, p.Rank/4)
		}
	}
	// Without a grid, ranks follow the slots.
	pl, grid, err = rankLayout(&api.JobSpec{GPUsPerRank: 1}, slots, topo)
	if err != nil || grid != nil || pl[1].Node != "b" || pl[1].NodeRank != 1 || pl[2].LocalRank != 1 {
		t.Errorf("plain layout = %+v, %v, %v", pl, grid, err)
	}
}

func TestCoords(t *testing.T) {
	for _, order := range []string{"tp-pp-dp", "tp-dp-pp"} {
		seen := map[[3]int]bool{}
		spec := &api.JobSpec{GPUsPerRank: 2, Parallelism: &api.Parallelism{TP: 2, PP: 3, Order: order}}
		slots := make([]slot, 12)
		for i := range slots {
			slots[i] = slot{"a", []int{2 * i, 2*i + 1}}
		}
		pl, grid, err := rankLayout(spec, slots, nil)
		if err != nil || grid.DP != 2 {
			t.Fatalf("%s: grid %+v, %v", order, grid, err)
		}
		for _, p := range pl {
			c := [3]int{p.TP, p.PP, p.DP}
			if seen[c] || p.TP >= 2 || p.PP >= 3 || p.DP >= 2 {
				t.Errorf("%s: rank %d has bad or repeated coordinates %v", order, p.Rank, c)
			}
			seen[c] = true
		}
	}
}
