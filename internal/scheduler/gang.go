package scheduler

import (
	"fmt"
	"time"

	"github.com/gangway/gangway/internal/topology"
)

// noEnd is the end time of a job whose duration is unknown.
const noEnd = int64(1<<63 - 1)

// gang is a request with its shape worked out for one cluster.
type gang struct {
	req  *Request
	idx  int // index in the pass's requests
	gpr  int // whole GPUs per rank
	tp   int // resolved tensor-parallel size (1 when not given)
	size topology.Parallelism

	// Fractional: ranks placed one at a time on part of a GPU, or
	// (hostOnly) on no GPU at all.
	frac     bool
	hostOnly bool
	milli    int // per rank, shareMilli
	mig      migProfile

	// Whole-GPU shape: the gang is units × uRanks ranks; f[k] is how many
	// units fit on a node with k free GPUs; rk[k] how many ranks.
	uRanks   int
	units    int
	shaped   bool
	tpAcross bool // TP groups may span the nodes of one NVLink domain
	f, rk    []int32

	gpus      int   // whole GPUs, or ranks for fractional gangs
	usage     int64 // milli-GPUs, for quotas and fair share
	cpu, mem  int64 // the whole gang's, for fair share
	required  int   // widest level allowed, lvRoot when none
	preferred int   // lvRoot when none
	sel       []bool
	selKey    string
	// cpuPR and memPR are each rank's host request; host is set when the
	// cluster limits one that the gang asks for, so that nodes must be
	// checked one by one. flat: no selector and no host limit, so the
	// histograms answer capacity questions.
	cpuPR, memPR int64
	host, flat   bool
	duration     int64 // ns; 0 unknown
	key          reasonKey
}

// levelOf maps a topology level to a hierarchy level; LevelNone is the
// whole cluster.
func levelOf(l topology.Level) int {
	switch l {
	case topology.LevelNVLinkDomain:
		return lvDom
	case topology.LevelLeaf:
		return lvLeaf
	case topology.LevelSpine:
		return lvSpine
	}
	return lvRoot
}

// tableKey identifies a gang's per-node tables, shared by gangs of one
// shape within a pass.
type tableKey struct {
	gpr, uRanks int
	shaped      bool
}

// tableCache holds the tables of a pass, with the last one used in front
// because most gangs in a backlog share a shape.
type tableCache struct {
	m       map[tableKey][2][]int32
	lastKey tableKey
	last    [2][]int32
	hasLast bool
}

// reasonKey identifies what a pending reason depends on besides the
// cluster's state: gangs of one shape get the same words.
type reasonKey struct {
	ranks, gpr, tp, rpn, milli, required int
	mig, sel                             string
	cpu, mem                             int64
	hostOnly                             bool
}

// newGang works out r's shape on c into g. A request that can never be
// placed returns a reason (PendingInvalid, or PendingTopology when this
// cluster's NVLink domains are too small for its TP groups).
func newGang(c *cluster, r *Request, idx int, g *gang, tables *tableCache) (PendingKind, string) {
	*g = gang{req: r, idx: idx, required: levelOf(r.Required), preferred: levelOf(r.Preferred)}
	kind, why := g.shape(c, r, tables)
	g.cpuPR, g.memPR = max(0, r.CPUMillisPerRank), max(0, r.MemoryBytesPerRank)
	g.host = (g.cpuPR > 0 && c.cpuLimited) || (g.memPR > 0 && c.memLimited)
	g.flat = !g.host
	g.key = reasonKey{ranks: r.Ranks, gpr: g.gpr, tp: g.tp, rpn: r.RanksPerNode, milli: g.milli, mig: r.MIGProfile, required: g.required,
		cpu: g.cpuPR, mem: g.memPR, hostOnly: r.HostOnly}
	return kind, why
}

