package controller

import (
	"fmt"
	"hash/fnv"
	"sort"

	"github.com/gangway/gangway/internal/api"
	"github.com/gangway/gangway/internal/topology"
)

// topoCache rebuilds the cluster topology only when the set of nodes, their
// labels or their GPUs change. Owned by the controller's loop goroutine.
type topoCache struct {
	sig  uint64
	topo *topology.Topology
	err  error
}

// get returns the topology of nodes, building it if they changed.
func (c *topoCache) get(nodes map[string]*api.Node) (*topology.Topology, error) {
	names := make([]string, 0, len(nodes))
	for n := range nodes {
		names = append(names, n)
	}
	sort.Strings(names)
	h := fnv.New64a()
	for _, name := range names {
		n := nodes[name]
		fmt.Fprintf(h, "%s|%d|%s|", name, len(n.GPUs), fmtSorted(n.Labels))
		for _, g := range n.GPUs {
			fmt.Fprintf(h, "%d,%d,%d,%v;", g.Index, g.NUMANode, g.Rail, g.NVLinkPeers)
		}
	}
	sig := h.Sum64()
	if c.topo != nil && sig == c.sig {
		return c.topo, c.err
	}
	b := topology.NewBuilder()
	for _, name := range names {
		n := nodes[name]
		spec := topology.NodeSpec{Name: name, GPUs: len(n.GPUs), NVLink: len(n.GPUs) > 1}
		numa := make([]int, len(n.GPUs))
		rails := make([]int, len(n.GPUs))
		known := false
		for i, g := range n.GPUs {
			numa[i], rails[i] = g.NUMANode, g.Rail
			if len(g.NVLinkPeers) < len(n.GPUs)-1 {
				spec.NVLink = false
			}
			known = known || g.Rail >= 0
		}
		if len(n.GPUs) > 0 {
			spec.NUMA = numa
			if known {
				spec.Rails = rails
			}
		}
		err := b.AddNode(spec)
		if err == nil {
			err = b.AddLabels(name, n.Labels)
		}
		if err != nil {
			c.sig, c.topo, c.err = sig, nil, err
			return nil, err
		}
	}
	c.topo, c.err = b.Build()
	c.sig = sig
	return c.topo, c.err
}

func fmtSorted(m map[string]string) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	s := ""
	for _, k := range keys {
		s += k + "=" + m[k] + ","
	}
	return s
}

// rankLayout numbers a placement's ranks. Without a parallel grid, ranks
// follow the scheduler's slots (node by node). With one, tensor-parallel
// groups go inside NVLink domains, pipeline stages stay close and ranks on
// the same local index share a rail (topology.OrderRanks).
func rankLayout(spec *api.JobSpec, slots []slot, topo *topology.Topology) ([]api.RankPlacement, *api.Grid, error) {
	nodeRank := map[string]int{}
	local := map[string]int{}
	plain := func() []api.RankPlacement {
		out := make([]api.RankPlacement, len(slots))
		for i, s := range slots {
			if _, ok := nodeRank[s.node]; !ok {
				nodeRank[s.node] = len(nodeRank)
			}
			out[i] = api.RankPlacement{Rank: i, Node: s.node, NodeRank: nodeRank[s.node], LocalRank: local[s.node], GPUs: s.gpus}
			local[s.node]++
		}
		return out
	}
	par := spec.Parallelism
	if par == nil || (par.Auto && par.TP == 0 && par.PP == 0 && par.DP == 0) {
		return plain(), nil, nil
	}
	tp, pp := max(par.TP, 1), max(par.PP, 1)
	dp := len(slots) / (tp * pp)
	order, err := topology.ParseRankOrder(orDefault(par.Order, "tp-pp-dp"))
	if err != nil {
		return nil, nil, err
	}
	grid := &api.Grid{TP: tp, PP: pp, DP: dp, Order: order.String()}
	if spec.GPUsPerRank != 1 || topo == nil {
		// One coordinate per slot in order; no topology to consult.
		out := plain()
		for i := range out {
			out[i].TP, out[i].PP, out[i].DP = coords(i, tp, pp, dp, order)
		}
		return out, grid, nil
	}
	refs := make([]topology.GPURef, len(slots))
	for i, s := range slots {
		id, ok := topo.NodeByName(s.node)
		if !ok {
			return nil, nil, fmt.Errorf("node %s is not in the topology", s.node)
		}
		refs[i] = topology.GPURef{Node: id, GPU: int32(s.gpus[0])}
	}
	lay, err := topo.OrderRanks(refs, topology.Parallelism{TP: tp, PP: pp, DP: dp}, order)
	if err != nil {
		return nil, nil, err
	}
	out := make([]api.RankPlacement, len(lay.Ranks))
	for i, r := range lay.Ranks {
		out[i] = api.RankPlacement{Rank: i, Node: topo.NodeName(r.GPU.Node), NodeRank: r.NodeRank, LocalRank: r.LocalRank,
			GPUs: []int{int(r.GPU.GPU)}, TP: r.TP, PP: r.PP, DP: r.DP}
	}
	grid.TPGroupsCrossingDomain = lay.TPGroupsCrossingDomain
	grid.RailMismatches = lay.RailMismatches
	return out, grid, nil
}

// coords inverts the rank numbering of order.
func coords(rank, tp, pp, dp int, order topology.RankOrder) (t, p, d int) {
	t = rank % tp
	if order == topology.OrderTPDPPP {
		return t, rank / (tp * dp), (rank / tp) % dp
	}
	return t, (rank / tp) % pp, rank / (tp * pp)
}

func orDefault(s, d string) string {
	if s == "" {
		return d
	}
	return s
}

// slot is one rank's node and GPUs as the scheduler chose them.
type slot struct {
	node string
	gpus []int
}
