// Package scheduler decides where gangs run. It is a pure function of its
// inputs: Schedule reads an immutable Snapshot and a list of pending
// Requests and returns a Plan; it does no I/O, keeps no state between calls
// and draws no randomness, so the same inputs always give the same plan. The
// server's controller and the trace simulator call the same entry point.
//
// It imports only the standard library.
package scheduler

import (
	"fmt"
	"sort"
	"strings"
)

// Node is a schedulable node as the scheduler sees it.
type Node struct {
	Name string
	// Free lists the indices of the node's free GPUs, ascending.
	Free []int
	// Total is the node's GPU count.
	Total  int
	Labels map[string]string
}

// Snapshot is the cluster at one instant. Only nodes that may receive new
// ranks belong in it.
type Snapshot struct {
	Nodes []Node
}

// Request is one pending gang.
type Request struct {
	JobID    string
	Queue    string
	Priority int
	// Order breaks ties within a priority: lower goes first (submit time,
	// or a sequence number).
	Order        int64
	Ranks        int
	GPUsPerRank  int
	RanksPerNode int // 0: pack onto the fewest nodes
	NodeSelector map[string]string
}

// Slot is where one rank goes.
type Slot struct {
	Node string
	GPUs []int
}

// Placement puts every rank of one gang; Ranks[i] is rank i.
type Placement struct {
	JobID string
	Ranks []Slot
}

// Pending is a gang that did not fit, with why, in words for people.
type Pending struct {
	JobID  string
	Reason string
}

// Plan is the scheduler's decision for one pass.
type Plan struct {
	Placements []Placement
	Pending    []Pending
}

// Schedule places as many requests as fit, in priority order (higher
// first, then Order, then JobID). A gang gets all its ranks or none. A gang
// that does not fit does not block smaller ones behind it.
func Schedule(snap Snapshot, reqs []Request) Plan {
	free := make([]freeNode, len(snap.Nodes))
	maxTotal := 0
	for i, n := range snap.Nodes {
		free[i] = freeNode{node: &snap.Nodes[i], free: append([]int(nil), n.Free...)}
		if n.Total > maxTotal {
			maxTotal = n.Total
		}
	}
	sort.Slice(free, func(a, b int) bool { return free[a].node.Name < free[b].node.Name })

	order := make([]int, len(reqs))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool {
		ra, rb := &reqs[order[a]], &reqs[order[b]]
		if ra.Priority != rb.Priority {
			return ra.Priority > rb.Priority
		}
		if ra.Order != rb.Order {
			return ra.Order < rb.Order
		}
		return ra.JobID < rb.JobID
	})

	var plan Plan
	ahead := 0
	for _, i := range order {
		r := &reqs[i]
		p, reason := place(free, r, maxTotal)
		if p == nil {
			if ahead > 0 {
				reason += fmt.Sprintf("; %d gang(s) ahead of it also wait", ahead)
			}
			plan.Pending = append(plan.Pending, Pending{JobID: r.JobID, Reason: reason})
			ahead++
			continue
		}
		plan.Placements = append(plan.Placements, *p)
	}
	return plan
}

type freeNode struct {
	node *Node
	free []int
}

func matches(n *Node, sel map[string]string) bool {
	for k, v := range sel {
		if n.Labels[k] != v {
			return false
		}
	}
	return true
}

// place finds room for r on free, takes it, and returns the placement, or
// nil and the reason it does not fit.
func place(free []freeNode, r *Request, maxTotal int) (*Placement, string) {
	per := r.GPUsPerRank
	if per < 1 {
		per = 1
	}
	var elig []*freeNode
	for i := range free {
		if matches(free[i].node, r.NodeSelector) {
			elig = append(elig, &free[i])
		}
	}
	if len(free) == 0 {
		return nil, "no ready, schedulable nodes"
	}
	if len(elig) == 0 {
		return nil, fmt.Sprintf("no ready node has labels %s", fmtSelector(r.NodeSelector))
	}
	if r.RanksPerNode > 0 {
		return placeShaped(elig, r, per)
	}
	total := r.Ranks * per
	if total <= maxTotal {
		// Best fit on one node: the fullest node that still has room keeps
		// emptier nodes whole for bigger gangs.
		var best *freeNode
		for _, f := range elig {
			if len(f.free) >= total && (best == nil || len(f.free) < len(best.free)) {
				best = f
			}
		}
		if best != nil {
			return take(r.JobID, []*freeNode{best}, []int{r.Ranks}, per), ""
		}
	}
	// Fewest nodes: take the emptiest first.
	byFree := append([]*freeNode(nil), elig...)
	sort.SliceStable(byFree, func(a, b int) bool { return len(byFree[a].free) > len(byFree[b].free) })
	var chosen []*freeNode
	var counts []int
	left := r.Ranks
	freeGPUs := 0
	for _, f := range byFree {
		freeGPUs += len(f.free)
		if left == 0 {
			continue
		}
		c := min(len(f.free)/per, left)
		if c == 0 {
			continue
		}
		chosen = append(chosen, f)
		counts = append(counts, c)
		left -= c
	}
	if left > 0 {
		return nil, fmt.Sprintf("needs %d GPUs (%d ranks × %d); %d free across %d eligible nodes",
			total, r.Ranks, per, freeGPUs, len(elig))
	}
	return take(r.JobID, chosen, counts, per), ""
}

func placeShaped(elig []*freeNode, r *Request, per int) (*Placement, string) {
	k := r.Ranks / r.RanksPerNode
	need := r.RanksPerNode * per
	var fit []*freeNode
	for _, f := range elig {
		if len(f.free) >= need {
			fit = append(fit, f)
		}
	}
	if len(fit) < k {
		return nil, fmt.Sprintf("needs %d nodes with %d free GPUs each; %d of %d eligible nodes have that",
			k, need, len(fit), len(elig))
	}
	// Best fit: fullest nodes that still fit, ties by name.
	sort.SliceStable(fit, func(a, b int) bool { return len(fit[a].free) < len(fit[b].free) })
	chosen := fit[:k]
	counts := make([]int, k)
	for i := range counts {
		counts[i] = r.RanksPerNode
	}
	return take(r.JobID, chosen, counts, per), ""
}

// take assigns counts[i] ranks to chosen[i], lowest GPU indices first, nodes
// in name order so rank numbering is stable, and removes the GPUs.
func take(job string, chosen []*freeNode, counts []int, per int) *Placement {
	idx := make([]int, len(chosen))
	for i := range idx {
		idx[i] = i
	}
	sort.Slice(idx, func(a, b int) bool { return chosen[idx[a]].node.Name < chosen[idx[b]].node.Name })
	p := &Placement{JobID: job}
	for _, i := range idx {
		f := chosen[i]
		for c := 0; c < counts[i]; c++ {
			gpus := append([]int(nil), f.free[:per]...)
			f.free = f.free[per:]
			p.Ranks = append(p.Ranks, Slot{Node: f.node.Name, GPUs: gpus})
		}
	}
	return p
}

func fmtSelector(sel map[string]string) string {
	keys := make([]string, 0, len(sel))
	for k := range sel {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + sel[k]
	}
	return "{" + strings.Join(parts, ", ") + "}"
}
