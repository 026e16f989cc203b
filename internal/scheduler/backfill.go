package scheduler

import (
	"cmp"
	"fmt"
	"math/bits"
	"slices"
)

// reservation is the backfill reservation of a blocked gang.
type reservation struct {
	job   string
	start int64 // noEnd when some job it waits for has no estimated end
	masks []nodeMask
}

// releaseKey sorts releases without moving them: by end, then by tie,
// the first GPU the job holds, which no other job holds (fractional jobs,
// which may share a GPU, fall back to their job id).
type releaseKey struct {
	end, tie int64
	i        int32
}

// releaseTie is a release's tie-break: the first GPU it holds.
func releaseTie(parts []nodeMask, frac []fracOp) int64 {
	if len(parts) > 0 {
		m := parts[0]
		return int64(m.node)<<8 | int64(bits.TrailingZeros64(m.mask))
	}
	return -1
}

// reserve finds the earliest time g fits, releasing running jobs (and
// gangs placed in this pass) in the order of their estimated ends, and
// reserves the GPUs it would get then: they are taken out of p.c and held
// there (releases do not give them back), while p.full keeps them for
// gangs that end before the first reservation starts. Earlier
// reservations' GPUs stay held during the search, as if their gangs kept
// them for good, so reservations never share a GPU and each start holds
// whatever later gangs do. It returns the text for g's reason; false when
// g does not fit even on the emptied cluster.
//
// The search gallops (1, 2, 4, ... releases) and then bisects, undoing
// releases as it moves back, so it costs O(releases) cheap counter
// updates and O(log releases) placement attempts.
func (p *Pass) reserve(g *gang) (string, bool) {
	if g.gpus > p.c.sumGPUs {
		return "", false
	}
	nrun := len(p.run)
	rel := func(i int32) ([]nodeMask, []fracOp, string) {
		if int(i) < nrun {
			rj := &p.run[i]
			return rj.parts, rj.frac, rj.r.JobID
		}
		pj := &p.placed[int(i)-nrun]
		return pj.parts, pj.frac, pj.id
	}
	byID := func(a, b int32) int {
		_, _, ida := rel(a)
		_, _, idb := rel(b)
		return cmp.Compare(ida, idb)
	}
	if !p.runSorted {
		// The running jobs' order is the same for every reservation of
		// the pass until a preemption stops one: sort it once.
		p.runKeys = make([]releaseKey, 0, nrun)
		for j := range p.run {
			rj := &p.run[j]
			p.runKeys = append(p.runKeys, releaseKey{rj.end, releaseTie(rj.parts, rj.frac), int32(j)})
		}
		sortReleases(p.runKeys, byID)
		p.runSorted = true
	}
	keys := p.runKeys
	if len(p.placed) > 0 {
		placed := make([]releaseKey, 0, len(p.placed))
		for j := range p.placed {
			pj := &p.placed[j]
			placed = append(placed, releaseKey{pj.end, releaseTie(pj.parts, pj.frac), int32(nrun + j)})
		}
		sortReleases(placed, byID)
		keys = mergeReleases(p.keys[:0], p.runKeys, placed, byID)
		p.keys = keys
	}
	if len(keys) == 0 {
		return "it does not fit even on the idle cluster", false
	}
	s := p.c.cloneInto(p.scratch) // this search's own, reused by the next
	p.scratch = s
	var log gpuLog                          // GPUs each applied release freed, back to back
	starts := make([]int32, 0, len(keys)+1) // starts[k]: where release k's entries begin in log
	at := 0                                 // releases applied
	moveTo := func(k int) {
		for at < k {
			parts, frac, _ := rel(keys[at].i)
			starts = append(starts, int32(len(log)))
			log = s.release(log, parts, 0, int32(s.nn))
			for _, op := range frac {
				s.releaseFrac(op)
			}
			at++
		}
		for at > k {
			at--
			_, frac, _ := rel(keys[at].i)
			for i := len(frac) - 1; i >= 0; i-- {
				s.applyFrac(frac[i])
			}
			s.undo(log[starts[at]:])
			log = log[:starts[at]]
			starts = starts[:at]
		}
	}
	strat := p.opts.Strategy
	fits := func() bool {
		return int(s.gfree[lvRoot][0]) >= g.gpus && s.canFit(g, strat)
	}
	hi := -1 // the fewest releases after which g fits
	if strat == Topology && g.required == lvRoot && !g.tpAcross && g.flat {
		// The check is a few multiplications: release one at a time.
		for k := 1; k <= len(keys); k++ {
			moveTo(k)
			if fits() {
				hi = k
				break
			}
		}
	} else {
		// The check scans groups: gallop, then bisect.
		lo := 0 // known not to fit
		for k := 1; ; k *= 2 {
			k = min(k, len(keys))
			moveTo(k)
			if fits() {
				hi = k
				break
			}
			lo = k
			if k == len(keys) {
				break
			}
		}
		for hi > 0 && hi-lo > 1 {
			mid := (lo + hi) / 2
			moveTo(mid)
			if fits() {
				hi = mid
			} else {
				lo = mid
			}
		}
	}
	if hi < 0 {
		// Every release is applied; the GPUs still out of reach are held
		// for the gangs reserved ahead of this one. An array's tasks, each
		// the size of a node, queue so on a cluster of a few nodes: they
		// fit, one after another, once those have run.
		moveTo(len(keys))
		s.held = nil // s is this search's own: give the reserved GPUs back
		for _, rv := range p.resvs {
			for _, m := range rv.masks {
				s.give(m.node, m.mask)
			}
		}
		if len(p.resvs) > 0 && fits() {
			if len(p.resvs) == 1 {
				return fmt.Sprintf("it fits once the gang reserved ahead of it (%s) has started", p.resvs[0].job), false
			}
			return fmt.Sprintf("it fits once the %d gangs reserved ahead of it have started", len(p.resvs)), false
		}
		return "it does not fit even when every running job has ended", false
	}
	moveTo(hi)
	picks := s.find(g, strat, lvRoot, 0)
	masks := s.masks(g, picks)

	if p.full == nil {
		p.full = p.c.clone()
	}
	for _, m := range masks {
		p.c.takeAll(m)
		p.c.hold(m.node, m.mask)
	}
	start := keys[hi-1].end
	rv := &reservation{job: g.req.JobID, start: start, masks: masks}
	p.resvs = append(p.resvs, rv)
	if p.first == nil || start < p.first.start {
		p.first = rv
	}
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
		len(nodes), plural(len(nodes), "node", "nodes"), p.resvWhen(rv)), true
}

