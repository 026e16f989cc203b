package scheduler

import (
	"fmt"
	"math/bits"
	"slices"

	"github.com/gangway/gangway/internal/topology"
)

// maxNodeGPUs bounds the GPUs per node the scheduler uses: a node's free
// GPUs are one uint64 bitmask.
const maxNodeGPUs = 64

// Levels of the placement hierarchy. Every group at one level is a
// contiguous range of node ids and lies inside one group of the next
// level, so a group's children are a contiguous range of ids too.
const (
	lvNode  = 0
	lvDom   = 1 // an NVLink domain's nodes under one leaf
	lvLeaf  = 2
	lvSpine = 3
	lvRoot  = 4
	nLevels = 5
)

var levelWords = [nLevels]string{"node", "NVLink domain", "leaf", "spine", "cluster"}

// cluster is the scheduler's working state: which GPUs are free, counted
// per node, NVLink domain, leaf, spine and cluster, so a decision reads a
// few counters instead of rescanning nodes. It is built once per pass from
// the snapshot and changed in place as gangs are placed.
//
// Immutable fields are shared between a cluster and its clones.
type cluster struct {
	topo *topology.Topology
	nn   int
	hw   int // histogram width: max GPUs per node + 1

	// Per node, immutable.
	ok               []bool // in the snapshot
	total            []uint8
	all              []uint64 // mask of the node's usable GPU indices
	labels           []map[string]string
	grp              [nLevels][]int32 // grp[L][node]: group at level L
	start            [nLevels][]int32 // start[L][g]: first node of group g; len ngroups+1
	multi            bool             // some NVLink domain has more than one node
	okNodes, sumGPUs int              // nodes in the snapshot, and their GPUs
	rail             [][]int16        // rail of each GPU per node; nil when unknown

	// Mutable.
	free  []uint64
	nfree []uint8
	hist  [nLevels][]int32 // hist[L][g*hw+k]: nodes of group g with k free GPUs
	gfree [nLevels][]int32 // free GPUs per group

	shared []sharedGPU
	// shareHead[n] is node n's most recent entry in shared (-1: none);
	// a node's entries link through sharedGPU.next, so finding a GPU's
	// entry walks its node's few. nshared counts the entries in use.
	shareHead []int32
	nshared   int

	// Host resources per node: capacity (immutable; zero where unknown)
	// and what is free (hostUnlimited where the capacity is unknown).
	cpuCap, memCap         []int64
	cpuFree, memFree       []int64
	cpuLimited, memLimited bool  // some node has a known capacity
	maxCPU, maxMem         int64 // the largest known capacities

	// fm is the pass's fragmentation model (Topology strategy); nil
	// when placement ignores fragmentation. Immutable, shared by clones.
	fm *fragModel

	// held marks GPUs reserved for a blocked gang (nil: none): give
	// leaves them busy, so that a search that releases running jobs does
	// not hand them to another gang.
	held []uint64

	// version counts changes to free GPUs and host resources, for
	// memoized reasons.
	version uint64
}

// hostUnlimited is the free CPU or memory of a node whose capacity is not
// known: more than any request.
const hostUnlimited = int64(1) << 60

// sharedGPU is a GPU held in part by fractional ranks. A zeroed entry
// (mode 0) has been returned to the free GPUs.
type sharedGPU struct {
	node  int32
	gpu   int8
	mode  uint8 // shareMilli or shareMIG; 0 once released
	milli int16 // used thousandths, shareMilli
	mig   uint8 // used MIG positions, shareMIG
	next  int32 // the node's previous entry in shared, -1 none
}

const (
	shareMilli = 1
	shareMIG   = 2
)

// sharedIdx returns the index in shared of GPU gpu of node n while it is
// shared, or -1.
func (c *cluster) sharedIdx(n int32, gpu int) int32 {
	for i := c.shareHead[n]; i >= 0; i = c.shared[i].next {
		if s := &c.shared[i]; s.mode != 0 && int(s.gpu) == gpu {
			return i
		}
	}
	return -1
}

