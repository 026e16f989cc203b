package scheduler

import (
	"cmp"
	"container/heap"
	"fmt"
	"math"
	"math/bits"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/gangway/gangway/internal/topology"
)

// Schedule places as many requests as fit with the default Options:
// Greedy, the Topology strategy, preemption on.
func Schedule(snap Snapshot, reqs []Request) Plan {
	return ScheduleWith(snap, reqs, Options{})
}

// ScheduleWith runs one scheduling pass: NewPass, Step until done, Plan.
// It does no I/O and draws no randomness: the same inputs give the same
// plan. It does not modify snap or reqs.
func ScheduleWith(snap Snapshot, reqs []Request, opts Options) Plan {
	p := NewPass(snap, reqs, opts)
	for {
		if _, more := p.Step(); !more {
			break
		}
	}
	return p.Plan()
}

// Decision is what one Step decided about one request.
type Decision struct {
	JobID  string
	Placed bool
	// GPUs is the gang's whole GPUs, or its ranks when they are
	// fractional.
	GPUs int
	// Kind says why it waits when it was not placed.
	Kind PendingKind
}

// Pass is one scheduling pass, decided a request at a time. NewPass builds
// the working state from the snapshot (the only step that reads every
// node); each Step then decides one request, touching only the counters and
// nodes that decision needs. A Pass is not safe for concurrent use; it
// keeps references to snap's and reqs' contents, which must not change
// while it is in use.
type Pass struct {
	now   int64
	reqs  []Request
	opts  Options
	c     *cluster // what is free now, less the reservations
	full  *cluster // what is free now; nil until a reservation is made
	resvs []*reservation
	first *reservation // the reservation that starts first
	sh    *sharing
	run   []runJob
	heap  queueHeap
	one   *gang
	plan  Plan

	tables  *tableCache
	reasons map[reasonKey]reasonMemo
	// backfills memoizes delaysMemo; nil until a gang waits behind a
	// reservation.
	backfills map[backfillKey]backfillMemo
	quotas    map[quotaKey]string

	pendingAt []int32 // request → index in plan.Pending, -1 if none
	// runKeys are the running jobs in release order while runSorted
	// (a preemption, which moves a job's end, clears it); keys and
	// scratch are reserve's buffers, reused by each search.
	runKeys   []releaseKey
	runSorted bool
	keys      []releaseKey
	scratch   *cluster
	// loose counts the requests not yet decided that might be placed
	// without a whole free GPU (see Exhausted).
	loose     int
	placed    []placedJob
	blockedBy string
	searches  int
	selCache  map[string][]bool
	labelIdx  map[string]map[string][]int32 // label → value → nodes
}

// gangSlot is a request's shape, worked out when the request reaches the
// head of its queue.
type gangSlot struct {
	g    gang
	idx  int         // the request it describes; -1 none
	kind PendingKind // non-zero: the request cannot be placed
	why  string
}

// reasonMemo is a pending reason computed at one cluster version.
type reasonMemo struct {
	version uint64
	kind    PendingKind
	why     string
}

// quotaKey identifies a quota reason: the queue, the gang's usage, and
// the sharing state's version.
type quotaKey struct {
	q       *queueState
	usage   int64
	version uint64
}

// runJob is a running job as the pass sees it.
type runJob struct {
	r        *Running
	q        *queueState
	parts    []nodeMask
	frac     []fracOp
	usage    int64 // milli-GPUs
	end      int64
	lost     int64 // ns of GPU time since its last checkpoint
	stopping bool
}

// placedJob is a gang placed in this pass, for the reservation's future.
type placedJob struct {
	id    string
	parts []nodeMask
	frac  []fracOp
	end   int64
}

