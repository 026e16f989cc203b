package topology

import (
	"cmp"
	"fmt"
	"slices"
)

// Parallelism is a gang's tensor-, pipeline- and data-parallel sizes.
// TP*PP*DP is the number of ranks, one GPU each. A zero size means "not
// given": TP and PP default to 1, and DP to whatever makes the product equal
// the number of GPUs.
//
// Context parallelism (CP) and expert parallelism (EP) are not modelled: to
// place a CP×TP job, pass TP*CP as TP (Megatron puts CP right next to TP);
// EP in Megatron subdivides the data-parallel ranks and does not change
// the dense layout.
type Parallelism struct {
	TP, PP, DP int
}

// RankOrder says how (tp, pp, dp) coordinates turn into global rank
// numbers. It does not change which GPU gets which coordinates (the topology
// decides that); it only numbers them to match what the training framework
// will compute from RANK.
type RankOrder uint8

const (
	// OrderTPPPDP numbers tp fastest, then pp, then dp slowest:
	//
	//	rank = tp + TP*(pp + PP*dp)
	//
	// It is Megatron-LM's order under --use-tp-pp-dp-mapping
	// ("tp-cp-ep-pp-dp"), a torch DeviceMesh with dimensions
	// ("dp", "pp", "tp"), and Llama 3's [TP, CP, PP, DP]. Each data-parallel replica is a
	// contiguous block of TP*PP ranks, so with whole nodes per replica every
	// node's ranks are contiguous, as torchrun's one-process-per-node launch
	// needs. It is the default (zero value).
	OrderTPPPDP RankOrder = iota
	// OrderTPDPPP numbers tp fastest, then dp, then pp slowest:
	//
	//	rank = tp + TP*(dp + DP*pp)
	//
	// It is Megatron-LM's default order "tp-cp-ep-dp-pp" (CP=EP=1).
	// Megatron computes its groups from RANK with this order, so the
	// coordinates gangway chose are the ones Megatron sees.
	OrderTPDPPP
)

var rankOrderNames = [...]string{OrderTPPPDP: "tp-pp-dp", OrderTPDPPP: "tp-dp-pp"}

// String returns "tp-pp-dp" or "tp-dp-pp".
func (o RankOrder) String() string {
	if int(o) < len(rankOrderNames) {
		return rankOrderNames[o]
	}
	return fmt.Sprintf("RankOrder(%d)", uint8(o))
}

// ParseRankOrder parses "tp-pp-dp" or "tp-dp-pp", and Megatron-LM's
// spellings "tp-cp-ep-pp-dp" and "tp-cp-ep-dp-pp".
func ParseRankOrder(s string) (RankOrder, error) {
	switch s {
	case "tp-pp-dp", "tp-cp-ep-pp-dp":
		return OrderTPPPDP, nil
	case "tp-dp-pp", "tp-cp-ep-dp-pp":
		return OrderTPDPPP, nil
	}
	return 0, fmt.Errorf("unknown rank order %q: want tp-pp-dp or tp-dp-pp (Megatron: tp-cp-ep-pp-dp or tp-cp-ep-dp-pp)", s)
}

// MarshalText encodes the order's name.
func (o RankOrder) MarshalText() ([]byte, error) {
	if int(o) >= len(rankOrderNames) {
		return nil, fmt.Errorf("invalid rank order %d", uint8(o))
	}
	return []byte(rankOrderNames[o]), nil
}

// UnmarshalText decodes an order name; "" decodes as the default.
func (o *RankOrder) UnmarshalText(b []byte) error {
	if len(b) == 0 {
		*o = OrderTPPPDP
		return nil
	}
	v, err := ParseRankOrder(string(b))
	if err != nil {
		return err
	}
	*o = v
	return nil
}

