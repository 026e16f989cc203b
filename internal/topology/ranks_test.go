package topology

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// gpusOf lists GPUs "node:first-last" style: whole ranges of local indices.
func gpusOf(t testing.TB, topo *Topology, spec ...any) []GPURef {
	t.Helper()
	var out []GPURef
	for i := 0; i < len(spec); i += 3 {
		name := spec[i].(string)
		lo, hi := spec[i+1].(int), spec[i+2].(int)
		n, ok := topo.NodeByName(name)
		if !ok {
			t.Fatalf("no node %q", name)
		}
		for g := lo; g <= hi; g++ {
			out = append(out, GPURef{n, int32(g)})
		}
	}
	return out
}

// placement describes a layout compactly: for each rank, "node/gpu".
func placement(topo *Topology, lay RankLayout) []string {
	out := make([]string, len(lay.Ranks))
	for r, rk := range lay.Ranks {
		out[r] = fmt.Sprintf("%s/%d", topo.NodeName(rk.GPU.Node), rk.GPU.GPU)
	}
	return out
}

func nodeBlock(node string, lo, hi int) []string {
	var out []string
	for g := lo; g <= hi; g++ {
		out = append(out, fmt.Sprintf("%s/%d", node, g))
	}
	return out
}

func concat(parts ...[]string) []string { return slices.Concat(parts...) }

// fourNodes: n1, n2 under leaf l1, n3, n4 under leaf l2, one spine; 8 NVLink
// GPUs each, rails 0-7.
func fourNodes(t testing.TB) *Topology {
	b := NewBuilder()
	for i, leaf := range []string{"l1", "l1", "l2", "l2"} {
		name := fmt.Sprintf("n%d", i+1)
		check(t, b.AddNode(NodeSpec{Name: name, GPUs: 8, NVLink: true, Rails: seqInts(8, 8)}))
		check(t, b.AddLabels(name, map[string]string{"leaf": leaf, "spine": "s1"}))
	}
	return mustBuild(t, b)
}