// NewPass prepares a pass over reqs on snap.
func NewPass(snap Snapshot, reqs []Request, opts Options) *Pass {
	p := &Pass{now: snap.Now, reqs: reqs, opts: opts, selCache: map[string][]bool{},
		tables: &tableCache{m: map[tableKey][2][]int32{}}, reasons: map[reasonKey]reasonMemo{}, quotas: map[quotaKey]string{}}
	warn := func(s string) { p.plan.Warnings = append(p.plan.Warnings, s) }
	p.c = newCluster(&snap, warn)

	var totals [nRes]int64
	totals[resGPU] = int64(p.c.totalGPUs()) * 1000
	for i := range snap.Nodes {
		totals[resCPU] += max(0, snap.Nodes[i].CPUMillis)
		totals[resMem] += max(0, snap.Nodes[i].MemoryBytes)
	}
	p.sh = newSharing(snap.Queues, totals, warn)
	p.indexRunning(snap.Running, warn)
	p.sh.finish()

	p.one = &gang{gpr: 1, uRanks: 1, units: 1, tp: 1, required: lvRoot, preferred: lvRoot, flat: true,
		f: make([]int32, p.c.hw), rk: make([]int32, p.c.hw)}
	for k := range p.c.hw {
		p.one.f[k], p.one.rk[k] = int32(k), int32(k)
	}
	if opts.Strategy == Topology {
		p.c.fm = p.buildFrag()
	}

	p.plan.Pending = make([]Pending, 0, len(reqs))
	p.pendingAt = make([]int32, len(reqs))
	for i := range reqs {
		p.pendingAt[i] = -1
		if loose(&reqs[i]) {
			p.loose++
		}
		q := p.sh.queue(reqs[i].Queue)
		q.order = append(q.order, i)
	}
	for _, q := range p.sh.queues {
		if len(q.order) == 0 {
			continue
		}
		before := func(a, b int) int {
			ra, rb := &reqs[a], &reqs[b]
			if ra.Priority != rb.Priority {
				return cmp.Compare(rb.Priority, ra.Priority)
			}
			if ra.Order != rb.Order {
				return cmp.Compare(ra.Order, rb.Order)
			}
			return strings.Compare(ra.JobID, rb.JobID)
		}
		// Callers usually pass requests in queue order already.
		if !slices.IsSortedFunc(q.order, before) {
			slices.SortStableFunc(q.order, before)
		}
		p.rekey(q)
		p.heap = append(p.heap, q)
		q.heapAt = len(p.heap) - 1
	}
	heap.Init(&p.heap)
	return p
}

func nodeID(n int32) topology.NodeID { return topology.NodeID(n) }

func sortPicks(p []pick) {
	slices.SortFunc(p, func(a, b pick) int { return int(a.id) - int(b.id) })
}