func (g *gang) shape(c *cluster, r *Request, tables *tableCache) (PendingKind, string) {
	if r.Ranks < 1 {
		return PendingInvalid, fmt.Sprintf("ranks is %d; want at least 1", r.Ranks)
	}
	if r.GPUsPerRank < 0 || r.GPUMilli < 0 || r.RanksPerNode < 0 || r.TP < 0 || r.PP < 0 || r.DP < 0 {
		return PendingInvalid, "negative sizes"
	}
	if r.Required != topology.LevelNone && r.Preferred != topology.LevelNone && r.Preferred > r.Required {
		return PendingInvalid, fmt.Sprintf("preferred level %s is wider than required level %s", r.Preferred, r.Required)
	}
	g.duration = int64(r.EstimatedDuration)
	if r.EstimatedDuration < 0 {
		g.duration = 0
	}
	if r.CPUMillisPerRank < 0 || r.MemoryBytesPerRank < 0 {
		return PendingInvalid, "negative CPU or memory per rank"
	}
	g.cpu = r.CPUMillisPerRank * int64(r.Ranks)
	g.mem = r.MemoryBytesPerRank * int64(r.Ranks)

	if r.HostOnly {
		if r.GPUsPerRank > 0 || r.GPUMilli > 0 || r.MIGProfile != "" {
			return PendingInvalid, "a host-only request asks for GPUs too; drop hostOnly or the GPUs"
		}
		if r.CPUMillisPerRank == 0 && r.MemoryBytesPerRank == 0 {
			return PendingInvalid, "a host-only request asks for no CPU and no memory"
		}
		g.frac, g.hostOnly, g.tp = true, true, 1
		return 0, ""
	}

	if r.GPUMilli > 0 || r.MIGProfile != "" {
		if r.GPUMilli > 0 && r.MIGProfile != "" {
			return PendingInvalid, "asks for both gpuMilli and a MIG profile; choose one"
		}
		if r.GPUsPerRank > 1 {
			return PendingInvalid, fmt.Sprintf("a fractional rank gets part of one GPU, but gpusPerRank is %d", r.GPUsPerRank)
		}
		if r.GPUMilli >= 1000 {
			return PendingInvalid, fmt.Sprintf("gpuMilli %d is a whole GPU or more; ask for gpusPerRank instead", r.GPUMilli)
		}
		g.frac = true
		g.gpr = 0
		g.tp = 1
		if r.MIGProfile != "" {
			p, err := ParseMIGProfile(r.MIGProfile)
			if err != nil {
				return PendingInvalid, err.Error()
			}
			g.mig = p
			g.usage = int64(r.Ranks) * int64(p.milli())
		} else {
			g.milli = r.GPUMilli
			g.usage = int64(r.Ranks) * int64(r.GPUMilli)
		}
		g.gpus = r.Ranks
		return 0, ""
	}

	g.gpr = max(1, r.GPUsPerRank)
	if g.gpr > maxNodeGPUs {
		return PendingInvalid, fmt.Sprintf("gpusPerRank %d is more than a node can have (%d)", g.gpr, maxNodeGPUs)
	}
	g.gpus = r.Ranks * g.gpr
	g.usage = int64(g.gpus) * 1000
	g.size = topology.Parallelism{TP: r.TP, PP: r.PP, DP: r.DP}
	g.tp = max(1, r.TP)
	pp := max(1, r.PP)
	if r.TP > 0 || r.PP > 0 || r.DP > 0 {
		if r.DP == 0 && r.Ranks%(g.tp*pp) != 0 {
			return PendingInvalid, fmt.Sprintf("tp %d × pp %d is %d, which does not divide the gang's %d ranks", g.tp, pp, g.tp*pp, r.Ranks)
		}
		if dp := r.DP; dp > 0 && g.tp*pp*dp != r.Ranks {
			return PendingInvalid, fmt.Sprintf("tp %d × pp %d × dp %d is %d, but the gang has %d ranks", g.tp, pp, dp, g.tp*pp*dp, r.Ranks)
		}
	}
	maxG := c.hw - 1
	switch {
	case r.RanksPerNode > 0:
		if r.Ranks%r.RanksPerNode != 0 {
			return PendingInvalid, fmt.Sprintf("%d ranks do not divide into nodes of %d ranks", r.Ranks, r.RanksPerNode)
		}
		if r.RanksPerNode%g.tp != 0 {
			return PendingInvalid, fmt.Sprintf("ranksPerNode %d is not a multiple of tp %d, so a tensor-parallel group would cross nodes", r.RanksPerNode, g.tp)
		}
		g.shaped = true
		g.uRanks = r.RanksPerNode
		if r.RanksPerNode*g.gpr > maxG {
			return PendingTopology, fmt.Sprintf("needs %d GPUs per node (%d ranks × %d); the largest node has %d", r.RanksPerNode*g.gpr, r.RanksPerNode, g.gpr, maxG)
		}
	default:
		g.uRanks = g.tp
		g.tpAcross = c.multi && g.tp > 1
		if !g.tpAcross && g.tp*g.gpr > maxG {
			return PendingTopology, fmt.Sprintf("a tensor-parallel group of %d ranks × %d GPUs needs %d GPUs in one NVLink domain; the largest has %d", g.tp, g.gpr, g.tp*g.gpr, maxG)
		}
	}
	g.units = r.Ranks / g.uRanks
	key := tableKey{g.gpr, g.uRanks, g.shaped}
	t, ok := tables.last, tables.hasLast && tables.lastKey == key
	if !ok {
		t, ok = tables.m[key]
	}
	if !ok {
		t = [2][]int32{make([]int32, c.hw), make([]int32, c.hw)}
		for k := range c.hw {
			t[1][k] = int32(k / g.gpr)
			if g.shaped {
				if int(t[1][k]) >= g.uRanks {
					t[0][k] = 1
				}
			} else {
				t[0][k] = t[1][k] / int32(g.uRanks)
			}
		}
		tables.m[key] = t
	}
	tables.lastKey, tables.last, tables.hasLast = key, t, true
	g.f, g.rk = t[0], t[1]
	return 0, ""
}

