package controller

import (
	"fmt"
	"hash/fnv"
	"sort"

	"github.com/gangway/gangway/internal/api"
	"github.com/gangway/gangway/internal/scheduler"
	"github.com/gangway/gangway/internal/topology"
)

// topoCache rebuilds the cluster topology only when the set of nodes, their
// labels or their GPUs change. Owned by the controller's loop goroutine.
type topoCache struct {
	// files are the operator's topology files (Slurm tree or block
	// format), applied after the nodes' own labels.
	files []topology.File
	gen   int64 // the cache's node generation topo was checked at
	sig   uint64
	topo  *topology.Topology
	err   error
}

// get returns the topology of nodes, building it if they changed. gen is
// the cache's node generation: while it stays the same nothing is read.
func (c *topoCache) get(nodes map[string]*api.Node, gen int64) (*topology.Topology, error) {
	if c.topo != nil && gen != 0 && gen == c.gen {
		return c.topo, c.err
	}
	c.gen = gen
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
	for _, f := range c.files {
		if err := b.AddFile(f); err != nil {
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

// rankLayout turns the scheduler's slots (rank order, with grid
// coordinates when the job has a grid and the scheduler knew the topology)
// into rank placements. Node ranks follow the order of first appearance.
func rankLayout(spec *api.JobSpec, pl scheduler.Placement) ([]api.RankPlacement, *api.Grid) {
	nodeRank := map[string]int{}
	local := map[string]int{}
	out := make([]api.RankPlacement, len(pl.Ranks))
	coordsSet := false
	for i, s := range pl.Ranks {
		if _, ok := nodeRank[s.Node]; !ok {
			nodeRank[s.Node] = len(nodeRank)
		}
		out[i] = api.RankPlacement{Rank: i, Node: s.Node, NodeRank: nodeRank[s.Node], LocalRank: local[s.Node], GPUs: s.GPUs,
			TP: s.TP, PP: s.PP, DP: s.DP, Milli: s.Milli, MIGProfile: s.MIGProfile, MIGStart: s.MIGStart}
		local[s.Node]++
		coordsSet = coordsSet || s.TP != 0 || s.PP != 0 || s.DP != 0
	}
	par := spec.Parallelism
	if par == nil || (par.TP == 0 && par.PP == 0 && par.DP == 0) {
		return out, nil
	}
	tp, pp := max(par.TP, 1), max(par.PP, 1)
	dp := len(out) / (tp * pp)
	order, err := topology.ParseRankOrder(par.Order)
	if err != nil {
		order = topology.OrderTPPPDP
	}
	grid := &api.Grid{TP: tp, PP: pp, DP: dp, Order: order.String(),
		TPGroupsCrossingDomain: pl.TPGroupsCrossingDomain, RailMismatches: pl.RailMismatches, PPStepsCrossingLeaf: pl.PPStepsCrossingLeaf}
	if !coordsSet && len(out) > 1 {
		// The scheduler placed without a topology: number in slot order.
		for i := range out {
			out[i].TP, out[i].PP, out[i].DP = coords(i, tp, pp, dp, order)
		}
	}
	return out, grid
}

// coords inverts the rank numbering of order.
func coords(rank, tp, pp, dp int, order topology.RankOrder) (t, p, d int) {
	t = rank % tp
	if order == topology.OrderTPDPPP {
		return t, rank / (tp * dp), (rank / tp) % dp
	}
	return t, (rank / tp) % pp, rank / (tp * pp)
}

// addHostUse fills in what running attempts hold of their nodes' CPU and
// memory, from their jobs' per-rank resources (spec.resources): each
// running rank's slot gets its job's request, each node their sum as
// used, each running job its total for fair share. The scheduler checks
// new ranks against each node's capacity (what its agent registered: CPUs
// and memory; zero means unknown and does not limit) less what is used.
// Call it on a snapshot whose Running and Nodes are filled in.
func addHostUse(snap *scheduler.Snapshot, jobs map[string]*api.Job) {
	cpu, mem := map[string]int64{}, map[string]int64{}
	for i := range snap.Running {
		r := &snap.Running[i]
		j := jobs[r.JobID]
		if j == nil || j.Spec.Resources == nil {
			continue
		}
		res := j.Spec.Resources
		r.CPUMillis, r.MemoryBytes = 0, 0
		for k := range r.Ranks {
			s := &r.Ranks[k]
			s.CPUMillis, s.MemoryBytes = res.CPUMillis, res.MemoryBytes
			cpu[s.Node] += res.CPUMillis
			mem[s.Node] += res.MemoryBytes
			r.CPUMillis += res.CPUMillis
			r.MemoryBytes += res.MemoryBytes
		}
	}
	for i := range snap.Nodes {
		n := &snap.Nodes[i]
		n.CPUMillisUsed, n.MemoryBytesUsed = cpu[n.Name], mem[n.Name]
	}
}