// Rank is one process of a gang: its GPU and its place in the grid.
type Rank struct {
	GPU GPURef
	// TP, PP and DP are the rank's coordinates (GANGWAY_TP_RANK, ...).
	TP, PP, DP int
	// NodeRank is the index of the rank's node in RankLayout.Nodes.
	NodeRank int
	// LocalRank is the rank's index among the gang's ranks on its node, in
	// global rank order (LOCAL_RANK).
	LocalRank int
}

// RankLayout is the result of OrderRanks: the gang's ranks in global rank
// order, and how well the placement suits the grid. The quality counts are
// outcomes, not errors: a placement the scheduler could not make better
// still launches.
type RankLayout struct {
	// Ranks is indexed by global rank (RANK).
	Ranks []Rank
	// Nodes lists the gang's nodes in NODE_RANK order: by lowest rank.
	Nodes []NodeID
	// Size is the resolved parallelism (no zeros).
	Size  Parallelism
	Order RankOrder
	// TPGroupsCrossingDomain counts tensor-parallel groups whose GPUs are
	// not all in one NVLink domain. The placement leaves no better choice.
	TPGroupsCrossingDomain int
	// PPStepsCrossingLeaf counts adjacent pipeline stages (pp, pp+1) of one
	// replica whose first GPUs are under different known leaves.
	PPStepsCrossingLeaf int
	// RailMismatches counts ranks whose rail differs from the rail most
	// ranks with the same LocalRank use (ranks with unknown rails are not
	// counted). 0 means local rank k is on the same rail on every node.
	RailMismatches int
	// ContiguousNodes is true when every node's ranks are consecutive
	// numbers, which one-process-per-node launchers (torchrun) require.
	ContiguousNodes bool
}

