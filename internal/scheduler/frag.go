package scheduler

import (
	"cmp"
	"math/bits"
	"slices"
	"strings"
)

// Fragmentation-aware placement (Weng et al., "Beware of Fragmentation:
// Scheduling GPU-Sharing Workloads with Fragmentation Gradient Descent",
// ATC'23). A node's expected fragmentation over a workload of request
// shapes is, summed over the shapes by weight, the free GPU capacity
// (milli-GPUs) a request of that shape could not use on the node: all of
// it when the shape does not fit there at all (too few GPUs, CPU or
// memory, or a selector that excludes the node), else the free capacity
// of the GPUs too small for it (partly used GPUs for whole-GPU shapes,
// shares with less room than the shape's). A gang that fits on one node,
// and each fractional or host-only rank, goes where its placement grows
// that sum least, with a small best-fit term (the GPU and CPU it leaves)
// for near-ties. Unlike FGD, a shape bound to some nodes by a selector
// weighs more the fewer of the cluster's GPUs it may use (weighScarcity).

// fragBestFit weighs the best-fit term, which runs from 0 (nothing left)
// to 1 (all of the largest node left), against fragmentation deltas in
// milli-GPUs per request: a tie-break for changes worth less than a
// twentieth of a GPU per request, which FGD's own scores cannot tell
// apart.
const fragBestFit = 50.0

// maxDemands bounds the request shapes a model weighs; the rarest beyond
// it are dropped.
const maxDemands = 256

// fragModel is a pass's workload as fragmentation measures it. Immutable
// once built; shared by clones of the cluster.
type fragModel struct {
	groups []fragGroup
	// hostAware: some shape asks for CPU or memory that the cluster
	// limits; selAware: some shape has a selector. Without either, a
	// node's fragmentation depends only on its GPUs.
	hostAware, selAware bool
	gpuScale            float64 // milli-GPUs of the largest node
	maxCPU              float64 // CPU millis of the largest node; 0 unknown
	// byCount[k] is the fragmentation of a node with k free GPUs and no
	// shared GPU, when neither hostAware nor selAware.
	byCount []float64
}

// fragGroup is the shapes of one GPU need and selector.
type fragGroup struct {
	gpus   int // whole GPUs; 0 for a share
	milli  int // share of one GPU; 0 for whole GPUs
	selKey string
	sel    []bool // nodes it may use; nil any
	w      float64
	// items are the group's host needs with their weights (summing to
	// w); maxCPU and maxMem their largest.
	items          []fragHost
	maxCPU, maxMem int64
}

type fragHost struct {
	cpu, mem int64
	w        float64
}

// demandKey is a request shape as the model aggregates it.
type demandKey struct {
	gpus, milli int
	cpu, mem    int64
	sel         string
}

// demandSet collects weighted shapes.
type demandSet struct {
	w     map[demandKey]float64
	plain []float64 // whole-GPU shapes without host needs or selector, by GPUs
	sels  map[string]selSpec
	total float64 // every shape's weight, those the model ignores included
	c     *cluster
}

type selSpec struct {
	eq map[string]string
	in map[string][]string
}

func newDemandSet(c *cluster) *demandSet {
	return &demandSet{w: map[demandKey]float64{}, plain: make([]float64, c.hw), sels: map[string]selSpec{}, c: c}
}

// add counts w of a shape. Host needs the cluster does not limit are
// dropped, so that they do not split shapes.
func (d *demandSet) add(k demandKey, w float64) {
	d.total += w
	if !d.c.cpuLimited {
		k.cpu = 0
	}
	if !d.c.memLimited {
		k.mem = 0
	}
	if k.milli == 0 && k.cpu == 0 && k.mem == 0 && k.sel == "" && k.gpus < len(d.plain) {
		d.plain[k.gpus] += w
		return
	}
	d.w[k] += w
}

