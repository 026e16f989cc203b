package scheduler

import (
	"cmp"
	"math/bits"
	"slices"

	"github.com/gangway/gangway/internal/topology"
)

// pick is part of an allocation: amount units (or ranks) from item id.
type pick struct {
	id     int32
	amount int
}

// cand is a child group or node that may take part of a gang.
type cand struct {
	id   int32
	cap  int
	free int32 // tie-break: fuller first
}

// pickFewest covers need with the fewest items: the largest first, and the
// last one the best fit (the smallest that still covers what is left).
// Items are sorted in place. It returns nil when they do not cover need.
func pickFewest(items []cand, need int, out []pick) []pick {
	slices.SortFunc(items, func(a, b cand) int {
		if a.cap != b.cap {
			return cmp.Compare(b.cap, a.cap)
		}
		if a.free != b.free {
			return cmp.Compare(a.free, b.free)
		}
		return cmp.Compare(a.id, b.id)
	})
	for i := 0; need > 0; i++ {
		if i >= len(items) || items[i].cap <= 0 {
			return nil
		}
		j := -1
		for k := i; k < len(items) && items[k].cap >= need; k++ {
			if j < 0 || items[k].cap < items[j].cap {
				j = k
			}
		}
		if j >= 0 {
			return append(out, pick{items[j].id, need})
		}
		out = append(out, pick{items[i].id, items[i].cap})
		need -= items[i].cap
	}
	return out
}

// capOf returns how many units of g fit in group grp of level L.
func (c *cluster) capOf(g *gang, L int, grp int32) int {
	if L == lvNode {
		return c.unitsOn(g, grp)
	}
	if g.tpAcross && L >= lvDom {
		if L > lvDom {
			lo, hi := c.children(L, grp)
			sum := 0
			for ch := lo; ch < hi; ch++ {
				sum += c.capOf(g, L-1, ch)
			}
			return sum
		}
		ranks := 0
		if g.flat {
			for k, cnt := range c.hist[lvDom][int(grp)*c.hw:][:c.hw] {
				ranks += int(cnt) * int(g.rk[k])
			}
		} else {
			lo, hi := c.span(lvDom, grp)
			for n := lo; n < hi; n++ {
				ranks += c.ranksOn(g, n)
			}
		}
		return ranks / g.tp
	}
	sum := 0
	if !g.flat {
		lo, hi := c.span(L, grp)
		for n := lo; n < hi; n++ {
			sum += c.unitsOn(g, n)
		}
		return sum
	}
	for k, cnt := range c.hist[L][int(grp)*c.hw:][:c.hw] {
		sum += int(cnt) * int(g.f[k])
	}
	return sum
}

// fuller reports whether group a is fuller than group b at level L: fewer
// free GPUs, then fewer free in its leaf and spine, then the lower id. It
// is the tie-break that keeps emptier groups whole.
func (c *cluster) fuller(L int, a, b int32) bool {
	if fa, fb := c.groupFree(L, a), c.groupFree(L, b); fa != fb {
		return fa < fb
	}
	na, nb := c.start[L][a], c.start[L][b]
	if L == lvNode {
		na, nb = a, b
	}
	for up := max(L+1, lvLeaf); up < lvRoot; up++ {
		ga, gb := c.grp[up][na], c.grp[up][nb]
		if fa, fb := c.gfree[up][ga], c.gfree[up][gb]; fa != fb {
			return fa < fb
		}
	}
	return a < b
}

// bestNode returns the node inside group (Lg, gg) that best fits need
// units: the fewest free GPUs that fit, then (Topology) the fullest leaf
// and spine, then the lowest id.
func (c *cluster) bestNode(g *gang, strat Strategy, need int, Lg int, gg int32) (int32, bool) {
	lo, hi := c.span(Lg, gg)
	if Lg == lvNode {
		return gg, c.capOf(g, lvNode, gg) >= need
	}
	if strat == Topology && c.fm != nil {
		return c.bestNodeFrag(g, need, Lg, gg)
	}
	if !g.flat || Lg < lvLeaf {
		best := int32(-1)
		for n := lo; n < hi; n++ {
			if c.unitsOn(g, n) < need {
				continue
			}
			switch {
			case best < 0:
				best = n
			case c.nfree[n] != c.nfree[best]:
				if c.nfree[n] < c.nfree[best] {
					best = n
				}
			case strat == Topology && c.fuller(lvNode, n, best):
				best = n
			}
		}
		return best, best >= 0
	}
	h := c.hist[Lg][int(gg)*c.hw:][:c.hw]
	k := -1
	for kk := 1; kk < c.hw; kk++ {
		if h[kk] > 0 && int(g.f[kk]) >= need {
			k = kk
			break
		}
	}
	if k < 0 {
		return -1, false
	}
	return c.nodeWithFree(k, strat, Lg, gg)
}