// OrderRanks assigns a gang's GPUs to ranks so that the parallel grid
// follows the topology, and numbers the ranks with order.
//
// The physical layout, whatever the numbering: tensor-parallel groups are
// innermost and never cross an NVLink domain when the placement allows it;
// a data-parallel replica's pipeline stages come next, consecutive stages
// in the same NVLink domain, else under the same leaf, else the same spine;
// data parallelism is outermost, replicas numbered in locality order so
// neighbouring replicas are close. Within a node GPUs are taken in rail
// order (then GPU index), so that a given TP index, and a given LocalRank,
// uses the same rail on every node.
//
// gpus must be distinct GPUs of t, one per rank, in any order; the result
// does not depend on their order. An error means bad input (sizes that do
// not multiply to len(gpus), an unknown or repeated GPU); how well the
// placement fits is reported in the layout's counts.
func (t *Topology) OrderRanks(gpus []GPURef, size Parallelism, order RankOrder) (RankLayout, error) {
	n := len(gpus)
	if n == 0 {
		return RankLayout{}, fmt.Errorf("order ranks: no GPUs")
	}
	if int(order) >= len(rankOrderNames) {
		return RankLayout{}, fmt.Errorf("order ranks: invalid rank order %d", uint8(order))
	}
	sz, err := resolveSize(size, n)
	if err != nil {
		return RankLayout{}, fmt.Errorf("order ranks: %w", err)
	}

	// Locality order: node ids already follow spine, leaf and domain; within
	// a node, rail then GPU index. Each GPU packs into one sortable int64.
	keys := make([]int64, n)
	for i, g := range gpus {
		if g.Node < 0 || int(g.Node) >= t.NumNodes() {
			return RankLayout{}, fmt.Errorf("order ranks: GPU %v: no node %d", g, g.Node)
		}
		if g.GPU < 0 || int(g.GPU) >= t.GPUs(g.Node) {
			return RankLayout{}, fmt.Errorf("order ranks: GPU %v: node %q has %d GPUs", g, t.nodeName[g.Node], t.GPUs(g.Node))
		}
		rail := int64(t.Rail(g))
		if rail < 0 {
			rail = 1 << 16
		}
		keys[i] = int64(g.Node)<<34 | rail<<17 | int64(g.GPU)
	}
	slices.Sort(keys)
	sorted := make([]GPURef, n)
	for i, k := range keys {
		sorted[i] = GPURef{NodeID(k >> 34), int32(k & (1<<17 - 1))}
		if i > 0 && sorted[i] == sorted[i-1] {
			return RankLayout{}, fmt.Errorf("order ranks: GPU %v (node %q) given twice", sorted[i], t.nodeName[sorted[i].Node])
		}
	}

	// Tensor-parallel groups: within a domain, else leaf, else spine.
	ngroups := []int{t.NumDomains(), t.NumLeaves(), t.NumSpines()}
	levelKeys := func(first func(i int) GPURef, m int) [][]int32 {
		k := [][]int32{make([]int32, m), make([]int32, m), make([]int32, m)}
		for i := range m {
			node := &t.node[first(i).Node]
			k[0][i] = int32(node.domain)
			k[1][i] = int32(node.leaf)
			k[2][i] = int32(node.spine)
		}
		return k
	}
	tpChunks, tpLevel := chunk(n, sz.TP, levelKeys(func(i int) GPURef { return sorted[i] }, n), ngroups)
	crossing := 0
	for _, lv := range tpLevel {
		if lv > 0 {
			crossing++
		}
	}
	// Pipelines: consecutive TP groups, keyed by their first GPU.
	pipes, _ := chunk(len(tpChunks), sz.PP, levelKeys(func(i int) GPURef { return sorted[tpChunks[i][0]] }, len(tpChunks)), ngroups)

	lay := RankLayout{
		Ranks:                  make([]Rank, n),
		Size:                   sz,
		Order:                  order,
		TPGroupsCrossingDomain: crossing,
	}
	for dp, pipe := range pipes {
		prevLeaf := NoLeaf
		for pp, gi := range pipe {
			group := tpChunks[gi]
			leaf := t.node[sorted[group[0]].Node].leaf
			if pp > 0 && leaf >= 0 && prevLeaf >= 0 && leaf != prevLeaf {
				lay.PPStepsCrossingLeaf++
			}
			prevLeaf = leaf
			for tp, idx := range group {
				var r int
				if order == OrderTPDPPP {
					r = tp + sz.TP*(dp+sz.DP*pp)
				} else {
					r = tp + sz.TP*(pp+sz.PP*dp)
				}
				lay.Ranks[r] = Rank{GPU: sorted[idx], TP: tp, PP: pp, DP: dp}
			}
		}
	}

	// Node ranks, local ranks, contiguity, rails.
	nodeRank := make([]int32, t.NumNodes()) // node rank + 1; 0: not seen
	local := []int{}
	lay.ContiguousNodes = true
	for r := range lay.Ranks {
		node := lay.Ranks[r].GPU.Node
		nr := int(nodeRank[node]) - 1
		if nr < 0 {
			nr = len(lay.Nodes)
			nodeRank[node] = int32(nr + 1)
			lay.Nodes = append(lay.Nodes, node)
			local = append(local, 0)
		} else if lay.Ranks[r-1].GPU.Node != node {
			lay.ContiguousNodes = false
		}
		lay.Ranks[r].NodeRank = nr
		lay.Ranks[r].LocalRank = local[nr]
		local[nr]++
	}
	lay.RailMismatches = t.railMismatches(lay.Ranks)
	return lay, nil
}

func resolveSize(s Parallelism, n int) (Parallelism, error) {
	if s.TP < 0 || s.PP < 0 || s.DP < 0 {
		return s, fmt.Errorf("negative size in tp=%d pp=%d dp=%d", s.TP, s.PP, s.DP)
	}
	if s.TP == 0 {
		s.TP = 1
	}
	if s.PP == 0 {
		s.PP = 1
	}
	if s.DP == 0 {
		if n%(s.TP*s.PP) != 0 {
			return s, fmt.Errorf("%d GPUs do not divide into tp=%d × pp=%d", n, s.TP, s.PP)
		}
		s.DP = n / (s.TP * s.PP)
	}
	if s.TP*s.PP*s.DP != n {
		return s, fmt.Errorf("tp=%d × pp=%d × dp=%d = %d ranks, but %d GPUs", s.TP, s.PP, s.DP, s.TP*s.PP*s.DP, n)
	}
	return s, nil
}