// selector returns the key of a request's selectors, remembering them.
func (d *demandSet) selector(eq map[string]string, in map[string][]string) string {
	if len(eq) == 0 && len(in) == 0 {
		return ""
	}
	key := fmtSelector(eq, in)
	if _, ok := d.sels[key]; !ok {
		d.sels[key] = selSpec{eq, in}
	}
	return key
}

// addRequests counts the pending requests: a whole-GPU gang by its
// per-node pieces (the whole gang when it fits one node, else a node's
// worth, or RanksPerNode ranks), a fractional or host-only gang by its
// ranks. MIG requests are not modelled.
func (d *demandSet) addRequests(reqs []Request) {
	maxG := d.c.hw - 1
	for i := range reqs {
		r := &reqs[i]
		if r.Ranks < 1 || r.MIGProfile != "" || r.GPUsPerRank < 0 || r.RanksPerNode < 0 {
			continue
		}
		cpu, mem := max(0, r.CPUMillisPerRank), max(0, r.MemoryBytesPerRank)
		sel := d.selector(r.NodeSelector, r.NodeSelectorIn)
		switch {
		case r.HostOnly:
			d.total += float64(r.Ranks)
		case r.GPUMilli > 0 && r.GPUMilli < 1000:
			d.add(demandKey{milli: r.GPUMilli, cpu: cpu, mem: mem, sel: sel}, float64(r.Ranks))
		case r.GPUMilli == 0:
			gpr := max(1, r.GPUsPerRank)
			if gpr > maxG {
				continue
			}
			rpn := r.RanksPerNode
			if rpn == 0 {
				rpn = min(r.Ranks, maxG/gpr)
			}
			rpn = min(rpn, r.Ranks)
			if rpn*gpr > maxG {
				continue
			}
			pieces := (r.Ranks + rpn - 1) / rpn
			d.add(demandKey{gpus: rpn * gpr, cpu: cpu * int64(rpn), mem: mem * int64(rpn), sel: sel}, float64(pieces))
		}
	}
}

// addRunning counts running jobs by what they hold per node.
func (d *demandSet) addRunning(run []runJob) {
	for j := range run {
		rj := &run[j]
		for _, m := range rj.parts {
			if k := bits.OnesCount64(m.mask); k > 0 {
				d.add(demandKey{gpus: k, cpu: m.cpu, mem: m.mem}, 1)
			}
		}
		for _, op := range rj.frac {
			switch {
			case op.gpu < 0:
				d.total++
			case op.milli > 0:
				d.add(demandKey{milli: op.milli, cpu: op.cpu, mem: op.mem}, 1)
			}
		}
	}
}

// addDemands counts a workload given in Options.
func (d *demandSet) addDemands(ds []Demand) {
	for i := range ds {
		x := &ds[i]
		if !(x.Weight > 0) || x.GPUs < 0 || x.GPUMilli < 0 || x.GPUMilli >= 1000 {
			continue
		}
		sel := d.selector(x.NodeSelector, x.NodeSelectorIn)
		cpu, mem := max(0, x.CPUMillis), max(0, x.MemoryBytes)
		switch {
		case x.GPUMilli > 0:
			d.add(demandKey{milli: x.GPUMilli, cpu: cpu, mem: mem, sel: sel}, x.Weight)
		case x.GPUs > 0:
			d.add(demandKey{gpus: x.GPUs, cpu: cpu, mem: mem, sel: sel}, x.Weight)
		default:
			d.total += x.Weight
		}
	}
}