// nodeWithFree returns a node with exactly k free GPUs inside group (Lg,
// gg), Lg at least a leaf, which must hold one: (Topology) in the fullest
// leaf with such a node, the fullest NVLink domain, then the lowest id.
func (c *cluster) nodeWithFree(k int, strat Strategy, Lg int, gg int32) (int32, bool) {
	lo, hi := c.span(Lg, gg)
	llo, lhi := c.grp[lvLeaf][lo], c.grp[lvLeaf][hi-1]+1
	leaf := int32(-1)
	for l := llo; l < lhi; l++ {
		if c.hist[lvLeaf][int(l)*c.hw+k] == 0 {
			continue
		}
		if leaf < 0 {
			leaf = l
			if strat != Topology {
				break
			}
			continue
		}
		if c.fuller(lvLeaf, l, leaf) {
			leaf = l
		}
	}
	nlo, nhi := c.span(lvLeaf, leaf)
	best := int32(-1)
	for n := nlo; n < nhi; n++ {
		if int(c.nfree[n]) != k || !c.ok[n] {
			continue
		}
		if best < 0 || (strat == Topology && c.multi && c.fuller(lvDom, c.grp[lvDom][n], c.grp[lvDom][best])) {
			best = n
			if strat != Topology || !c.multi {
				break
			}
		}
	}
	return best, best >= 0
}

// bestGroup returns the group of level L inside group (Lg, gg) that best
// fits need units: the smallest capacity that fits, then the fullest.
func (c *cluster) bestGroup(g *gang, strat Strategy, need int, L int, Lg int, gg int32) (int32, bool) {
	if L == lvNode {
		return c.bestNode(g, strat, need, Lg, gg)
	}
	if L == Lg {
		return gg, c.capOf(g, L, gg) >= need
	}
	lo, hi := c.span(Lg, gg)
	if lo == hi {
		return -1, false
	}
	best, bestCap := int32(-1), 0
	for grp := c.grp[L][lo]; grp <= c.grp[L][hi-1]; grp++ {
		if c.gfree[L][grp] < int32(need) && !g.tpAcross {
			// Fewer free GPUs than units: cannot fit (a unit is at least
			// one GPU).
			continue
		}
		cp := c.capOf(g, L, grp)
		if cp < need {
			continue
		}
		if best < 0 || cp < bestCap || (cp == bestCap && c.fuller(L, grp, best)) {
			best, bestCap = grp, cp
		}
	}
	return best, best >= 0
}

// find chooses where g goes inside group (Lg, gg), without changing c. It
// returns picks of (node, ranks), or nil.
func (c *cluster) find(g *gang, strat Strategy, Lg int, gg int32) []pick {
	need := g.units
	if c.capOf(g, Lg, gg) < need {
		return nil
	}
	maxL := min(g.required, Lg)
	if strat == Topology {
		for L := lvNode; L <= maxL; L++ {
			if L == lvDom && !c.multi {
				continue
			}
			if grp, ok := c.bestGroup(g, strat, need, L, Lg, gg); ok {
				return c.alloc(g, L, grp, need, nil)
			}
		}
		return nil
	}
	// BestFit and Consolidate: one node if it fits, else within the
	// preferred group, else within the required one.
	if n, ok := c.bestNode(g, BestFit, need, Lg, gg); ok {
		return []pick{{n, need * g.uRanks}}
	}
	for _, L := range []int{g.preferred, maxL} {
		if L > maxL {
			continue
		}
		grp, ok := c.bestGroup(g, BestFit, need, L, Lg, gg)
		if !ok {
			continue
		}
		if p := c.allocFlat(g, strat, L, grp, need); p != nil {
			return p
		}
	}
	return nil
}

