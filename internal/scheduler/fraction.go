package scheduler

import (
	"fmt"
	"math/bits"
	"strconv"
	"strings"
)

// MIGShape is what a MIG profile takes of a GPU. The scheduler models an
// A100/H100-style GPU: 7 compute slices and 8 placement positions; an
// instance covers Width consecutive positions and may start only at
// positions in Starts.
type MIGShape struct {
	// Profile is the name parsed, such as "3g.40gb".
	Profile string
	// ComputeSlices is the N of "Ng": 1, 2, 3, 4 or 7.
	ComputeSlices int
	// Width is how many of the 8 positions the instance covers.
	Width int
	// Starts marks the positions where it may start (bit i = position i).
	Starts uint8
}

// milli returns the share of the GPU the instance counts as in quotas and
// fair share: its compute slices out of 7, in thousandths, rounded up.
func (m MIGShape) milli() int { return (m.ComputeSlices*1000 + 6) / 7 }

// bits returns the positions the instance covers when it starts at s.
func (m MIGShape) bits(s int) uint8 { return uint8((1<<uint(m.Width) - 1) << uint(s)) }

// migShapes gives, per compute-slice count, the width and valid starts of
// NVIDIA's A100/H100 placement table.
var migShapes = map[int]MIGShape{
	1: {ComputeSlices: 1, Width: 1, Starts: 0b0111_1111},
	2: {ComputeSlices: 2, Width: 2, Starts: 0b0001_0101},
	3: {ComputeSlices: 3, Width: 4, Starts: 0b0001_0001},
	4: {ComputeSlices: 4, Width: 4, Starts: 0b0000_0001},
	7: {ComputeSlices: 7, Width: 8, Starts: 0b0000_0001},
}

// ParseMIGProfile parses a MIG profile name "<N>g.<M>gb", optionally with a
// "+me" or "+gfx" suffix, such as "1g.10gb" or "3g.40gb". N must be 1, 2,
// 3, 4 or 7. The memory size is checked for form only: it depends on the
// GPU model.
func ParseMIGProfile(s string) (MIGShape, error) {
	bad := func(why string) (MIGShape, error) {
		return MIGShape{}, fmt.Errorf("MIG profile %q: %s (want <N>g.<M>gb such as 1g.10gb or 3g.40gb)", s, why)
	}
	name := s
	if i := strings.IndexByte(name, '+'); i >= 0 {
		switch name[i:] {
		case "+me", "+gfx", "+me.all":
		default:
			return bad(fmt.Sprintf("unknown suffix %q", name[i:]))
		}
		name = name[:i]
	}
	gi := strings.Index(name, "g.")
	if gi <= 0 {
		return bad("no \"g.\" after the compute slices")
	}
	n, err := strconv.Atoi(name[:gi])
	if err != nil || n < 1 {
		return bad(fmt.Sprintf("compute slices %q are not a positive number", name[:gi]))
	}
	shape, ok := migShapes[n]
	if !ok {
		return bad(fmt.Sprintf("no profile has %d compute slices; valid are 1, 2, 3, 4 and 7", n))
	}
	mem := name[gi+2:]
	if !strings.HasSuffix(mem, "gb") {
		return bad("memory does not end in \"gb\"")
	}
	if m, err := strconv.Atoi(mem[:len(mem)-2]); err != nil || m < 1 {
		return bad(fmt.Sprintf("memory %q is not a positive number of GB", mem))
	}
	shape.Profile = s
	return shape, nil
}

type migProfile = MIGShape

// fracOp is one change a fractional rank made, so it can be undone or
// repeated on another cluster.
type fracOp struct {
	node     int32
	gpu      int  // -1: a host-only rank
	created  bool // the GPU was wholly free and became shared
	milli    int
	mig      uint8
	cpu, mem int64 // host resources the rank holds
}

// fitMIG returns the lowest start at which shape fits beside used, or -1.
func fitMIG(shape MIGShape, used uint8) int {
	for s := 0; s < 8; s++ {
		if shape.Starts&(1<<uint(s)) != 0 && used&shape.bits(s) == 0 {
			return s
		}
	}
	return -1
}

// placeFrac places every rank of a fractional or host-only gang on c,
// or none, a rank at a time. With a fragmentation model (the Topology
// strategy) each rank goes where the node's expected fragmentation grows
// least (see fracByFrag). Otherwise a time-sliced or MIG rank goes to the
// shared GPU it fits most tightly (best fit), and only when none has room
// to a wholly free GPU on the node with the fewest free GPUs, so that
// whole GPUs and whole nodes stay free; a host-only rank goes to the node
// with the least CPU left.
func (c *cluster) placeFrac(g *gang, strat Strategy, one *gang) (Placement, []fracOp, bool) {
	ops := make([]fracOp, 0, g.req.Ranks)
	pl := Placement{JobID: g.req.JobID, Ranks: make([]Slot, 0, g.req.Ranks)}
	fail := func() (Placement, []fracOp, bool) {
		c.undoFrac(ops)
		return Placement{}, nil, false
	}
	for range g.req.Ranks {
		var op fracOp
		var ok bool
		switch {
		case c.fm != nil && strat == Topology && g.mig.Width == 0:
			op, ok = c.fracByFrag(g)
		case g.hostOnly:
			op, ok = c.hostBestFit(g)
		default:
			op, ok = c.fracBestFit(g, strat, one)
		}
		if !ok {
			return fail()
		}
		c.applyFrac(op)
		ops = append(ops, op)
		slot := Slot{Node: c.topo.NodeName(nodeID(op.node)), CPUMillis: op.cpu, MemoryBytes: op.mem, DP: len(pl.Ranks)}
		switch {
		case g.hostOnly:
		case g.milli > 0:
			slot.GPUs, slot.Milli = []int{op.gpu}, g.milli
		default:
			slot.GPUs = []int{op.gpu}
			slot.MIGProfile = g.req.MIGProfile
			slot.MIGStart = bits.TrailingZeros8(op.mig)
		}
		pl.Ranks = append(pl.Ranks, slot)
	}
	if g.required < lvRoot {
		for _, op := range ops[1:] {
			if c.grp[g.required][op.node] != c.grp[g.required][ops[0].node] {
				return fail()
			}
		}
	}
	picks := make([]pick, len(ops))
	for i, op := range ops {
		picks[i] = pick{id: op.node}
	}
	sortPicks(picks)
	pl.Nodes, pl.Leaves, pl.Spines = c.spanCounts(picks)
	return pl, ops, true
}