func TestOrderRanksLayouts(t *testing.T) {
	four := fourNodes(t)

	// Two racks of a multi-node NVLink domain, each rack split over two
	// leaves: rackA = a1 (l1) + a2 (l2), rackB = b1 (l1) + b2 (l2). Node ids
	// run a1 b1 a2 b2, so filling TP groups in id order would mix racks.
	b := NewBuilder()
	for _, n := range []struct{ name, leaf, rack string }{{"a1", "l1", "rackA"}, {"a2", "l2", "rackA"}, {"b1", "l1", "rackB"}, {"b2", "l2", "rackB"}} {
		check(t, b.AddNode(NodeSpec{Name: n.name, GPUs: 4, Rails: seqInts(4, 4)}))
		check(t, b.AddLabels(n.name, map[string]string{"leaf": n.leaf, "spine": "s", "nvlink-domain": n.rack}))
	}
	racks := mustBuild(t, b)

	// PCIe-only nodes, each its own domain.
	b = NewBuilder()
	for _, n := range []string{"p1", "p2"} {
		check(t, b.AddNode(NodeSpec{Name: n, GPUs: 8, Rails: seqInts(8, 8)}))
		check(t, b.AddLabels(n, map[string]string{"leaf": "l1"}))
	}
	pcie := mustBuild(t, b)

	// Rails wired backwards on one node: GPU 7 sits on rail 0.
	b = NewBuilder()
	check(t, b.AddNode(NodeSpec{Name: "fwd", GPUs: 4, NVLink: true, Rails: []int{0, 1, 2, 3}}))
	check(t, b.AddNode(NodeSpec{Name: "rev", GPUs: 4, NVLink: true, Rails: []int{3, 2, 1, 0}}))
	rev := mustBuild(t, b)

	tests := []struct {
		name  string
		topo  *Topology
		gpus  []GPURef
		size  Parallelism
		order RankOrder
		// want is the GPU of each rank; coords is (tp, pp, dp) of a few ranks.
		want   []string
		coords map[int][3]int
		nodes  []string
		// quality counts: TP groups crossing a domain, PP steps crossing a
		// leaf, rail mismatches; and whether node ranks are contiguous.
		tpCross, ppCross, rails int
		contiguous              bool
	}{
		{
			name: "tp8 pp2 dp2: a replica per leaf, pp stages under one leaf",
			topo: four, size: Parallelism{TP: 8, PP: 2, DP: 2},
			gpus:       gpusOf(t, four, "n4", 0, 7, "n2", 0, 7, "n1", 0, 7, "n3", 0, 7),
			want:       concat(nodeBlock("n1", 0, 7), nodeBlock("n2", 0, 7), nodeBlock("n3", 0, 7), nodeBlock("n4", 0, 7)),
			coords:     map[int][3]int{0: {0, 0, 0}, 7: {7, 0, 0}, 8: {0, 1, 0}, 16: {0, 0, 1}, 31: {7, 1, 1}},
			nodes:      []string{"n1", "n2", "n3", "n4"},
			contiguous: true,
		},
		{
			name: "same grid numbered the Megatron way",
			topo: four, size: Parallelism{TP: 8, PP: 2, DP: 2}, order: OrderTPDPPP,
			gpus: gpusOf(t, four, "n1", 0, 7, "n2", 0, 7, "n3", 0, 7, "n4", 0, 7),
			// rank = tp + 8*(dp + 2*pp): dp varies before pp.
			want:       concat(nodeBlock("n1", 0, 7), nodeBlock("n3", 0, 7), nodeBlock("n2", 0, 7), nodeBlock("n4", 0, 7)),
			coords:     map[int][3]int{8: {0, 0, 1}, 16: {0, 1, 0}, 31: {7, 1, 1}},
			nodes:      []string{"n1", "n3", "n2", "n4"},
			contiguous: true,
		},
		{
			name: "tp2 pp4: a whole pipeline inside one node",
			topo: four, size: Parallelism{TP: 2, PP: 4},
			gpus:       gpusOf(t, four, "n1", 0, 7, "n3", 0, 7),
			want:       concat(nodeBlock("n1", 0, 7), nodeBlock("n3", 0, 7)),
			coords:     map[int][3]int{1: {1, 0, 0}, 2: {0, 1, 0}, 7: {1, 3, 0}, 8: {0, 0, 1}},
			nodes:      []string{"n1", "n3"},
			contiguous: true,
		},
		{
			name: "stages pair inside a node first, then inside a leaf",
			topo: four, size: Parallelism{TP: 4, PP: 2, DP: 2},
			// n1 and n2 give 4 GPUs each, n3 gives 8: TP groups n1, n2, n3a, n3b.
			gpus:       gpusOf(t, four, "n1", 0, 3, "n2", 0, 3, "n3", 0, 7),
			want:       concat(nodeBlock("n1", 0, 3), nodeBlock("n2", 0, 3), nodeBlock("n3", 0, 7)),
			nodes:      []string{"n1", "n2", "n3"},
			contiguous: true,
		},
		{
			name: "pipelines stay in a leaf before pairing across",
			topo: four, size: Parallelism{TP: 4, PP: 2, DP: 2},
			// TP groups: n1, n2 (l1), n3 (l2), n4 (l2). Pipelines: (n1, n2), (n3, n4).
			gpus:       gpusOf(t, four, "n1", 4, 7, "n2", 4, 7, "n3", 4, 7, "n4", 4, 7),
			want:       concat(nodeBlock("n1", 4, 7), nodeBlock("n2", 4, 7), nodeBlock("n3", 4, 7), nodeBlock("n4", 4, 7)),
			coords:     map[int][3]int{4: {0, 1, 0}, 8: {0, 0, 1}},
			nodes:      []string{"n1", "n2", "n3", "n4"},
			contiguous: true,
		},
		{
			name: "pipeline forced across leaves is counted",
			topo: four, size: Parallelism{TP: 8, PP: 3},
			gpus:       gpusOf(t, four, "n1", 0, 7, "n2", 0, 7, "n3", 0, 7),
			want:       concat(nodeBlock("n1", 0, 7), nodeBlock("n2", 0, 7), nodeBlock("n3", 0, 7)),
			nodes:      []string{"n1", "n2", "n3"},
			ppCross:    1,
			contiguous: true,
		},
		{
			name: "tp groups follow racks, not node ids",
			topo: racks, size: Parallelism{TP: 8},
			gpus:       gpusOf(t, racks, "a1", 0, 3, "b1", 0, 3, "a2", 0, 3, "b2", 0, 3),
			want:       concat(nodeBlock("a1", 0, 3), nodeBlock("a2", 0, 3), nodeBlock("b1", 0, 3), nodeBlock("b2", 0, 3)),
			nodes:      []string{"a1", "a2", "b1", "b2"},
			contiguous: true,
		},
		{
			name: "tp group larger than any domain is counted",
			topo: pcie, size: Parallelism{TP: 8},
			gpus:       gpusOf(t, pcie, "p1", 0, 3, "p2", 4, 7),
			want:       concat(nodeBlock("p1", 0, 3), nodeBlock("p2", 4, 7)),
			nodes:      []string{"p1", "p2"},
			tpCross:    1,
			rails:      4, // local rank k is rail k on p1 but rail 4+k on p2
			contiguous: true,
		},
		{
			name: "ranks follow rails inside a node",
			topo: rev, size: Parallelism{TP: 4},
			gpus:       gpusOf(t, rev, "fwd", 0, 3, "rev", 0, 3),
			want:       []string{"fwd/0", "fwd/1", "fwd/2", "fwd/3", "rev/3", "rev/2", "rev/1", "rev/0"},
			nodes:      []string{"fwd", "rev"},
			contiguous: true,
		},
		{
			name: "sizes default to pure data parallel",
			topo: rev, size: Parallelism{},
			gpus:       gpusOf(t, rev, "rev", 2, 3, "fwd", 1, 1),
			want:       []string{"fwd/1", "rev/3", "rev/2"},
			coords:     map[int][3]int{0: {0, 0, 0}, 2: {0, 0, 2}},
			nodes:      []string{"fwd", "rev"},
			rails:      1, // local rank 0: rail 1 on fwd, rail 0 on rev
			contiguous: true,
		},
		{
			name: "Megatron order splits a node's ranks",
			topo: four, size: Parallelism{TP: 2, PP: 2, DP: 2}, order: OrderTPDPPP,
			gpus: gpusOf(t, four, "n1", 0, 3, "n2", 0, 3),
			// Replica 0 = n1 (pp0 = 0,1; pp1 = 2,3); replica 1 = n2.
			// rank = tp + 2*(dp + 2*pp): n1 holds ranks 0,1,4,5.
			want:  []string{"n1/0", "n1/1", "n2/0", "n2/1", "n1/2", "n1/3", "n2/2", "n2/3"},
			nodes: []string{"n1", "n2"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			lay, err := tc.topo.OrderRanks(tc.gpus, tc.size, tc.order)
			if err != nil {
				t.Fatalf("OrderRanks: %v", err)
			}
			if diff := cmp.Diff(tc.want, placement(tc.topo, lay)); diff != "" {
				t.Errorf("rank -> GPU (-want +got):\n%s", diff)
			}
			for r, c := range tc.coords {
				rk := lay.Ranks[r]
				if got := [3]int{rk.TP, rk.PP, rk.DP}; got != c {
					t.Errorf("rank %d (tp, pp, dp) = %v, want %v", r, got, c)
				}
			}
			var nodes []string
			for _, n := range lay.Nodes {
				nodes = append(nodes, tc.topo.NodeName(n))
			}
			if diff := cmp.Diff(tc.nodes, nodes); diff != "" {
				t.Errorf("node order (-want +got):\n%s", diff)
			}
			got := [4]any{lay.TPGroupsCrossingDomain, lay.PPStepsCrossingLeaf, lay.RailMismatches, lay.ContiguousNodes}
			want := [4]any{tc.tpCross, tc.ppCross, tc.rails, tc.contiguous}
			if got != want {
				t.Errorf("quality (tp cross, pp cross, rails, contiguous) = %v, want %v", got, want)
			}
			checkLayout(t, tc.topo, tc.gpus, lay)
		})
	}
}