// indexRunning turns running jobs into masks per node and charges their
// queues.
func (p *Pass) indexRunning(running []Running, warn func(string)) {
	p.run = make([]runJob, 0, len(running))
	nslots := 0
	for i := range running {
		nslots += len(running[i].Ranks)
	}
	backing := make([]nodeMask, 0, nslots)
	for i := range running {
		r := &running[i]
		rj := runJob{r: r, q: p.sh.queue(r.Queue), end: noEnd, stopping: r.Stopping}
		if r.EstimatedEnd > 0 {
			rj.end = r.EstimatedEnd
		}
		if r.Stopping {
			rj.end = p.now
		}
		for _, s := range r.Ranks {
			id, ok := p.c.topo.NodeByName(s.Node)
			if !ok {
				// Not schedulable now (lost, cordoned): it still counts
				// for its queue.
				rj.usage += int64(len(s.GPUs)) * 1000
				if s.Milli > 0 || s.MIGProfile != "" {
					rj.usage += int64(s.Milli) - int64(len(s.GPUs))*1000
				}
				continue
			}
			n := int32(id)
			cpu, mem := max(0, s.CPUMillis), max(0, s.MemoryBytes)
			if len(s.GPUs) == 0 && s.Milli == 0 && s.MIGProfile == "" {
				if cpu|mem != 0 {
					rj.frac = append(rj.frac, fracOp{node: n, gpu: -1, cpu: cpu, mem: mem})
				}
				continue
			}
			if s.Milli > 0 || s.MIGProfile != "" {
				if len(s.GPUs) != 1 {
					warn(fmt.Sprintf("running job %s: fractional rank on %s has %d GPUs, want 1", r.JobID, s.Node, len(s.GPUs)))
					continue
				}
				op := fracOp{node: n, gpu: s.GPUs[0], milli: s.Milli, cpu: cpu, mem: mem}
				if s.MIGProfile != "" {
					shape, err := ParseMIGProfile(s.MIGProfile)
					if err != nil || s.MIGStart < 0 || s.MIGStart > 7 {
						warn(fmt.Sprintf("running job %s: %v", r.JobID, err))
						continue
					}
					op.mig = shape.bits(s.MIGStart)
					rj.usage += int64(shape.milli())
				} else {
					rj.usage += int64(s.Milli)
				}
				rj.frac = append(rj.frac, op)
				continue
			}
			var m uint64
			for _, g := range s.GPUs {
				if g < 0 || g >= maxNodeGPUs {
					warn(fmt.Sprintf("running job %s: GPU %d on %s does not exist", r.JobID, g, s.Node))
					continue
				}
				m |= 1 << uint(g)
			}
			rj.usage += int64(bits.OnesCount64(m)) * 1000
			if k := slices.IndexFunc(rj.parts, func(x nodeMask) bool { return x.node == n }); k >= 0 {
				rj.parts[k].mask |= m
				rj.parts[k].cpu += cpu
				rj.parts[k].mem += mem
			} else {
				if rj.parts == nil {
					rj.parts = backing[len(backing):len(backing):cap(backing)]
				}
				// Parts of one job are consecutive in backing.
				backing = append(backing, nodeMask{node: n, mask: m, cpu: cpu, mem: mem})
				rj.parts = rj.parts[:len(rj.parts)+1]
			}
		}
		since := max(r.LastCheckpoint, r.StartedAt)
		if since > 0 && p.now > since {
			rj.lost = int64(min(float64(p.now-since)*float64(rj.usage)/1000, math.MaxInt64/2))
		}
		p.sh.use(rj.q, rj.usage, r.CPUMillis, r.MemoryBytes)
		if (r.Preemptible || r.Stopping) && len(rj.frac) == 0 && len(rj.parts) > 0 {
			if rj.q.preemptible == 0 || r.Priority < rj.q.minPrio {
				rj.q.minPrio = r.Priority
			}
			rj.q.preemptible++
		}
		p.run = append(p.run, rj)
	}
}

// gang returns the shape of request i, the head of queue q, or nil with
// why it can never be placed. Only heads have shapes: a pass keeps one
// per queue, not one per request.
func (p *Pass) gang(q *queueState, i int) (*gang, PendingKind, string) {
	sl := &q.head
	if sl.idx == i {
		if sl.kind != 0 {
			return nil, sl.kind, sl.why
		}
		return &sl.g, 0, ""
	}
	sl.idx = i
	r := &p.reqs[i]
	g := &sl.g
	if sl.kind, sl.why = newGang(p.c, r, i, g, p.tables); sl.kind != 0 {
		return nil, sl.kind, sl.why
	}
	if len(r.NodeSelector) > 0 || len(r.NodeSelectorIn) > 0 {
		g.selKey = fmtSelector(r.NodeSelector, r.NodeSelectorIn)
		g.key.sel = g.selKey
		g.sel = p.selector(g.selKey, r.NodeSelector, r.NodeSelectorIn)
	}
	g.flat = g.sel == nil && !g.host
	return g, 0, ""
}

// selector returns which nodes match the selectors eq and in, whose key
// is key, computed once per pass from an index of label values: a
// selector costs the nodes it matches, not every node.
func (p *Pass) selector(key string, eq map[string]string, in map[string][]string) []bool {
	if sel, ok := p.selCache[key]; ok {
		return sel
	}
	c := p.c
	hits := make([]uint16, c.nn)
	need := uint16(0)
	count := func(k, v string) {
		for _, n := range p.labelNodes(k)[v] {
			hits[n]++
		}
	}
	for k, v := range eq {
		need++
		count(k, v)
	}
	for k, vs := range in {
		need++
		vs = slices.Clone(vs)
		slices.Sort(vs)
		for _, v := range slices.Compact(vs) {
			count(k, v)
		}
	}
	sel := make([]bool, c.nn)
	for n := range sel {
		sel[n] = c.ok[n] && hits[n] == need
	}
	p.selCache[key] = sel
	return sel
}

