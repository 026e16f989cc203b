package scheduler

import (
	"cmp"
	"fmt"
	"math"
	"math/bits"
	"slices"
	"strings"
	"time"
)

// gpuLog records GPUs a search freed, so it can take them back exactly.
type gpuLog []nodeMask

// release gives back the GPUs, CPU and memory of parts on nodes lo..hi-1
// and logs what it gave.
func (c *cluster) release(log gpuLog, parts []nodeMask, lo, hi int32) gpuLog {
	for _, m := range parts {
		if m.node < lo || m.node >= hi {
			continue
		}
		got := c.give(m.node, m.mask)
		c.giveHost(m.node, m.cpu, m.mem)
		if got != 0 || m.cpu|m.mem != 0 {
			log = append(log, nodeMask{node: m.node, mask: got, cpu: m.cpu, mem: m.mem})
		}
	}
	return log
}

func (c *cluster) undo(log gpuLog) {
	for i := len(log) - 1; i >= 0; i-- {
		c.takeAll(log[i])
	}
}

// victimSet is a candidate answer of one preemption search.
type victimSet struct {
	jobs  []int // indices in Pass.run
	lost  int64
	level int
	grp   int32
}

// better orders answers: fewer victims, then less work lost, then a
// tighter group, then the lower group id.
func (a *victimSet) better(b *victimSet) bool {
	if b == nil {
		return true
	}
	if len(a.jobs) != len(b.jobs) {
		return len(a.jobs) < len(b.jobs)
	}
	if a.lost != b.lost {
		return a.lost < b.lost
	}
	if a.level != b.level {
		return a.level < b.level
	}
	return a.grp < b.grp
}

// preempt looks for the fewest running jobs to stop so that g fits in a
// topology-compatible slot, preferring jobs that lose the least work since
// their last checkpoint. Candidates are preemptible jobs of g's own queue
// with lower priority and, when g stays within its queue's guarantee,
// jobs of queues that borrow beyond theirs. GPUs of jobs already stopping
// count as free. On success it records the preemptions, holds the free
// GPUs of the slot for the rest of the pass, and returns g's pending
// reason.
func (p *Pass) preempt(q *queueState, g *gang, within bool) (string, bool) {
	if !p.mayPreempt(q, g, within) {
		return "", false
	}
	p.searches++
	c := p.c
	var cands []int
	var candGPUs int64
	for j := range p.run {
		rj := &p.run[j]
		if rj.stopping || !rj.r.Preemptible || len(rj.frac) > 0 || len(rj.parts) == 0 {
			continue
		}
		if (rj.q == q && rj.r.Priority < g.req.Priority) || (within && rj.q != q && rj.q.borrowing()) {
			cands = append(cands, j)
			candGPUs += rj.usage / 1000
		}
	}
	var stopLog gpuLog
	stopping := 0
	for j := range p.run {
		if p.run[j].stopping {
			n := len(stopLog)
			stopLog = c.release(stopLog, p.run[j].parts, 0, int32(c.nn))
			if len(stopLog) > n {
				stopping++
			}
		}
	}
	if stopping > 0 {
		if picks := c.find(g, p.opts.Strategy, lvRoot, 0); picks != nil {
			masks := c.masks(g, picks)
			c.undo(stopLog)
			p.hold(masks)
			return fmt.Sprintf("%s; it waits for stopping jobs to free their GPUs", p.needText(g)), true
		}
	}
	if len(cands) == 0 || int64(c.gfree[lvRoot][0])+candGPUs < int64(g.gpus) {
		c.undo(stopLog)
		return "", false
	}

	var best *victimSet
	type groupJob struct {
		grp int32
		j   int
	}
	var pairs []groupJob
	for L := lvNode; L <= g.required; L++ {
		if L == lvDom && !c.multi {
			continue
		}
		pairs = pairs[:0]
		for _, j := range cands {
			for _, m := range p.run[j].parts {
				pairs = append(pairs, groupJob{c.grp[L][m.node], j})
			}
		}
		slices.SortFunc(pairs, func(a, b groupJob) int {
			if a.grp != b.grp {
				return cmp.Compare(a.grp, b.grp)
			}
			return cmp.Compare(a.j, b.j)
		})
		pairs = slices.Compact(pairs)
		for lo := 0; lo < len(pairs); {
			hi := lo
			js := []int{}
			for hi < len(pairs) && pairs[hi].grp == pairs[lo].grp {
				js = append(js, pairs[hi].j)
				hi++
			}
			if v := p.searchGroup(q, g, L, pairs[lo].grp, js); v != nil && v.better(best) {
				best = v
			}
			lo = hi
		}
	}
	if best == nil {
		c.undo(stopLog)
		return "", false
	}

	var vlog gpuLog
	for _, j := range best.jobs {
		vlog = c.release(vlog, p.run[j].parts, 0, int32(c.nn))
	}
	picks := c.find(g, p.opts.Strategy, best.level, best.grp)
	var masks []nodeMask
	if picks != nil {
		masks = c.masks(g, picks)
	}
	c.undo(vlog)
	c.undo(stopLog)
	if picks == nil {
		// The strategy would not use the room the search found (it
		// placed by capacity); stopping anyone would be for nothing.
		return "", false
	}
	p.hold(masks)

	slices.SortFunc(best.jobs, func(a, b int) int { return cmp.Compare(p.run[a].r.JobID, p.run[b].r.JobID) })
	names := make([]string, len(best.jobs))
	freed := 0
	for k, j := range best.jobs {
		rj := &p.run[j]
		rj.stopping = true
		rj.end = p.now
		p.runSorted = false // its release moves up
		names[k] = rj.r.JobID
		freed += int(rj.usage / 1000)
		var why string
		if rj.q == q && rj.r.Priority < g.req.Priority {
			why = fmt.Sprintf("preempted for %s, which has priority %d over its %d in queue %s", g.req.JobID, g.req.Priority, rj.r.Priority, queueName(q.name))
		} else {
			why = fmt.Sprintf("preempted so that queue %s gets its guaranteed GPUs for %s: queue %s uses %s GPUs, above its %s-GPU guarantee",
				queueName(q.name), g.req.JobID, queueName(rj.q.name), milliStr(rj.q.usage[resGPU]), milliStr(rj.q.guarantee))
		}
		why += fmt.Sprintf("; it loses %s of GPU time since its last checkpoint", fmtDuration(rj.lost))
		p.plan.Preemptions = append(p.plan.Preemptions, Preemption{JobID: rj.r.JobID, For: g.req.JobID, Reason: why, LostWork: time.Duration(rj.lost)})
	}
	return fmt.Sprintf("%s; preempting %d %s (%s) in %s to free %d GPUs; it starts when they have stopped",
		p.needText(g), len(best.jobs), plural(len(best.jobs), "job", "jobs"), strings.Join(names, ", "),
		c.groupName(best.level, best.grp), freed), true
}