// checkLayout asserts what every layout must satisfy.
func checkLayout(t *testing.T, topo *Topology, gpus []GPURef, lay RankLayout) {
	t.Helper()
	sz := lay.Size
	if len(lay.Ranks) != sz.TP*sz.PP*sz.DP || len(lay.Ranks) != len(gpus) {
		t.Fatalf("%d ranks for %v and %d GPUs", len(lay.Ranks), sz, len(gpus))
	}
	used := map[GPURef]bool{}
	coords := map[[3]int]bool{}
	local := map[NodeID]int{}
	for r, rk := range lay.Ranks {
		if used[rk.GPU] {
			t.Fatalf("GPU %v used twice", rk.GPU)
		}
		used[rk.GPU] = true
		c := [3]int{rk.TP, rk.PP, rk.DP}
		if coords[c] || rk.TP >= sz.TP || rk.PP >= sz.PP || rk.DP >= sz.DP {
			t.Fatalf("rank %d: bad or repeated coordinates %v for %v", r, c, sz)
		}
		coords[c] = true
		want := rk.TP + sz.TP*(rk.PP+sz.PP*rk.DP)
		if lay.Order == OrderTPDPPP {
			want = rk.TP + sz.TP*(rk.DP+sz.DP*rk.PP)
		}
		if want != r {
			t.Fatalf("rank %d has coordinates %v, which number as %d under %v", r, c, want, lay.Order)
		}
		if lay.Nodes[rk.NodeRank] != rk.GPU.Node {
			t.Fatalf("rank %d: NodeRank %d is node %d, but its GPU is on %d", r, rk.NodeRank, lay.Nodes[rk.NodeRank], rk.GPU.Node)
		}
		if rk.LocalRank != local[rk.GPU.Node] {
			t.Fatalf("rank %d: LocalRank %d, want %d", r, rk.LocalRank, local[rk.GPU.Node])
		}
		local[rk.GPU.Node]++
	}
	for _, g := range gpus {
		if !used[g] {
			t.Fatalf("GPU %v not used", g)
		}
	}
}

