package scheduler

import (
	"cmp"
	"fmt"
	"slices"
)

// reservation is the backfill reservation of the first blocked gang.
type reservation struct {
	job   string
	start int64 // noEnd when some job it waits for has no estimated end
	masks []nodeMask
}

// release is a future release of GPUs: a running job, or a gang placed in
// this pass, at its estimated end.
type release struct {
	end   int64
	id    string
	parts []nodeMask
	frac  []fracOp
}

// reserve finds the earliest time g fits, releasing running jobs (and
// gangs placed in this pass) in the order of their estimated ends, and
// reserves the GPUs it would get then: they are taken out of p.c, while
// p.full keeps them for gangs that end before the reservation starts. It
// returns the text for g's reason; false when g does not fit even on the
// emptied cluster.
//
// The search gallops (1, 2, 4, ... releases) and then bisects, undoing
// releases as it moves back, so it costs O(releases) cheap counter
// updates and O(log releases) placement attempts.
func (p *Pass) reserve(g *gang) (string, bool) {
	rels := make([]release, 0, len(p.run)+len(p.placed))
	for j := range p.run {
		rj := &p.run[j]
		rels = append(rels, release{rj.end, rj.r.JobID, rj.parts, rj.frac})
	}
	for _, pj := range p.placed {
		rels = append(rels, release{pj.end, pj.id, pj.parts, pj.frac})
	}
	if len(rels) == 0 {
		return "it does not fit even on the idle cluster", false
	}
	slices.SortFunc(rels, func(a, b release) int {
		if a.end != b.end {
			return cmp.Compare(a.end, b.end)
		}
		return cmp.Compare(a.id, b.id)
	})
	s := p.c.clone()
	logs := make([]gpuLog, 0, len(rels))
	at := 0 // releases applied
	moveTo := func(k int) {
		for at < k {
			r := &rels[at]
			logs = append(logs, s.release(nil, r.parts, 0, int32(s.nn)))
			for _, op := range r.frac {
				s.releaseFrac(op)
			}
			at++
		}
		for at > k {
			at--
			r := &rels[at]
			for i := len(r.frac) - 1; i >= 0; i-- {
				s.applyFrac(r.frac[i])
			}
			s.undo(logs[at])
			logs = logs[:at]
		}
	}
	strat := p.opts.Strategy
	fits := func() bool {
		return int(s.gfree[lvRoot][0]) >= g.gpus && s.find(g, strat, lvRoot, 0) != nil
	}
	lo, hi := 0, -1 // lo: known not to fit; hi: known to fit
	for k := 1; ; k *= 2 {
		k = min(k, len(rels))
		moveTo(k)
		if fits() {
			hi = k
			break
		}
		lo = k
		if k == len(rels) {
			return "it does not fit even when every running job has ended", false
		}
	}
	for hi-lo > 1 {
		mid := (lo + hi) / 2
		moveTo(mid)
		if fits() {
			hi = mid
		} else {
			lo = mid
		}
	}
	moveTo(hi)
	picks := s.find(g, strat, lvRoot, 0)
	masks := s.masks(g, picks)

	p.full = p.c.clone()
	for _, m := range masks {
		p.c.take(m.node, m.mask)
	}
	start := rels[hi-1].end
	p.resv = &reservation{job: g.req.JobID, start: start, masks: masks}
	nodes := make([]string, len(masks))
	for i, m := range masks {
		nodes[i] = p.c.topo.NodeName(nodeID(m.node))
	}
	slices.Sort(nodes)
	r := Reservation{JobID: g.req.JobID, Nodes: nodes}
	if start != noEnd {
		r.Start = start
	}
	p.plan.Reservations = append(p.plan.Reservations, r)
	return fmt.Sprintf("reserved %d %s that are free %s; gangs behind it start first only if they leave those GPUs alone or end before then",
		len(nodes), plural(len(nodes), "node", "nodes"), p.resvWhen()), true
}

// resvWhen says when the reserved GPUs are free, for reasons.
func (p *Pass) resvWhen() string {
	if p.resv.start == noEnd {
		return "once running jobs without an estimated end finish"
	}
	return p.fmtIn(p.resv.start)
}

// fmtIn formats a time relative to the snapshot: "in 1h20m0s".
func (p *Pass) fmtIn(t int64) string {
	if t <= p.now {
		return "now"
	}
	return "in " + fmtDuration(t-p.now)
}