// newCluster builds the working state. Nodes the topology does not know
// are skipped with a warning.
func newCluster(snap *Snapshot, warn func(string)) *cluster {
	topo := snap.Topology
	if topo == nil {
		topo = topologyFromLabels(snap.Nodes, warn)
	}
	nn := topo.NumNodes()
	c := &cluster{topo: topo, nn: nn}
	c.ok = make([]bool, nn)
	c.total = make([]uint8, nn)
	c.all = make([]uint64, nn)
	c.labels = make([]map[string]string, nn)
	c.free = make([]uint64, nn)
	c.nfree = make([]uint8, nn)
	c.rail = make([][]int16, nn)
	c.shareHead = make([]int32, nn)
	c.cpuCap, c.memCap = make([]int64, nn), make([]int64, nn)
	c.cpuFree, c.memFree = make([]int64, nn), make([]int64, nn)
	for n := range nn {
		c.shareHead[n] = -1
		c.cpuFree[n], c.memFree[n] = hostUnlimited, hostUnlimited
	}
	nshare := 0
	for i := range snap.Nodes {
		nshare += len(snap.Nodes[i].Shared)
	}
	c.shared = make([]sharedGPU, 0, nshare)
	maxG := 0
	for i := range snap.Nodes {
		n := &snap.Nodes[i]
		id, found := topo.NodeByName(n.Name)
		if !found {
			warn(fmt.Sprintf("node %s is not in the topology; not scheduled", n.Name))
			continue
		}
		if c.ok[id] {
			warn(fmt.Sprintf("node %s is listed twice; the first entry is used", n.Name))
			continue
		}
		total := n.Total
		if total > maxNodeGPUs {
			warn(fmt.Sprintf("node %s has %d GPUs; only the first %d are scheduled", n.Name, total, maxNodeGPUs))
			total = maxNodeGPUs
		}
		if total < 0 {
			total = 0
		}
		c.ok[id] = true
		c.total[id] = uint8(total)
		if total == 64 {
			c.all[id] = ^uint64(0)
		} else {
			c.all[id] = 1<<uint(total) - 1
		}
		c.labels[id] = n.Labels
		if n.CPUMillis > 0 {
			c.cpuCap[id], c.cpuFree[id] = n.CPUMillis, n.CPUMillis-max(0, n.CPUMillisUsed)
			c.cpuLimited, c.maxCPU = true, max(c.maxCPU, n.CPUMillis)
		}
		if n.MemoryBytes > 0 {
			c.memCap[id], c.memFree[id] = n.MemoryBytes, n.MemoryBytes-max(0, n.MemoryBytesUsed)
			c.memLimited, c.maxMem = true, max(c.maxMem, n.MemoryBytes)
		}
		var m uint64
		for _, g := range n.Free {
			if g >= 0 && g < total {
				m |= 1 << uint(g)
			}
		}
		for _, s := range n.Shared {
			if s.Index < 0 || s.Index >= total {
				warn(fmt.Sprintf("node %s: shared GPU %d does not exist", n.Name, s.Index))
				continue
			}
			m &^= 1 << uint(s.Index)
			sg := sharedGPU{node: int32(id), gpu: int8(s.Index)}
			switch {
			case s.MIGUsed != 0:
				sg.mode, sg.mig = shareMIG, s.MIGUsed
			case s.UsedMilli > 0 && s.UsedMilli < 1000:
				sg.mode, sg.milli = shareMilli, int16(s.UsedMilli)
			default:
				warn(fmt.Sprintf("node %s: shared GPU %d has no fractional use (milli %d); treated as busy", n.Name, s.Index, s.UsedMilli))
				continue
			}
			if c.sharedIdx(sg.node, s.Index) >= 0 {
				warn(fmt.Sprintf("node %s: shared GPU %d is listed twice; the first entry is used", n.Name, s.Index))
				continue
			}
			c.linkShared(sg)
		}
		c.free[id] = m
		c.nfree[id] = uint8(bits.OnesCount64(m))
		maxG = max(maxG, total)
		if tg := topo.GPUs(id); tg > 0 {
			var r []int16 // allocated at the first known rail
			for g := range min(tg, total) {
				if rl := topo.Rail(topology.GPURef{Node: id, GPU: int32(g)}); rl >= 0 {
					if r == nil {
						r = make([]int16, total)
						for k := range r {
							r[k] = -1
						}
					}
					r[g] = int16(rl)
				}
			}
			c.rail[id] = r
		}
	}
	c.hw = maxG + 1
	for n := range nn {
		if c.ok[n] {
			c.okNodes++
			c.sumGPUs += int(c.total[n])
		}
	}
	c.buildHierarchy()
	return c
}

// linkShared adds s to the shared GPUs, in use.
func (c *cluster) linkShared(s sharedGPU) int32 {
	i := int32(len(c.shared))
	s.next = c.shareHead[s.node]
	c.shareHead[s.node] = i
	c.shared = append(c.shared, s)
	c.nshared++
	return i
}

// sharesOf appends the free milli-GPUs of node n's time-sliced GPUs to
// left, and their indices in c.shared to at.
func (c *cluster) sharesOf(n int32, left []int16, at []int32) ([]int16, []int32) {
	for i := c.shareHead[n]; i >= 0; i = c.shared[i].next {
		if s := &c.shared[i]; s.mode == shareMilli {
			left = append(left, 1000-s.milli)
			at = append(at, i)
		}
	}
	return left, at
}