func TestOrderRanksMegatronRails(t *testing.T) {
	// Under the Megatron order a node's ranks are not contiguous, and local
	// ranks then follow rank order, not GPU order.
	four := fourNodes(t)
	lay, err := four.OrderRanks(gpusOf(t, four, "n1", 0, 3, "n2", 0, 3), Parallelism{TP: 2, PP: 2, DP: 2}, OrderTPDPPP)
	check(t, err)
	var locals []int
	for _, r := range lay.Ranks {
		locals = append(locals, r.LocalRank)
	}
	if diff := cmp.Diff([]int{0, 1, 0, 1, 2, 3, 2, 3}, locals); diff != "" {
		t.Errorf("local ranks (-want +got):\n%s", diff)
	}
}

func TestOrderRanksErrors(t *testing.T) {
	four := fourNodes(t)
	n1 := GPURef{0, 0}
	tests := []struct {
		name string
		gpus []GPURef
		size Parallelism
		want string
	}{
		{"no GPUs", nil, Parallelism{}, "order ranks: no GPUs"},
		{"product mismatch", gpusOf(t, four, "n1", 0, 7), Parallelism{TP: 4, PP: 1, DP: 3}, "order ranks: tp=4 × pp=1 × dp=3 = 12 ranks, but 8 GPUs"},
		{"not divisible", gpusOf(t, four, "n1", 0, 7), Parallelism{TP: 3}, "order ranks: 8 GPUs do not divide into tp=3 × pp=1"},
		{"negative", gpusOf(t, four, "n1", 0, 7), Parallelism{TP: -1}, "order ranks: negative size in tp=-1 pp=0 dp=0"},
		{"duplicate", []GPURef{n1, {1, 0}, n1, {2, 0}}, Parallelism{}, `order ranks: GPU 0/0 (node "n1") given twice`},
		{"unknown node", []GPURef{{9, 0}}, Parallelism{}, "order ranks: GPU 9/0: no node 9"},
		{"GPU out of range", []GPURef{{0, 8}}, Parallelism{}, `order ranks: GPU 0/8: node "n1" has 8 GPUs`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := four.OrderRanks(tc.gpus, tc.size, OrderTPPPDP)
			if err == nil || err.Error() != tc.want {
				t.Errorf("error = %v, want %q", err, tc.want)
			}
		})
	}
	if _, err := four.OrderRanks(gpusOf(t, four, "n1", 0, 0), Parallelism{}, RankOrder(7)); err == nil {
		t.Error("invalid RankOrder accepted")
	}
}

