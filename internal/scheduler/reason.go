package scheduler

import (
	"fmt"
)

// needText says what g needs, for people: "needs 64 GPUs (8 ranks × 8)
// under one leaf".
func (p *Pass) needText(g *gang) string {
	r := g.req
	var s string
	switch {
	case g.hostOnly:
		s = fmt.Sprintf("needs %d host-only %s", r.Ranks, plural(r.Ranks, "rank", "ranks"))
	case g.frac && g.milli > 0:
		s = fmt.Sprintf("needs %d %s of %d milli-GPUs", r.Ranks, plural(r.Ranks, "rank", "ranks"), g.milli)
	case g.frac:
		s = fmt.Sprintf("needs %d MIG %s %s", r.Ranks, r.MIGProfile, plural(r.Ranks, "instance", "instances"))
	case g.shaped:
		s = fmt.Sprintf("needs %d GPUs as %d nodes with %d free GPUs each", g.gpus, g.units, g.uRanks*g.gpr)
	case g.tp > 1:
		s = fmt.Sprintf("needs %d GPUs as %d tensor-parallel groups of %d GPUs, each inside one NVLink domain", g.gpus, g.units, g.tp*g.gpr)
	case r.Ranks == 1:
		s = fmt.Sprintf("needs %d %s on one node", g.gpus, plural(g.gpus, "GPU", "GPUs"))
	default:
		s = fmt.Sprintf("needs %d GPUs (%d ranks × %d)", g.gpus, r.Ranks, g.gpr)
	}
	s += hostNeed(g)
	if g.required < lvRoot {
		s += " under one " + levelWords[g.required]
	}
	if g.sel != nil {
		s += " on nodes with " + g.selKey
	}
	return s
}

// whyNot explains why g does not fit on p.c now.
func (p *Pass) whyNot(g *gang) (PendingKind, string) {
	c := p.c
	need := p.needText(g)
	free, eligible, total := int(c.gfree[lvRoot][0]), c.okNodes, c.sumGPUs
	if g.sel != nil {
		free, eligible, total = 0, 0, 0
		for n := range c.nn {
			if g.eligible(c, int32(n)) {
				free += int(c.nfree[n])
				total += int(c.total[n])
				eligible++
			}
		}
	}
	where := "in the cluster"
	if g.sel != nil {
		where = fmt.Sprintf("on the %d matching %s", eligible, plural(eligible, "node", "nodes"))
	}
	switch n := len(p.resvs); {
	case n == 1:
		where += " outside the GPUs reserved for " + p.resvs[0].job
	case n > 1:
		where += fmt.Sprintf(" outside the GPUs reserved for %s and %d other %s", p.resvs[0].job, n-1, plural(n-1, "gang", "gangs"))
	}
	if eligible == 0 {
		if g.sel != nil {
			return PendingCapacity, fmt.Sprintf("%s; no ready node has labels %s", need, g.selKey)
		}
		return PendingCapacity, need + "; no ready, schedulable nodes"
	}
	if !g.frac && total < g.gpus {
		if g.sel != nil {
			return PendingCapacity, fmt.Sprintf("%s; the %d matching nodes have only %d GPUs", need, eligible, total)
		}
		return PendingCapacity, fmt.Sprintf("%s; the cluster has only %d GPUs", need, total)
	}
	if why, ok := p.whyHost(g); ok && (g.frac || free >= g.gpus) {
		return PendingResources, why
	}
	if g.frac {
		return PendingCapacity, fmt.Sprintf("%s; no shared GPU has room and %d whole GPUs are free %s", need, free, where)
	}
	if free < g.gpus {
		return PendingCapacity, fmt.Sprintf("%s; %d free %s", need, free, where)
	}
	// Enough GPUs, wrong shape.
	if g.required < lvRoot {
		L := g.required
		if L == lvDom && !c.multi {
			L = lvNode
		}
		best, bestFree, bestCap := int32(-1), -1, 0
		for grp := int32(0); grp < int32(c.ngroups(L)); grp++ {
			f := 0
			if g.sel == nil {
				f = c.groupFree(L, grp)
			} else {
				lo, hi := c.span(L, grp)
				for n := lo; n < hi; n++ {
					if g.eligible(c, n) {
						f += int(c.nfree[n])
					}
				}
			}
			if f > bestFree {
				best, bestFree = grp, f
			}
		}
		if best >= 0 {
			bestCap = c.capOf(g, L, best)
		}
		s := fmt.Sprintf("%s; the emptiest %s (%s) has %d free", need, levelWords[g.required], c.groupName(L, best), bestFree)
		if bestFree >= g.gpus {
			s += fmt.Sprintf(", room for %d of the %d blocks of %d GPUs it needs", bestCap, g.units, g.uRanks*g.gpr)
		}
		return PendingTopology, s
	}
	if p.opts.Strategy == Consolidate && g.gpus > c.hw-1 {
		idle := 0
		for n := range c.nn {
			if g.eligible(c, int32(n)) && c.total[n] > 0 && c.nfree[n] == c.total[n] {
				idle++
			}
		}
		return PendingTopology, fmt.Sprintf("%s on whole idle nodes; %d nodes are idle (%d GPUs free %s)", need, idle, free, where)
	}
	units := c.capOf(g, lvRoot, 0)
	if g.shaped {
		return PendingTopology, fmt.Sprintf("%s; %d nodes have that (%d GPUs free %s)", need, units, free, where)
	}
	domain := "node"
	if g.tpAcross {
		domain = "NVLink domain"
	}
	return PendingTopology, fmt.Sprintf("%s; %d GPUs are free %s but only %d blocks of %d GPUs fit on single %ss",
		need, free, where, units, g.uRanks*g.gpr, domain)
}