// topologyFromLabels builds a topology from the nodes' labels; when the
// labels contradict each other it warns and ignores them.
func topologyFromLabels(nodes []Node, warn func(string)) *topology.Topology {
	build := func(labels bool) (*topology.Topology, error) {
		b := topology.NewBuilder()
		for i := range nodes {
			n := &nodes[i]
			if err := b.AddNode(topology.NodeSpec{Name: n.Name, GPUs: max(0, min(n.Total, maxNodeGPUs)), NVLink: true}); err != nil {
				warn(fmt.Sprintf("node %s: %v", n.Name, err))
				continue
			}
			if labels {
				if err := b.AddLabels(n.Name, n.Labels); err != nil {
					return nil, err
				}
			}
		}
		return b.Build()
	}
	t, err := build(true)
	if err == nil {
		return t
	}
	warn(fmt.Sprintf("topology labels ignored: %v", err))
	if t, err = build(false); err == nil {
		return t
	}
	warn(fmt.Sprintf("no topology: %v", err))
	t, _ = topology.NewBuilder().Build()
	return t
}

// buildHierarchy assigns every node its domain piece, leaf, spine and the
// root, with unknown leaves and spines as groups of their own, and fills
// the counters.
func (c *cluster) buildHierarchy() {
	nn := c.nn
	for L := range nLevels {
		c.grp[L] = make([]int32, nn)
	}
	var counts [nLevels]int32
	for n := range nn {
		id := topology.NodeID(n)
		newLeaf, newSpine, newDom := n == 0, n == 0, n == 0
		if n > 0 {
			prev := topology.NodeID(n - 1)
			leaf, spine := c.topo.Leaf(id), c.topo.Spine(id)
			newLeaf = leaf < 0 || leaf != c.topo.Leaf(prev)
			newSpine = newLeaf && (spine < 0 || spine != c.topo.Spine(prev))
			newDom = newLeaf || c.topo.Domain(id) != c.topo.Domain(prev)
		}
		c.grp[lvNode][n] = int32(n)
		if newDom && n > 0 {
			counts[lvDom]++
		}
		if newLeaf && n > 0 {
			counts[lvLeaf]++
		}
		if newSpine && n > 0 {
			counts[lvSpine]++
		}
		c.grp[lvDom][n] = counts[lvDom]
		c.grp[lvLeaf][n] = counts[lvLeaf]
		c.grp[lvSpine][n] = counts[lvSpine]
		c.grp[lvRoot][n] = 0
	}
	for L := range nLevels {
		ng := 0
		if nn > 0 {
			ng = int(c.grp[L][nn-1]) + 1
		}
		c.start[L] = make([]int32, ng+1)
		for n := nn - 1; n >= 0; n-- {
			c.start[L][c.grp[L][n]] = int32(n)
		}
		c.start[L][ng] = int32(nn)
		if L == lvNode {
			continue
		}
		c.hist[L] = make([]int32, ng*c.hw)
		c.gfree[L] = make([]int32, ng)
		for n := range nn {
			g := c.grp[L][n]
			c.hist[L][int(g)*c.hw+int(c.nfree[n])]++
			c.gfree[L][g] += int32(c.nfree[n])
		}
	}
	for g := 0; g+1 < len(c.start[lvDom]); g++ {
		if c.start[lvDom][g+1]-c.start[lvDom][g] > 1 {
			c.multi = true
			break
		}
	}
}

func (c *cluster) ngroups(L int) int { return len(c.start[L]) - 1 }

// groupOf returns the group at level L that holds node n (n itself at
// lvNode).
func (c *cluster) groupOf(L int, n int32) int32 { return c.grp[L][n] }

// span returns group g's node range [lo, hi) at level L.
func (c *cluster) span(L int, g int32) (lo, hi int32) {
	return c.start[L][g], c.start[L][g+1]
}

// children returns the range of level L-1 groups inside group g of level L.
func (c *cluster) children(L int, g int32) (lo, hi int32) {
	nlo, nhi := c.span(L, g)
	if nlo == nhi {
		return 0, 0
	}
	return c.grp[L-1][nlo], c.grp[L-1][nhi-1] + 1
}

// groupFree returns the free GPUs of group g at level L.
func (c *cluster) groupFree(L int, g int32) int {
	if L == lvNode {
		return int(c.nfree[g])
	}
	return int(c.gfree[L][g])
}

