package controller

import (
	"maps"

	"github.com/gangway/gangway/internal/api"
	"github.com/gangway/gangway/internal/scheduler"
	"github.com/gangway/gangway/internal/topology"
)

// spreadLabel pins, in the scheduler's snapshot only, a deployment's
// pending replica to one node.
const spreadLabel = "gangway.io/spread-node"

// spreadReplicas places each pending replica of a deployment (a one-rank
// job of whole GPUs with an Owner) on a node that holds none of its
// replicas yet, while such nodes have room for it: replicas packed on one
// node, as best fit packs them, are all lost with it, and the gateway has
// nothing to route to. Each such request in reqs is pinned to the node
// with the most free GPUs among those, by a label that only snap's nodes
// carry; a replica with no such node left is placed as any job. byID
// holds the pending jobs, jobs every job.
func spreadReplicas(snap *scheduler.Snapshot, reqs []scheduler.Request, byID, jobs map[string]*api.Job) {
	owners := map[string]map[string]bool{} // owner → nodes holding one of its replicas
	for i := range reqs {
		if j := byID[reqs[i].JobID]; j != nil && j.Spec.Owner != "" {
			owners[j.Spec.Owner] = map[string]bool{}
		}
	}
	if len(owners) == 0 {
		return
	}
	for _, j := range jobs {
		held, ok := owners[j.Spec.Owner]
		a := j.Status.Current()
		if !ok || a == nil || a.Phase == api.AttemptEnded {
			continue
		}
		for _, rp := range a.Placement {
			held[rp.Node] = true
		}
	}
	free := make(map[string]int, len(snap.Nodes)) // whole GPUs left after the pins so far
	for i := range snap.Nodes {
		free[snap.Nodes[i].Name] = len(snap.Nodes[i].Free)
	}
	labeled := false
	for i := range reqs {
		r := &reqs[i]
		j := byID[r.JobID]
		if j == nil || j.Spec.Owner == "" || r.Ranks != 1 || r.GPUsPerRank == 0 {
			continue
		}
		held := owners[j.Spec.Owner]
		best := -1
		for k := range snap.Nodes {
			n := &snap.Nodes[k]
			if held[n.Name] || free[n.Name] < r.GPUsPerRank || !roomFor(n, r) || !topology.Selects(r.NodeSelector, r.NodeSelectorIn, n.Labels) {
				continue
			}
			if best < 0 || free[n.Name] > free[snap.Nodes[best].Name] {
				best = k
			}
		}
		if best < 0 {
			continue
		}
		name := snap.Nodes[best].Name
		if !labeled {
			for k := range snap.Nodes {
				n := &snap.Nodes[k]
				l := maps.Clone(n.Labels)
				if l == nil {
					l = map[string]string{}
				}
				l[spreadLabel] = n.Name
				n.Labels = l
			}
			labeled = true
		}
		sel := maps.Clone(r.NodeSelector)
		if sel == nil {
			sel = map[string]string{}
		}
		sel[spreadLabel] = name
		r.NodeSelector = sel
		free[name] -= r.GPUsPerRank
		held[name] = true
	}
}

// roomFor reports whether node n has the CPU and memory a rank of r asks
// for (where n's capacity is known).
func roomFor(n *scheduler.Node, r *scheduler.Request) bool {
	if n.CPUMillis > 0 && n.CPUMillisUsed+r.CPUMillisPerRank > n.CPUMillis {
		return false
	}
	return n.MemoryBytes <= 0 || n.MemoryBytesUsed+r.MemoryBytesPerRank <= n.MemoryBytes
}