// model turns the shapes into a fragModel; nil when there are none.
func (d *demandSet) model(p *Pass) *fragModel {
	type kw struct {
		k demandKey
		w float64
	}
	list := make([]kw, 0, len(d.w)+len(d.plain))
	for g, w := range d.plain {
		if w > 0 {
			list = append(list, kw{demandKey{gpus: g}, w})
		}
	}
	for k, w := range d.w {
		list = append(list, kw{k, w})
	}
	if len(list) == 0 || !(d.total > 0) {
		return nil
	}
	slices.SortFunc(list, func(a, b kw) int {
		if a.w != b.w {
			return cmp.Compare(b.w, a.w)
		}
		return compareDemand(a.k, b.k)
	})
	list = list[:min(len(list), maxDemands)]
	slices.SortFunc(list, func(a, b kw) int { return compareDemand(a.k, b.k) })
	c := p.c
	m := &fragModel{gpuScale: float64(1000 * max(1, c.hw-1))}
	if c.cpuLimited {
		m.maxCPU = float64(c.maxCPU)
	}
	for _, e := range list {
		k := e.k
		n := len(m.groups)
		if n == 0 || m.groups[n-1].gpus != k.gpus || m.groups[n-1].milli != k.milli || m.groups[n-1].selKey != k.sel {
			gr := fragGroup{gpus: k.gpus, milli: k.milli, selKey: k.sel}
			if k.sel != "" {
				s := d.sels[k.sel]
				gr.sel = p.selector(k.sel, s.eq, s.in)
				m.selAware = true
			}
			m.groups = append(m.groups, gr)
			n++
		}
		gr := &m.groups[n-1]
		w := e.w / d.total
		gr.w += w
		gr.items = append(gr.items, fragHost{k.cpu, k.mem, w})
		gr.maxCPU, gr.maxMem = max(gr.maxCPU, k.cpu), max(gr.maxMem, k.mem)
		m.hostAware = m.hostAware || k.cpu > 0 || k.mem > 0
	}
	m.weighScarcity(c)
	if !m.hostAware && !m.selAware {
		m.byCount = make([]float64, c.hw)
		for k := range c.hw {
			m.byCount[k] = m.fragOf(-1, k, nil, hostUnlimited, hostUnlimited)
		}
	}
	return m
}

// weighScarcity weighs each shape bound by a selector by the inverse of
// the share of the cluster's GPUs its selector allows: a shape that can
// use a tenth of the GPUs counts ten times, because filling those GPUs
// with requests that could go anywhere costs it ten times what it costs a
// shape that can go anywhere. Plain FGD weighs shapes by frequency only,
// and lets unconstrained requests fill the GPU models that constrained
// ones need. The weights are then scaled back to their old sum.
func (m *fragModel) weighScarcity(c *cluster) {
	if !m.selAware || c.sumGPUs == 0 {
		return
	}
	old, scaled := 0.0, 0.0
	for i := range m.groups {
		gr := &m.groups[i]
		old += gr.w
		if gr.sel == nil {
			scaled += gr.w
			continue
		}
		allowed := 0
		for n, ok := range gr.sel {
			if ok {
				allowed += int(c.total[n])
			}
		}
		if allowed > 0 {
			k := float64(c.sumGPUs) / float64(allowed)
			gr.w *= k
			for j := range gr.items {
				gr.items[j].w *= k
			}
		}
		scaled += gr.w
	}
	// Shapes outside the groups (host-only, dropped) keep 1-old.
	z := 1 / (scaled + (1 - old))
	for i := range m.groups {
		gr := &m.groups[i]
		gr.w *= z
		for j := range gr.items {
			gr.items[j].w *= z
		}
	}
}

func compareDemand(a, b demandKey) int {
	if a.gpus != b.gpus {
		return cmp.Compare(a.gpus, b.gpus)
	}
	if a.milli != b.milli {
		return cmp.Compare(a.milli, b.milli)
	}
	if a.sel != b.sel {
		return strings.Compare(a.sel, b.sel)
	}
	if a.cpu != b.cpu {
		return cmp.Compare(a.cpu, b.cpu)
	}
	return cmp.Compare(a.mem, b.mem)
}

// buildFrag builds the pass's fragmentation model from Options.Workload,
// or from its requests and running jobs.
func (p *Pass) buildFrag() *fragModel {
	d := newDemandSet(p.c)
	if p.opts.Workload != nil {
		d.addDemands(p.opts.Workload)
	} else {
		d.addRequests(p.reqs)
		d.addRunning(p.run)
	}
	return d.model(p)
}