func TestRankOrderText(t *testing.T) {
	tests := []struct {
		in   string
		want RankOrder
	}{
		{"tp-pp-dp", OrderTPPPDP}, {"tp-cp-ep-pp-dp", OrderTPPPDP},
		{"tp-dp-pp", OrderTPDPPP}, {"tp-cp-ep-dp-pp", OrderTPDPPP},
	}
	for _, tc := range tests {
		got, err := ParseRankOrder(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("ParseRankOrder(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
	if _, err := ParseRankOrder("dp-tp-pp"); err == nil {
		t.Error("ParseRankOrder accepted dp-tp-pp")
	}
	var o RankOrder = OrderTPDPPP
	if err := o.UnmarshalText(nil); err != nil || o != OrderTPPPDP {
		t.Errorf("empty text = %v, %v; want the default", o, err)
	}
	text, _ := OrderTPDPPP.MarshalText()
	if string(text) != "tp-dp-pp" {
		t.Errorf("MarshalText = %q", text)
	}
}

// TestOrderRanksProperties places random gangs on a GB200-like cluster and
// checks the invariants, the "TP never crosses a domain when it need not"
// rule, and that the input order does not matter.
func TestOrderRanksProperties(t *testing.T) {
	topo, err := Uniform(UniformSpec{Nodes: 144, GPUsPerNode: 4, NodesPerLeaf: 16, LeavesPerSpine: 3, NodesPerDomain: 18, Rails: 4})
	check(t, err)
	rng := rand.New(rand.NewPCG(1, 2))
	iters := 300
	if testing.Short() {
		iters = 50
	}
	for it := range iters {
		tp := []int{1, 2, 4, 8}[rng.IntN(4)]
		pp := []int{1, 2, 3, 4}[rng.IntN(4)]
		dp := 1 + rng.IntN(6)
		n := tp * pp * dp
		// Pick whole TP-sized chunks of domains, so that a perfect layout
		// exists when tp divides each domain's share.
		var gpus []GPURef
		perm := rng.Perm(topo.NumGPUs())
		aligned := rng.IntN(2) == 0
		if aligned {
			// Take tp consecutive GPUs of one domain at a time.
			doms := rng.Perm(topo.NumDomains())
			for _, d := range doms {
				var dg []GPURef
				for _, node := range topo.DomainNodes(DomainID(d)) {
					for g := range topo.GPUs(node) {
						dg = append(dg, GPURef{node, int32(g)})
					}
				}
				for i := 0; i+tp <= len(dg) && len(gpus) < n; i += tp {
					gpus = append(gpus, dg[i:i+tp]...)
				}
				if len(gpus) == n {
					break
				}
			}
		} else {
			for _, p := range perm[:n] {
				node := NodeID(p / 4)
				gpus = append(gpus, GPURef{node, int32(p % 4)})
			}
		}
		size := Parallelism{TP: tp, PP: pp, DP: dp}
		order := RankOrder(rng.IntN(2))
		name := fmt.Sprintf("%d/tp%d-pp%d-dp%d-%v-aligned=%v", it, tp, pp, dp, order, aligned)
		t.Run(name, func(t *testing.T) {
			lay, err := topo.OrderRanks(gpus, size, order)
			check(t, err)
			checkLayout(t, topo, gpus, lay)
			if aligned && lay.TPGroupsCrossingDomain != 0 {
				t.Errorf("%d TP groups cross a domain although each domain's share divides by tp", lay.TPGroupsCrossingDomain)
			}
			for r := 0; r < len(lay.Ranks); r += tp {
				dom := topo.Domain(lay.Ranks[r].GPU.Node)
				crosses := false
				for _, rk := range lay.Ranks[r : r+tp] {
					crosses = crosses || topo.Domain(rk.GPU.Node) != dom
				}
				if order == OrderTPPPDP && crosses && lay.TPGroupsCrossingDomain == 0 {
					t.Errorf("TP group at rank %d crosses a domain but none was counted", r)
				}
			}
			shuffled := slices.Clone(gpus)
			rng.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
			again, err := topo.OrderRanks(shuffled, size, order)
			check(t, err)
			if diff := cmp.Diff(lay, again); diff != "" {
				t.Errorf("layout depends on input order (-first +second):\n%s", diff)
			}
		})
	}
}