// eligible reports whether node n may take ranks of g, GPUs and host
// resources aside.
func (g *gang) eligible(c *cluster, n int32) bool {
	if !c.ok[n] {
		return false
	}
	return g.sel == nil || g.sel[n]
}

// maxHostRanks stands for "no host limit" in rank counts.
const maxHostRanks = 1 << 20

// hostRanks returns how many of g's ranks node n's free CPU and memory
// hold.
func (c *cluster) hostRanks(g *gang, n int32) int {
	r := int64(maxHostRanks)
	if g.cpuPR > 0 {
		r = min(r, max(0, c.cpuFree[n])/g.cpuPR)
	}
	if g.memPR > 0 {
		r = min(r, max(0, c.memFree[n])/g.memPR)
	}
	return int(r)
}

// hostFits reports whether one rank of g fits node n's free CPU and
// memory.
func (c *cluster) hostFits(g *gang, n int32) bool {
	return (g.cpuPR == 0 || c.cpuFree[n] >= g.cpuPR) && (g.memPR == 0 || c.memFree[n] >= g.memPR)
}

// unitsOn returns how many units of g fit on node n now: its free GPUs'
// worth, bounded by its free CPU and memory.
func (c *cluster) unitsOn(g *gang, n int32) int {
	if !g.eligible(c, n) {
		return 0
	}
	u := int(g.f[c.nfree[n]])
	if !g.host || u == 0 {
		return u
	}
	r := c.hostRanks(g, n)
	if g.shaped {
		if r < g.uRanks {
			return 0
		}
		return u
	}
	return min(u, r/g.uRanks)
}

// ranksOn returns how many ranks of g fit on node n now.
func (c *cluster) ranksOn(g *gang, n int32) int {
	if !g.eligible(c, n) {
		return 0
	}
	r := int(g.rk[c.nfree[n]])
	if g.host {
		r = min(r, c.hostRanks(g, n))
	}
	return r
}

// end returns when g would finish if it started at now; noEnd if unknown.
func (g *gang) end(now int64) int64 {
	if g.duration <= 0 {
		return noEnd
	}
	return now + g.duration
}

func fmtDuration(ns int64) string {
	return time.Duration(ns).Round(time.Second).String()
}