// labelNodes returns, for label key, the nodes with each value.
func (p *Pass) labelNodes(key string) map[string][]int32 {
	if m, ok := p.labelIdx[key]; ok {
		return m
	}
	m := map[string][]int32{}
	for n := range p.c.nn {
		if v, ok := p.c.labels[n][key]; ok && p.c.ok[n] {
			m[v] = append(m[v], int32(n))
		}
	}
	if p.labelIdx == nil {
		p.labelIdx = map[string]map[string][]int32{}
	}
	p.labelIdx[key] = m
	return m
}

// rekey recomputes q's heap key from its usage and next request.
func (p *Pass) rekey(q *queueState) {
	q.share = p.sh.dominantShare(q)
	q.tier = 1
	if q.next < len(q.order) {
		if g, _, _ := p.gang(q, q.order[q.next]); g != nil && q.usage[resGPU]+g.usage <= q.guarantee {
			q.tier = 0
		}
	}
}

// Step decides the next request in fair-share order. It returns false when
// every request has been decided.
func (p *Pass) Step() (Decision, bool) {
	if len(p.heap) == 0 {
		return Decision{}, false
	}
	q := p.heap[0]
	i := q.order[q.next]
	q.next++
	d := p.decide(q, i)
	if loose(&p.reqs[i]) {
		p.loose--
	}
	if q.next < len(q.order) {
		p.rekey(q)
		heap.Fix(&p.heap, 0)
	} else {
		heap.Pop(&p.heap)
	}
	return d, true
}

// Exhausted reports whether no request still to be decided can be
// placed in this pass: strict FIFO has stopped at a gang that does not
// fit, or preemption is off, no whole GPU is free outside the
// reservations and every request left asks for whole GPUs with no
// estimated duration (so none may start on reserved GPUs ahead of a
// reservation). What is left would only be given pending reasons and
// reservations; a caller that needs the placements alone may stop
// stepping and take the Plan, which then leaves those requests out.
// The simulator does, behind long backlogs.
func (p *Pass) Exhausted() bool {
	if p.blockedBy != "" && p.sh.ownModes == 0 {
		return true
	}
	return p.opts.NoPreemption && p.loose == 0 && p.c.gfree[lvRoot][0] == 0
}

// loose reports a request that might be placed without a whole free GPU
// now: it runs on the host only, shares a GPU, or has an estimated
// duration, with which it may start on reserved GPUs.
func loose(r *Request) bool {
	return r.HostOnly || r.GPUMilli > 0 || r.MIGProfile != "" || r.EstimatedDuration > 0
}

func (p *Pass) pending(i int, q *queueState, kind PendingKind, reason string) Decision {
	p.pendingAt[i] = int32(len(p.plan.Pending))
	p.plan.Pending = append(p.plan.Pending, Pending{JobID: p.reqs[i].JobID, Queue: q.name, Kind: kind, Reason: reason})
	d := Decision{JobID: p.reqs[i].JobID, Kind: kind}
	if sl := &q.head; sl.idx == i && sl.kind == 0 {
		d.GPUs = sl.g.gpus
	}
	return d
}