// fracBestFit chooses a time-sliced or MIG rank's GPU by best fit: the
// shared GPU with the least room left after it, else a wholly free GPU
// of the node bestNode chooses.
func (c *cluster) fracBestFit(g *gang, strat Strategy, one *gang) (fracOp, bool) {
	best, bestLeft, bestStart := -1, 1<<30, -1
	for i := range c.shared {
		s := &c.shared[i]
		if s.mode == 0 || !g.eligible(c, s.node) || !c.hostFits(g, s.node) {
			continue
		}
		left, start := -1, -1
		switch {
		case g.milli > 0 && s.mode == shareMilli:
			left = 1000 - int(s.milli) - g.milli
		case g.milli == 0 && s.mode == shareMIG:
			if start = fitMIG(g.mig, s.mig); start >= 0 {
				left = 8 - bits.OnesCount8(s.mig) - g.mig.Width
			}
		}
		if left < 0 {
			continue
		}
		if best < 0 || left < bestLeft || (left == bestLeft && c.tighterShare(s, &c.shared[best])) {
			best, bestLeft, bestStart = i, left, start
		}
	}
	if best >= 0 {
		s := &c.shared[best]
		op := fracOp{node: s.node, gpu: int(s.gpu), milli: g.milli, cpu: g.cpuPR, mem: g.memPR}
		if g.milli == 0 {
			op.mig = g.mig.bits(bestStart)
		}
		return op, true
	}
	one.sel, one.cpuPR, one.memPR, one.host, one.flat = g.sel, g.cpuPR, g.memPR, g.host, g.flat
	n, ok := c.bestNode(one, strat, 1, lvRoot, 0)
	if !ok {
		return fracOp{}, false
	}
	op := fracOp{node: n, gpu: bits.TrailingZeros64(c.free[n]), created: true, milli: g.milli, cpu: g.cpuPR, mem: g.memPR}
	if g.milli == 0 {
		op.mig = g.mig.bits(fitMIG(g.mig, 0))
	}
	return op, true
}

// tighterShare breaks a tie between shared GPUs a and b with the same room:
// the fuller node, then the lower GPU index, whatever their order in the
// snapshot.
func (c *cluster) tighterShare(a, b *sharedGPU) bool {
	if a.node != b.node {
		return c.fuller(lvNode, a.node, b.node)
	}
	return a.gpu < b.gpu
}

// hostBestFit chooses a host-only rank's node: the least CPU left after
// it, then the least memory, then the lowest id.
func (c *cluster) hostBestFit(g *gang) (fracOp, bool) {
	best := int32(-1)
	for n := range int32(c.nn) {
		if !g.eligible(c, n) || !c.hostFits(g, n) {
			continue
		}
		if best < 0 || c.cpuFree[n] < c.cpuFree[best] || (c.cpuFree[n] == c.cpuFree[best] && c.memFree[n] < c.memFree[best]) {
			best = n
		}
	}
	if best < 0 {
		return fracOp{}, false
	}
	return fracOp{node: best, gpu: -1, cpu: g.cpuPR, mem: g.memPR}, true
}

// applyFrac makes op's change on c.
func (c *cluster) applyFrac(op fracOp) {
	c.takeHost(op.node, op.cpu, op.mem)
	if op.gpu < 0 {
		return
	}
	i := c.sharedIdx(op.node, op.gpu)
	if i < 0 {
		c.take(op.node, 1<<uint(op.gpu))
		s := sharedGPU{node: op.node, gpu: int8(op.gpu)}
		if op.milli > 0 {
			s.mode = shareMilli
		} else {
			s.mode = shareMIG
		}
		i = c.linkShared(s)
	}
	c.version++
	s := &c.shared[i]
	s.milli += int16(op.milli)
	s.mig |= op.mig
}

// releaseFrac removes op's use; a GPU nobody shares any more becomes
// wholly free.
func (c *cluster) releaseFrac(op fracOp) {
	c.giveHost(op.node, op.cpu, op.mem)
	if op.gpu < 0 {
		return
	}
	i := c.sharedIdx(op.node, op.gpu)
	if i < 0 {
		return
	}
	c.version++
	s := &c.shared[i]
	s.milli = max(0, s.milli-int16(op.milli))
	s.mig &^= op.mig
	if s.milli == 0 && s.mig == 0 {
		s.mode = 0
		c.nshared--
		c.give(op.node, 1<<uint(op.gpu))
	}
}

// undoFrac reverses ops, last first.
func (c *cluster) undoFrac(ops []fracOp) {
	for i := len(ops) - 1; i >= 0; i-- {
		c.releaseFrac(ops[i])
	}
}