// resvWhen says when r's reserved GPUs are free, for reasons.
func (p *Pass) resvWhen(r *reservation) string {
	if r.start == noEnd {
		return "once running jobs without an estimated end finish"
	}
	return p.fmtIn(r.start)
}

// fmtIn formats a time relative to the snapshot: "in 1h20m0s".
func (p *Pass) fmtIn(t int64) string {
	if t <= p.now {
		return "now"
	}
	return "in " + fmtDuration(t-p.now)
}

// canFit reports whether g fits on c. For the Topology strategy it is a
// capacity check at the widest level g allows, which is what find would
// find; other strategies run find.
func (c *cluster) canFit(g *gang, strat Strategy) bool {
	if strat != Topology {
		return c.find(g, strat, lvRoot, 0) != nil
	}
	L := g.required
	if L == lvDom && !c.multi {
		L = lvNode
	}
	if L == lvRoot {
		return c.capOf(g, lvRoot, 0) >= g.units
	}
	_, ok := c.bestGroup(g, strat, g.units, L, lvRoot, 0)
	return ok
}

// mergeReleases appends to dst the sorted releases a and b merged in the
// order sortReleases gives them together: by end, tie, then byID, and a's
// before b's when all are equal (a holds the running jobs, which come
// first in that sort's stable order).
func mergeReleases(dst, a, b []releaseKey, byID func(a, b int32) int) []releaseKey {
	for len(a) > 0 && len(b) > 0 {
		x, y := a[0], b[0]
		c := cmp.Compare(x.end, y.end)
		if c == 0 {
			c = cmp.Compare(x.tie, y.tie)
		}
		if c == 0 {
			c = byID(x.i, y.i)
		}
		if c <= 0 {
			dst = append(dst, x)
			a = a[1:]
		} else {
			dst = append(dst, y)
			b = b[1:]
		}
	}
	dst = append(dst, a...)
	return append(dst, b...)
}

// sortReleases sorts keys by end, then tie, then byID for the rare equal
// pairs, with an LSD radix sort: thousands of running jobs are sorted
// once per reservation, and comparison sorting them costs milliseconds.
func sortReleases(keys []releaseKey, byID func(a, b int32) int) {
	if len(keys) < 2 {
		return
	}
	tmp := make([]releaseKey, len(keys))
	var vals []uint64
	radix := func() {
		lo, hi := ^uint64(0), uint64(0)
		for _, v := range vals {
			lo, hi = min(lo, v), max(hi, v)
		}
		span := hi - lo
		tv := make([]uint64, len(vals))
		for shift := uint(0); shift < 64 && span>>shift != 0; shift += 8 {
			var count [257]int
			for _, v := range vals {
				count[(v-lo)>>shift&0xff+1]++
			}
			for b := 1; b < 257; b++ {
				count[b] += count[b-1]
			}
			for i, v := range vals {
				d := (v - lo) >> shift & 0xff
				tmp[count[d]] = keys[i]
				tv[count[d]] = v
				count[d]++
			}
			copy(keys, tmp)
			copy(vals, tv)
		}
	}
	vals = make([]uint64, len(keys))
	for i := range keys {
		vals[i] = uint64(keys[i].tie) ^ 1<<63
	}
	radix()
	for i := range keys {
		vals[i] = uint64(keys[i].end) ^ 1<<63
	}
	radix()
	for i := 0; i < len(keys); {
		j := i + 1
		for j < len(keys) && keys[j].end == keys[i].end && keys[j].tie == keys[i].tie {
			j++
		}
		if j-i > 1 {
			slices.SortStableFunc(keys[i:j], func(a, b releaseKey) int { return byID(a.i, b.i) })
		}
		i = j
	}
}