func (p *Pass) decide(q *queueState, i int) Decision {
	r := &p.reqs[i]
	mode := p.modeOf(q)
	g, kind, why := p.gang(q, i)
	if g == nil {
		return p.pending(i, q, kind, why)
	}
	if p.blockedBy != "" && !q.ownMode {
		return p.pending(i, q, PendingBlocked, fmt.Sprintf("strict FIFO: waits behind %s, which does not fit", p.blockedBy))
	}
	if q.blocked != "" {
		if q.blockedFit {
			return p.pending(i, q, PendingBlocked, fmt.Sprintf("strict FIFO: waits behind %s, which does not fit", q.blocked))
		}
		return p.pending(i, q, PendingBlocked, fmt.Sprintf("strict FIFO: waits behind %s, which its queue's quota holds back", q.blocked))
	}
	ok, within, why := p.admit(q, g)
	if !ok {
		if mode == Strict {
			q.blocked = r.JobID
		}
		return p.pending(i, q, PendingQuota, why)
	}
	if pl, ok := p.tryPlace(g); ok {
		p.plan.Placements = append(p.plan.Placements, pl)
		p.sh.use(q, g.usage, g.cpu, g.mem)
		return Decision{JobID: r.JobID, Placed: true, GPUs: g.gpus}
	}
	if !p.opts.NoPreemption && !g.frac {
		max := p.opts.MaxPreemptionSearches
		if max <= 0 {
			max = 64
		}
		if p.searches < max {
			if why, ok := p.preempt(q, g, within); ok {
				if mode == Strict {
					p.blockStrict(q, r.JobID)
				}
				return p.pending(i, q, PendingPreempting, why)
			}
		}
	}
	kind, why = p.whyNotMemo(g)
	switch mode {
	case Strict:
		p.blockStrict(q, r.JobID)
	case Backfill:
		if g.frac {
			break
		}
		if len(p.resvs) < p.maxReservations() {
			if text, ok := p.reserve(g); ok {
				return p.pending(i, q, PendingReserved, why+"; "+text)
			} else if text != "" {
				why += "; " + text
			}
		}
		if p.first != nil {
			if text, ok := p.delaysMemo(g, why); ok {
				return p.pending(i, q, PendingBackfill, text)
			}
		}
	}
	return p.pending(i, q, kind, why)
}

// modeOf is q's mode in this pass: its own, else the pass's.
func (p *Pass) modeOf(q *queueState) Mode {
	if q.ownMode {
		return q.mode
	}
	return p.opts.Mode
}

// blockStrict stops what strict FIFO stops behind job, a gang of q that
// does not fit: a queue of its own strict mode only, else every queue
// that runs the pass's mode.
func (p *Pass) blockStrict(q *queueState, job string) {
	if q.ownMode {
		q.blocked, q.blockedFit = job, true
		return
	}
	p.blockedBy = job
}

// maxReservations is how many gangs may hold a reservation in this pass.
func (p *Pass) maxReservations() int {
	return max(1, p.opts.MaxReservations)
}

// tryPlace places g now if it fits without touching the reservations,
// or, when it will end before the first of them starts, anywhere.
func (p *Pass) tryPlace(g *gang) (Placement, bool) {
	strat := p.opts.Strategy
	if g.frac {
		pl, ops, ok := p.c.placeFrac(g, strat, p.one)
		if !ok {
			return Placement{}, false
		}
		if p.full != nil {
			for _, op := range ops {
				p.full.applyFrac(op)
			}
			pl.Backfilled = true
		}
		p.placed = append(p.placed, placedJob{id: g.req.JobID, frac: ops, end: g.end(p.now)})
		return pl, true
	}
	if picks := p.c.find(g, strat, lvRoot, 0); picks != nil {
		pl, parts := p.c.commit(g, picks)
		if p.full != nil {
			for _, m := range parts {
				p.full.takeAll(m)
			}
			pl.Backfilled = true
		}
		p.placed = append(p.placed, placedJob{id: g.req.JobID, parts: parts, end: g.end(p.now)})
		return pl, true
	}
	if p.first == nil || p.first.start == noEnd || g.end(p.now) > p.first.start {
		return Placement{}, false
	}
	picks := p.full.find(g, strat, lvRoot, 0)
	if picks == nil {
		return Placement{}, false
	}
	pl, parts := p.full.commit(g, picks)
	for _, m := range parts {
		p.c.takeAll(m)
	}
	pl.Backfilled = true
	p.placed = append(p.placed, placedJob{id: g.req.JobID, parts: parts, end: g.end(p.now)})
	return pl, true
}

// Plan returns the decisions so far. Call it once, after the last Step;
// requests not yet decided are left out.
func (p *Pass) Plan() Plan {
	slices.Sort(p.plan.Warnings)
	for _, q := range p.sh.queues {
		ahead := 0
		for _, i := range q.order {
			at := p.pendingAt[i]
			if at < 0 || p.plan.Pending[at].Kind == PendingInvalid {
				continue
			}
			p.plan.Pending[at].Ahead = ahead
			ahead++
		}
	}
	return p.plan
}