// alloc spreads need units over group grp of level L: at each level the
// fewest children, the last the best fit. It returns (node, ranks) picks.
func (c *cluster) alloc(g *gang, L int, grp int32, need int, out []pick) []pick {
	if L == lvNode {
		return append(out, pick{grp, need * g.uRanks})
	}
	if g.tpAcross && L == lvDom {
		lo, hi := c.span(L, grp)
		items := make([]cand, 0, hi-lo)
		for n := lo; n < hi; n++ {
			if r := c.ranksOn(g, n); r > 0 {
				items = append(items, cand{n, r, int32(c.nfree[n])})
			}
		}
		return pickFewest(items, need*g.tp, out)
	}
	lo, hi := c.children(L, grp)
	down := L - 1
	if down == lvDom && !c.multi {
		down = lvNode
	}
	var items []cand
	if down == L-1 {
		items = make([]cand, 0, hi-lo)
		for ch := lo; ch < hi; ch++ {
			if cp := c.capOf(g, down, ch); cp > 0 {
				items = append(items, cand{ch, cp, int32(c.groupFree(down, ch))})
			}
		}
	} else {
		nlo, nhi := c.span(L, grp)
		items = make([]cand, 0, nhi-nlo)
		for n := nlo; n < nhi; n++ {
			if cp := c.capOf(g, lvNode, n); cp > 0 {
				items = append(items, cand{n, cp, int32(c.nfree[n])})
			}
		}
	}
	picks := pickFewest(items, need, nil)
	if picks == nil {
		return nil
	}
	for _, p := range picks {
		out = c.alloc(g, down, p.id, p.amount, out)
		if out == nil {
			return nil
		}
	}
	return out
}

// allocFlat is BestFit's and Consolidate's multi-node allocation inside a
// group: nodes only, ignoring leaves and spines.
func (c *cluster) allocFlat(g *gang, strat Strategy, L int, grp int32, need int) []pick {
	lo, hi := c.span(L, grp)
	if strat == Consolidate {
		// Whole idle nodes only, in id order.
		var out []pick
		for n := lo; n < hi && need > 0; n++ {
			if !g.eligible(c, n) || c.nfree[n] != c.total[n] {
				continue
			}
			if u := c.unitsOn(g, n); u > 0 {
				u = min(u, need)
				out = append(out, pick{n, u * g.uRanks})
				need -= u
			}
		}
		if need > 0 {
			return nil
		}
		return out
	}
	items := make([]cand, 0, hi-lo)
	for n := lo; n < hi; n++ {
		if cp := c.capOf(g, lvNode, n); cp > 0 && !g.tpAcross {
			items = append(items, cand{n, cp, 0})
		}
	}
	if g.tpAcross {
		// TP groups across nodes of a domain: allocate by domain pieces.
		return c.alloc(g, L, grp, need, nil)
	}
	picks := pickFewest(items, need, nil)
	for i := range picks {
		picks[i].amount *= g.uRanks
	}
	return picks
}

// chooseGPUs decides which GPUs of each picked node the gang gets,
// without changing c: per pick, the GPU indices in rank order. Within a
// node it prefers the rails that the gang's other partly used nodes use,
// then low rails, so ranks with the same local index share a rail; on
// nodes without NVLink it keeps a rank's GPUs on one NUMA node.
func (c *cluster) chooseGPUs(g *gang, picks []pick) [][]int {
	slices.SortFunc(picks, func(a, b pick) int { return cmp.Compare(a.id, b.id) })
	// railCount[r]: on how many of the partly taken nodes rail r is free;
	// rails free on most of them are chosen first, so the nodes agree.
	var railCount [64]int
	for _, p := range picks {
		if p.amount*g.gpr >= int(c.nfree[p.id]) {
			continue
		}
		for m := c.free[p.id]; m != 0; m &= m - 1 {
			if r := c.railOf(p.id, bits.TrailingZeros64(m)); r >= 0 && r < 64 {
				railCount[r]++
			}
		}
	}
	var railPref uint64
	out := make([][]int, len(picks))
	for i, p := range picks {
		n := p.id
		need := p.amount * g.gpr
		order := make([]int, 0, c.nfree[n])
		for m := c.free[n]; m != 0; m &= m - 1 {
			order = append(order, bits.TrailingZeros64(m))
		}
		if len(order) > need {
			nvlink := c.topo.NVLink(topology.NodeID(n))
			key := func(gpu int) [5]int {
				r := c.railOf(n, gpu)
				pref, count := 1, 0
				if r >= 0 && r < 64 {
					count = railCount[r]
					if railPref&(1<<uint(r)) != 0 {
						pref = 0
					}
				}
				numa := 0
				if !nvlink {
					numa = c.topo.NUMA(topology.GPURef{Node: topology.NodeID(n), GPU: int32(gpu)})
				}
				if r < 0 {
					r = 1 << 20
				}
				return [5]int{-count, pref, numa, r, gpu}
			}
			slices.SortFunc(order, func(a, b int) int {
				ka, kb := key(a), key(b)
				return slices.Compare(ka[:], kb[:])
			})
		}
		order = order[:min(need, len(order))]
		if len(order) < int(c.total[n]) {
			for _, gpu := range order {
				if r := c.railOf(n, gpu); r >= 0 && r < 64 {
					railPref |= 1 << uint(r)
				}
			}
		}
		out[i] = order
	}
	return out
}