// fragOf returns the expected fragmentation of node n (-1: any node a
// selector allows) with free whole GPUs, time-sliced GPUs with the given
// free milli-GPUs, and free CPU and memory.
func (m *fragModel) fragOf(n int32, free int, shares []int16, cpu, mem int64) float64 {
	left := 0
	for _, l := range shares {
		left += int(l)
	}
	idle := float64(free*1000 + left)
	if idle == 0 {
		return 0
	}
	f := 0.0
	for i := range m.groups {
		gr := &m.groups[i]
		if gr.sel != nil && (n < 0 || !gr.sel[n]) {
			f += gr.w * idle
			continue
		}
		ok, small := free >= gr.gpus, left
		if gr.milli > 0 {
			ok, small = free > 0, 0
			for _, l := range shares {
				if int(l) >= gr.milli {
					ok = true
				} else {
					small += int(l)
				}
			}
		}
		if !ok {
			f += gr.w * idle
			continue
		}
		fit := gr.w
		if gr.maxCPU > cpu || gr.maxMem > mem {
			fit = 0
			for _, it := range gr.items {
				if it.cpu <= cpu && it.mem <= mem {
					fit += it.w
				}
			}
		}
		f += fit*float64(small) + (gr.w-fit)*idle
	}
	return f
}

// bestFit is the best-fit term of a score: the share of the largest node's
// GPUs (and, where CPU is known, of its CPU) node n would have left.
func (m *fragModel) bestFit(c *cluster, n int32, idleAfter int, cpuAfter int64) float64 {
	v := 0.5 * float64(idleAfter) / m.gpuScale
	if m.maxCPU > 0 && c.cpuCap[n] > 0 {
		v += 0.5 * float64(cpuAfter) / m.maxCPU
	}
	return fragBestFit * v
}

// bestNodeFrag is bestNode for the Topology strategy with a
// fragmentation model: among the nodes of group (Lg, gg) that hold need
// units of g, the one whose fragmentation grows least, best fit after;
// ties go to the fuller node.
func (c *cluster) bestNodeFrag(g *gang, need int, Lg int, gg int32) (int32, bool) {
	m := c.fm
	take := need * g.uRanks * g.gpr
	ranks := int64(need * g.uRanks)
	cpu, mem := ranks*g.cpuPR, ranks*g.memPR
	lo, hi := c.span(Lg, gg)
	if g.flat && m.byCount != nil && c.nshared == 0 && !c.cpuLimited {
		// A node's fragmentation is a function of its free GPUs.
		score := func(k int) float64 {
			return m.byCount[k-take] - m.byCount[k] + fragBestFit*0.5*float64((k-take)*1000)/m.gpuScale
		}
		if Lg >= lvLeaf {
			h := c.hist[Lg][int(gg)*c.hw:][:c.hw]
			bestK, bestS := -1, 0.0
			for k := 1; k < c.hw; k++ {
				if h[k] == 0 || int(g.f[k]) < need {
					continue
				}
				if s := score(k); bestK < 0 || s < bestS {
					bestK, bestS = k, s
				}
			}
			if bestK < 0 {
				return -1, false
			}
			return c.nodeWithFree(bestK, Topology, Lg, gg)
		}
		best, bestS := int32(-1), 0.0
		for n := lo; n < hi; n++ {
			if c.unitsOn(g, n) < need {
				continue
			}
			if s := score(int(c.nfree[n])); best < 0 || s < bestS || (s == bestS && c.fuller(lvNode, n, best)) {
				best, bestS = n, s
			}
		}
		return best, best >= 0
	}
	var left []int16
	best, bestS := int32(-1), 0.0
	for n := lo; n < hi; n++ {
		if c.unitsOn(g, n) < need {
			continue
		}
		left, _ = c.sharesOf(n, left[:0], nil)
		free := int(c.nfree[n])
		idle := free * 1000
		for _, l := range left {
			idle += int(l)
		}
		before := m.fragOf(n, free, left, c.cpuFree[n], c.memFree[n])
		after := m.fragOf(n, free-take, left, c.cpuFree[n]-cpu, c.memFree[n]-mem)
		s := after - before + m.bestFit(c, n, idle-take*1000, c.cpuFree[n]-cpu)
		if best < 0 || s < bestS || (s == bestS && c.fuller(lvNode, n, best)) {
			best, bestS = n, s
		}
	}
	return best, best >= 0
}