// whyNotMemo is whyNot, computed once per gang shape while the cluster
// does not change: in a busy pass thousands of gangs wait for the same
// reason.
func (p *Pass) whyNotMemo(g *gang) (PendingKind, string) {
	if g.frac {
		return p.whyNot(g)
	}
	v := p.c.version | uint64(len(p.resvs))<<56
	if m, ok := p.reasons[g.key]; ok && m.version == v {
		return m.kind, m.why
	}
	kind, why := p.whyNot(g)
	p.reasons[g.key] = reasonMemo{version: v, kind: kind, why: why}
	return kind, why
}

// delaysMemo reports whether g, which does not fit outside the
// reservations, would fit on the GPUs they hold, and then returns why
// with the reservation it would delay. A backlog behind a reservation
// is mostly gangs of a few shapes, so the answer is memoized per shape
// while the cluster, the reservations and why do not change.
func (p *Pass) delaysMemo(g *gang, why string) (string, bool) {
	k := backfillKey{g.key, g.preferred}
	m, ok := p.backfills[k]
	if ok && m.full == p.full.version && m.resvs == len(p.resvs) && m.in == why {
		return m.out, m.delays
	}
	m = backfillMemo{full: p.full.version, resvs: len(p.resvs), in: why, out: why}
	if p.full.find(g, p.opts.Strategy, lvRoot, 0) != nil {
		m.delays = true
		if len(p.resvs) == 1 {
			m.out += fmt.Sprintf("; it would delay %s, whose reserved GPUs are free %s", p.first.job, p.resvWhen(p.first))
		} else {
			m.out += fmt.Sprintf("; it would take GPUs reserved for %d gangs past the first reservation's start (%s's, %s)",
				len(p.resvs), p.first.job, p.resvWhen(p.first))
		}
	}
	if p.backfills == nil {
		p.backfills = map[backfillKey]backfillMemo{}
	}
	p.backfills[k] = m
	return m.out, m.delays
}

// backfillKey and backfillMemo are delaysMemo's memo: a gang's shape,
// and its answer at a version of the cluster without reservations.
type backfillKey struct {
	reason    reasonKey
	preferred int
}

type backfillMemo struct {
	full    uint64
	resvs   int
	in, out string
	delays  bool
}

// admit is sharing.admit with its reasons memoized while the queues'
// usage does not change.
func (p *Pass) admit(q *queueState, g *gang) (bool, bool, string) {
	key := quotaKey{q, g.usage, p.sh.version}
	if why, ok := p.quotas[key]; ok {
		return false, false, why
	}
	ok, within, why := p.sh.admit(q, g)
	if !ok {
		if len(p.quotas) > 4096 {
			clear(p.quotas)
		}
		p.quotas[key] = why
	}
	return ok, within, why
}

// Text returns the reason with how many gangs wait ahead in the queue,
// for people: "needs 64 GPUs ...; 3 gangs wait ahead of it in queue
// team-a". Reason alone changes less often, which suits storing it.
func (pe Pending) Text() string {
	if pe.Ahead == 0 {
		return pe.Reason
	}
	return pe.Reason + "; " + strconv.Itoa(pe.Ahead) + " " + plural(pe.Ahead, "gang waits", "gangs wait") + " ahead of it in queue " + queueName(pe.Queue)
}

func queueName(s string) string {
	if s == "" {
		return `""`
	}
	return s
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// fmtSelector writes selectors for people, in one order whatever the
// maps': "{gpu-model in (A100, H100), zone=x}".
func fmtSelector(sel map[string]string, in map[string][]string) string {
	parts := make([]string, 0, len(sel)+len(in))
	for k, v := range sel {
		parts = append(parts, k+"="+v)
	}
	for k, vs := range in {
		vs = slices.Clone(vs)
		slices.Sort(vs)
		parts = append(parts, k+" in ("+strings.Join(slices.Compact(vs), ", ")+")")
	}
	sort.Strings(parts)
	return "{" + strings.Join(parts, ", ") + "}"
}