// mayPreempt is a cheap test that some running job could be g's victim:
// a preemptible job of lower priority in g's queue, or, when g stays
// within its guarantee, a preemptible job of a queue that borrows.
func (p *Pass) mayPreempt(q *queueState, g *gang, within bool) bool {
	if q.preemptible > 0 && g.req.Priority > q.minPrio {
		return true
	}
	if !within {
		return false
	}
	for _, o := range p.sh.queues {
		if o != q && o.preemptible > 0 && o.borrowing() {
			return true
		}
	}
	return false
}

// searchGroup finds the fewest candidates js whose GPUs inside group grp
// of level L make room for g there, or nil.
func (p *Pass) searchGroup(q *queueState, g *gang, L int, grp int32, js []int) *victimSet {
	c := p.c
	lo, hi := c.span(L, grp)
	var all gpuLog
	for _, j := range js {
		all = c.release(all, p.run[j].parts, lo, hi)
	}
	fits := c.capOf(g, L, grp) >= g.units
	c.undo(all)
	if !fits {
		return nil
	}
	type vc struct {
		j    int
		gpus int
		lost int64
	}
	vcs := make([]vc, 0, len(js))
	for _, j := range js {
		n := 0
		for _, m := range p.run[j].parts {
			if m.node >= lo && m.node < hi {
				n += bits.OnesCount64(m.mask)
			}
		}
		vcs = append(vcs, vc{j, n, p.run[j].lost})
	}
	slices.SortFunc(vcs, func(a, b vc) int {
		if a.gpus != b.gpus {
			return cmp.Compare(b.gpus, a.gpus)
		}
		if a.lost != b.lost {
			return cmp.Compare(a.lost, b.lost)
		}
		return cmp.Compare(p.run[a.j].r.JobID, p.run[b.j].r.JobID)
	})
	logs := map[int]gpuLog{}
	freed := map[*queueState]int64{}
	var chosen []vc
	for _, v := range vcs {
		if c.capOf(g, L, grp) >= g.units {
			break
		}
		rj := &p.run[v.j]
		if rj.q != q && rj.q.usage[resGPU]-freed[rj.q] <= rj.q.guarantee {
			continue // no longer borrowing: the rest is its guarantee
		}
		logs[v.j] = c.release(nil, rj.parts, lo, hi)
		freed[rj.q] += rj.usage
		chosen = append(chosen, v)
	}
	var out *victimSet
	if c.capOf(g, L, grp) >= g.units {
		// Drop any victim not needed, the costliest first.
		slices.SortStableFunc(chosen, func(a, b vc) int { return cmp.Compare(b.lost, a.lost) })
		kept := chosen[:0]
		for _, v := range chosen {
			c.undo(logs[v.j])
			if c.capOf(g, L, grp) >= g.units {
				delete(logs, v.j)
				continue
			}
			logs[v.j] = c.release(nil, p.run[v.j].parts, lo, hi)
			kept = append(kept, v)
		}
		out = &victimSet{level: L, grp: grp}
		for _, v := range kept {
			out.jobs = append(out.jobs, v.j)
			out.lost = satAdd(out.lost, v.lost)
		}
		slices.Sort(out.jobs)
	}
	for _, l := range logs {
		c.undo(l)
	}
	return out
}

// hold takes the free GPUs of a slot a preemptor will get, so that no
// other gang in this pass takes them.
func (p *Pass) hold(masks []nodeMask) {
	for _, m := range masks {
		p.c.takeAll(m)
		if p.full != nil {
			p.full.takeAll(m)
		}
	}
}

func satAdd(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// groupName names group grp of level L for people.
func (c *cluster) groupName(L int, grp int32) string {
	lo, _ := c.span(L, grp)
	first := nodeID(lo)
	switch L {
	case lvNode:
		return "node " + c.topo.NodeName(nodeID(grp))
	case lvDom:
		return "NVLink domain " + c.topo.DomainName(c.topo.Domain(first))
	case lvLeaf:
		if l := c.topo.Leaf(first); l >= 0 {
			return "leaf " + c.topo.LeafName(l)
		}
		return "node " + c.topo.NodeName(first) + " (no known leaf)"
	case lvSpine:
		if s := c.topo.Spine(first); s >= 0 {
			return "spine " + c.topo.SpineName(s)
		}
		if l := c.topo.Leaf(first); l >= 0 {
			return "leaf " + c.topo.LeafName(l) + " (no known spine)"
		}
		return "node " + c.topo.NodeName(first) + " (no known spine)"
	}
	return "the cluster"
}