// railMismatches counts ranks whose known rail differs from the most common
// known rail among ranks with the same LocalRank.
func (t *Topology) railMismatches(ranks []Rank) int {
	maxLocal, maxRail := 0, -1
	for _, r := range ranks {
		maxLocal = max(maxLocal, r.LocalRank)
		maxRail = max(maxRail, t.Rail(r.GPU))
	}
	if maxRail < 0 {
		return 0
	}
	width := maxRail + 1
	counts := make([]int32, (maxLocal+1)*width) // [local][rail]
	for _, r := range ranks {
		if rail := t.Rail(r.GPU); rail >= 0 {
			counts[r.LocalRank*width+rail]++
		}
	}
	total := 0
	for l := 0; l <= maxLocal; l++ {
		row := counts[l*width : (l+1)*width]
		best, sum := int32(0), int32(0)
		for _, c := range row {
			best = max(best, c)
			sum += c
		}
		total += int(sum - best)
	}
	return total
}

// chunk splits items 0..n-1, given in locality order, into runs of k
// (n%k == 0). keys[l][i] is item i's group at level l, a number below
// ngroups[l], or -1 for none. Items are chunked inside their level-0 group
// first; the items left over (the last n mod k of each group) are chunked
// inside their level-1 group, and so on; what is left after the last level
// is chunked in order. Each chunk lists item indices in increasing order;
// chunks are ordered by their first item. level[c] is the level chunk c was
// formed at (len(keys) for the final pass).
func chunk(n, k int, keys [][]int32, ngroups []int) (chunks [][]int32, level []int) {
	backing := make([]int32, 0, n)
	chunks = make([][]int32, 0, n/k)
	level = make([]int, 0, n/k)
	emit := func(items []int32, lv int) {
		for ; len(items) >= k; items = items[k:] {
			start := len(backing)
			backing = append(backing, items[:k]...)
			chunks = append(chunks, backing[start:len(backing):len(backing)])
			level = append(level, lv)
		}
	}
	pending := make([]int32, n)
	for i := range pending {
		pending[i] = int32(i)
	}
	if k == 1 {
		emit(pending, 0)
		return chunks, level
	}
	// Counting sort by group, touching only the groups present, so a small
	// gang on a big cluster costs little. cnt is all zeros between levels.
	cnt := make([]int32, slices.Max(ngroups))
	pos := make([]int32, len(cnt))
	var touched []int32
	grouped := make([]int32, n)
	for lv, key := range keys {
		if len(pending) == 0 {
			break
		}
		touched = touched[:0]
		var next []int32
		for _, it := range pending {
			if g := key[it]; g >= 0 {
				if cnt[g] == 0 {
					touched = append(touched, g)
				}
				cnt[g]++
			}
		}
		off := int32(0)
		for _, g := range touched {
			pos[g] = off
			off += cnt[g]
		}
		for _, it := range pending {
			if g := key[it]; g >= 0 {
				grouped[pos[g]] = it
				pos[g]++
			} else {
				next = append(next, it)
			}
		}
		for _, g := range touched {
			b := grouped[pos[g]-cnt[g] : pos[g]] // pos[g] is now the group's end
			full := len(b) / k * k
			emit(b[:full], lv)
			next = append(next, b[full:]...)
			cnt[g] = 0
		}
		slices.Sort(next)
		pending = next
	}
	emit(pending, len(keys))
	// Order chunks by their first item.
	idx := make([]int, len(chunks))
	for i := range idx {
		idx[i] = i
	}
	slices.SortFunc(idx, func(a, b int) int { return cmp.Compare(chunks[a][0], chunks[b][0]) })
	outC := make([][]int32, len(chunks))
	outL := make([]int, len(chunks))
	for i, j := range idx {
		outC[i], outL[i] = chunks[j], level[j]
	}
	return outC, outL
}