// setFree changes node n's free mask to m and updates the counters.
func (c *cluster) setFree(n int32, m uint64) {
	c.version++
	old := int(c.nfree[n])
	k := bits.OnesCount64(m)
	c.free[n] = m
	c.nfree[n] = uint8(k)
	if k == old {
		return
	}
	for L := lvDom; L < nLevels; L++ {
		g := int(c.grp[L][n])
		h := c.hist[L][g*c.hw:]
		h[old]--
		h[k]++
		c.gfree[L][g] += int32(k - old)
	}
}

// take marks the GPUs of mask on node n busy and returns those that were
// free (the others are left alone).
func (c *cluster) take(n int32, mask uint64) uint64 {
	got := c.free[n] & mask
	if got != 0 {
		c.setFree(n, c.free[n]&^got)
	}
	return got
}

// give marks the GPUs of mask on node n free and returns those that were
// busy. GPUs the node does not have, and shared GPUs, are left alone.
func (c *cluster) give(n int32, mask uint64) uint64 {
	got := mask & c.all[n] &^ c.free[n]
	if c.held != nil {
		got &^= c.held[n]
	}
	for m := got; m != 0; m &= m - 1 {
		g := bits.TrailingZeros64(m)
		if c.sharedIdx(n, g) >= 0 {
			got &^= 1 << uint(g)
		}
	}
	if got != 0 {
		c.setFree(n, c.free[n]|got)
	}
	return got
}

// hold marks GPUs of mask on node n held for a reservation.
func (c *cluster) hold(n int32, mask uint64) {
	if c.held == nil {
		c.held = make([]uint64, c.nn)
	}
	c.held[n] |= mask
}

// takeHost and giveHost change node n's free CPU and memory. A resource
// no node limits is not counted, so that without limits the counters
// never change and clones share them.
func (c *cluster) takeHost(n int32, cpu, mem int64) {
	if !c.cpuLimited {
		cpu = 0
	}
	if !c.memLimited {
		mem = 0
	}
	if cpu|mem != 0 {
		c.version++
		c.cpuFree[n] -= cpu
		c.memFree[n] -= mem
	}
}

func (c *cluster) giveHost(n int32, cpu, mem int64) { c.takeHost(n, -cpu, -mem) }

// takeAll takes the GPUs and host resources of m.
func (c *cluster) takeAll(m nodeMask) {
	c.take(m.node, m.mask)
	c.takeHost(m.node, m.cpu, m.mem)
}

// clone returns a copy whose mutable state is independent of c.
func (c *cluster) clone() *cluster {
	d := *c
	if c.cpuLimited {
		d.cpuFree = slices.Clone(c.cpuFree)
	}
	if c.memLimited {
		d.memFree = slices.Clone(c.memFree)
	}
	d.shareHead = slices.Clone(c.shareHead)
	d.held = slices.Clone(c.held)
	d.free = slices.Clone(c.free)
	d.nfree = slices.Clone(c.nfree)
	for L := range nLevels {
		d.hist[L] = slices.Clone(c.hist[L])
		d.gfree[L] = slices.Clone(c.gfree[L])
	}
	d.shared = slices.Clone(c.shared)
	return &d
}

// cloneInto makes d a clone of c, reusing d's own buffers (those that
// clone would copy) where they are large enough, and returns d; a nil d
// is a new clone. d must not be c, nor share a mutable buffer with it.
func (c *cluster) cloneInto(d *cluster) *cluster {
	if d == nil {
		return c.clone()
	}
	old := *d
	*d = *c
	if c.cpuLimited {
		d.cpuFree = append(old.cpuFree[:0], c.cpuFree...)
	}
	if c.memLimited {
		d.memFree = append(old.memFree[:0], c.memFree...)
	}
	d.shareHead = append(old.shareHead[:0], c.shareHead...)
	d.held = nil
	if c.held != nil {
		d.held = append(old.held[:0], c.held...)
	}
	d.free = append(old.free[:0], c.free...)
	d.nfree = append(old.nfree[:0], c.nfree...)
	for L := range nLevels {
		d.hist[L] = append(old.hist[L][:0], c.hist[L]...)
		d.gfree[L] = append(old.gfree[L][:0], c.gfree[L]...)
	}
	d.shared = append(old.shared[:0], c.shared...)
	return d
}

// totalGPUs returns the GPUs of every node in the snapshot.
func (c *cluster) totalGPUs() int { return c.sumGPUs }

// railOf returns the rail of GPU g on node n, or -1.
func (c *cluster) railOf(n int32, g int) int {
	if r := c.rail[n]; r != nil && g < len(r) {
		return int(r[g])
	}
	return -1
}