// commit takes the GPUs of picks on c and returns the gang's placement,
// ranks ordered by topology (see topology.OrderRanks), and the GPUs taken
// per node.
func (c *cluster) commit(g *gang, picks []pick) (Placement, []nodeMask) {
	pl := Placement{JobID: g.req.JobID}
	chosen := c.chooseGPUs(g, picks)
	type rankSlot struct {
		node int32
		gpus []int
	}
	slots := make([]rankSlot, 0, g.req.Ranks)
	parts := make([]nodeMask, len(picks))
	backing := make([]int, 0, g.gpus)
	for i, p := range picks {
		order := chosen[i]
		var mask uint64
		for _, gpu := range order {
			mask |= 1 << uint(gpu)
		}
		parts[i] = nodeMask{node: p.id, mask: mask, cpu: int64(p.amount) * g.cpuPR, mem: int64(p.amount) * g.memPR}
		c.takeAll(parts[i])
		for j := 0; j+g.gpr <= len(order); j += g.gpr {
			at := len(backing)
			backing = append(backing, order[j:j+g.gpr]...)
			gs := backing[at:len(backing):len(backing)]
			slices.Sort(gs)
			slots = append(slots, rankSlot{p.id, gs})
		}
	}
	slices.SortFunc(slots, func(a, b rankSlot) int {
		if a.node != b.node {
			return cmp.Compare(a.node, b.node)
		}
		return cmp.Compare(a.gpus[0], b.gpus[0])
	})
	pl.Ranks = make([]Slot, len(slots))
	done := false
	if len(slots) > 1 {
		reps := make([]topology.GPURef, len(slots))
		for i, s := range slots {
			reps[i] = topology.GPURef{Node: topology.NodeID(s.node), GPU: int32(s.gpus[0])}
		}
		if lay, err := c.topo.OrderRanks(reps, g.size, g.req.RankOrder); err == nil {
			// Slots are in node order and, within a node, in GPU order of
			// their first GPU: find each rank's slot by binary search.
			for r, rk := range lay.Ranks {
				k, _ := slices.BinarySearchFunc(reps, rk.GPU, func(a, b topology.GPURef) int {
					if a.Node != b.Node {
						return cmp.Compare(a.Node, b.Node)
					}
					return cmp.Compare(a.GPU, b.GPU)
				})
				s := slots[k]
				pl.Ranks[r] = Slot{Node: c.topo.NodeName(topology.NodeID(s.node)), GPUs: s.gpus, TP: rk.TP, PP: rk.PP, DP: rk.DP,
					CPUMillis: g.cpuPR, MemoryBytes: g.memPR}
			}
			pl.TPGroupsCrossingDomain = lay.TPGroupsCrossingDomain
			pl.PPStepsCrossingLeaf = lay.PPStepsCrossingLeaf
			pl.RailMismatches = lay.RailMismatches
			done = true
		}
	}
	if !done {
		for i, s := range slots {
			pl.Ranks[i] = Slot{Node: c.topo.NodeName(topology.NodeID(s.node)), GPUs: s.gpus, DP: i, CPUMillis: g.cpuPR, MemoryBytes: g.memPR}
		}
	}
	pl.Nodes, pl.Leaves, pl.Spines = c.spanCounts(picks)
	return pl, parts
}

// spanCounts counts the nodes, leaves and spines of picks sorted by node.
func (c *cluster) spanCounts(picks []pick) (nodes, leaves, spines int) {
	lastLeaf, lastSpine := int32(-1), int32(-1)
	for i, p := range picks {
		if i > 0 && p.id == picks[i-1].id {
			continue
		}
		nodes++
		if l := c.grp[lvLeaf][p.id]; l != lastLeaf {
			leaves++
			lastLeaf = l
		}
		if s := c.grp[lvSpine][p.id]; s != lastSpine {
			spines++
			lastSpine = s
		}
	}
	return nodes, leaves, spines
}

// masks returns the GPUs picks would take, per node, without taking them:
// the same choice commit makes.
func (c *cluster) masks(g *gang, picks []pick) []nodeMask {
	chosen := c.chooseGPUs(g, picks)
	out := make([]nodeMask, len(picks))
	for i, p := range picks {
		out[i].node = p.id
		out[i].cpu, out[i].mem = int64(p.amount)*g.cpuPR, int64(p.amount)*g.memPR
		for _, gpu := range chosen[i] {
			out[i].mask |= 1 << uint(gpu)
		}
	}
	return out
}

// nodeMask is a set of GPUs on one node, and the CPU and memory that go
// with them.
type nodeMask struct {
	node     int32
	mask     uint64
	cpu, mem int64
}