// fracChoice is a candidate GPU (or, for a host-only rank, node) for one
// fractional rank.
type fracChoice struct {
	node  int32
	gpu   int  // -1: none (host-only)
	share bool // joins a GPU already shared
	left  int  // milli-GPUs the GPU has left after
	score float64
}

// better orders candidates: the lower score; then joining a shared GPU
// over breaking a whole one; then the tighter GPU; then the fuller node;
// then the lower GPU index.
func (c *cluster) better(a, b *fracChoice) bool {
	if b.node < 0 {
		return true
	}
	if a.score != b.score {
		return a.score < b.score
	}
	if a.share != b.share {
		return a.share
	}
	if a.left != b.left {
		return a.left < b.left
	}
	if a.node != b.node {
		return c.fuller(lvNode, a.node, b.node)
	}
	return a.gpu < b.gpu
}

// fracByFrag chooses where one time-sliced or host-only rank of g goes:
// the GPU (host-only: the node) where its placement grows the node's
// expected fragmentation least, best fit after.
func (c *cluster) fracByFrag(g *gang) (fracOp, bool) {
	m := c.fm
	best := fracChoice{node: -1}
	var left []int16
	var at []int32
	for n := range int32(c.nn) {
		if !g.eligible(c, n) || !c.hostFits(g, n) {
			continue
		}
		free := int(c.nfree[n])
		left, at = c.sharesOf(n, left[:0], at[:0])
		idle := free * 1000
		room := free > 0
		for _, l := range left {
			idle += int(l)
			room = room || int(l) >= g.milli
		}
		if !room && !g.hostOnly {
			continue
		}
		cpu, mem := c.cpuFree[n]-g.cpuPR, c.memFree[n]-g.memPR
		before := m.fragOf(n, free, left, c.cpuFree[n], c.memFree[n])
		if g.hostOnly {
			ch := fracChoice{node: n, gpu: -1, score: m.fragOf(n, free, left, cpu, mem) - before + m.bestFit(c, n, idle, cpu)}
			if c.better(&ch, &best) {
				best = ch
			}
			continue
		}
		for i, l := range left {
			if int(l) < g.milli {
				continue
			}
			left[i] = l - int16(g.milli)
			after := m.fragOf(n, free, left, cpu, mem)
			left[i] = l
			ch := fracChoice{node: n, gpu: int(c.shared[at[i]].gpu), share: true, left: int(l) - g.milli,
				score: after - before + m.bestFit(c, n, idle-g.milli, cpu)}
			if c.better(&ch, &best) {
				best = ch
			}
		}
		if free > 0 {
			left = append(left, int16(1000-g.milli))
			after := m.fragOf(n, free-1, left, cpu, mem)
			left = left[:len(left)-1]
			ch := fracChoice{node: n, gpu: bits.TrailingZeros64(c.free[n]), left: 1000 - g.milli,
				score: after - before + m.bestFit(c, n, idle-g.milli, cpu)}
			if c.better(&ch, &best) {
				best = ch
			}
		}
	}
	if best.node < 0 {
		return fracOp{}, false
	}
	return fracOp{node: best.node, gpu: best.gpu, created: best.gpu >= 0 && !best.share, milli: g.milli, cpu: g.cpuPR, mem: g.memPR}, true
}
