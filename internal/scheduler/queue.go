package scheduler

import (
	"cmp"
	"fmt"
	"slices"
	"sort"
	"strings"
)

// Resources weighed in dominant-resource fair share.
const (
	resGPU = iota // milli-GPUs
	resCPU        // CPU millis
	resMem        // bytes
	nRes
)

// queueState is one queue during a pass.
type queueState struct {
	name      string
	cohort    *cohortState
	weight    float64
	guarantee int64 // milli-GPUs
	limit     int64 // most milli-GPUs it may use; -1 unlimited
	usage     [nRes]int64
	order     []int // its requests, in queue order
	next      int   // next request to decide
	blocked   string
	// blockedFit: blocked by a gang that did not fit (a strict queue of
	// its own mode), not by its quota.
	blockedFit bool
	// mode is the queue's own mode when ownMode (Queue.Mode).
	mode    Mode
	ownMode bool
	heapAt  int
	tier    int
	share   float64
	head    gangSlot // the shape of order[next]
	// preemptible counts its running jobs that may be preempted or are
	// stopping already; minPrio is the lowest priority among them.
	preemptible int
	minPrio     int
}

// cohortState is a cohort during a pass; a queue without a cohort is a
// cohort of its own.
type cohortState struct {
	name      string
	guarantee int64
	usage     int64
	// wide: the cohort of one queue that borrows every queue's idle
	// guarantee (Queue.BorrowIdle).
	wide bool
}

func (c *cohortState) over() int64 { return max(0, c.usage-c.guarantee) }
func (c *cohortState) idle() int64 { return max(0, c.guarantee-c.usage) }

// sharing holds the queues, their usage and the unguaranteed pool.
type sharing struct {
	queues  []*queueState // sorted by name
	byName  map[string]*queueState
	cohorts []*cohortState
	totals  [nRes]int64
	// pool is the milli-GPUs no queue is guaranteed; poolUsed what cohorts
	// other than wide ones use beyond their guarantees. Checked only when
	// some queue has a guarantee.
	pool, poolUsed int64
	guarded        bool
	// wideOver is what wide cohorts (Queue.BorrowIdle) use beyond their
	// guarantees; idle the guarantee cohorts leave idle, which they borrow
	// first and the pool only for the rest. sumG is every guarantee.
	wideOver, idle int64
	sumG           int64
	// version counts changes to usage, for memoized reasons.
	version uint64
	// last is the queue queue returned last.
	last *queueState
	// ownModes counts the queues with a mode of their own.
	ownModes int
}

func newSharing(cfg []Queue, totals [nRes]int64, warn func(string)) *sharing {
	s := &sharing{byName: map[string]*queueState{}, totals: totals}
	cohorts := map[string]*cohortState{}
	var sumG int64
	for _, q := range cfg {
		if _, dup := s.byName[q.Name]; dup {
			warn(fmt.Sprintf("queue %q is configured twice; the first is used", q.Name))
			continue
		}
		qs := s.queue(q.Name)
		qs.guarantee = int64(max(0, q.GuaranteeGPUs)) * 1000
		if q.BorrowLimitGPUs != nil {
			qs.limit = qs.guarantee + int64(max(0, *q.BorrowLimitGPUs))*1000
		}
		if q.Weight > 0 {
			qs.weight = q.Weight
		}
		if q.Mode != nil {
			qs.mode, qs.ownMode = *q.Mode, true
			s.ownModes++
		}
		sumG += qs.guarantee
		qs.cohort.wide = q.BorrowIdle && q.Cohort == ""
		if q.Cohort != "" {
			co := cohorts[q.Cohort]
			if co == nil {
				co = &cohortState{name: q.Cohort}
				cohorts[q.Cohort] = co
				s.cohorts = append(s.cohorts, co)
			}
			qs.cohort = co
			co.guarantee += qs.guarantee
		} else {
			qs.cohort.guarantee = qs.guarantee
		}
	}
	s.guarded = sumG > 0
	s.sumG = sumG
	s.pool = max(0, totals[resGPU]-sumG)
	return s
}

// queue returns the named queue, creating it with the defaults.
func (s *sharing) queue(name string) *queueState {
	if q := s.last; q != nil && q.name == name {
		// Requests and running jobs mostly come queue by queue.
		return q
	}
	if q := s.byName[name]; q != nil {
		s.last = q
		return q
	}
	q := &queueState{name: name, weight: 1, limit: -1, cohort: &cohortState{name: ""}, head: gangSlot{idx: -1}}
	s.cohorts = append(s.cohorts, q.cohort)
	s.byName[name] = q
	i := sort.Search(len(s.queues), func(i int) bool { return s.queues[i].name >= name })
	s.queues = append(s.queues, nil)
	copy(s.queues[i+1:], s.queues[i:])
	s.queues[i] = q
	return q
}

// use adds (or with negative amounts removes) usage to q and its cohort.
func (s *sharing) use(q *queueState, gpu, cpu, mem int64) {
	s.version++
	co := q.cohort
	over, idle := co.over(), co.idle()
	q.usage[resGPU] += gpu
	q.usage[resCPU] += cpu
	q.usage[resMem] += mem
	co.usage += gpu
	s.idle += co.idle() - idle
	if co.wide {
		s.wideOver += co.over() - over
	} else {
		s.poolUsed += co.over() - over
	}
}

// finish computes poolUsed, wideOver and idle after the initial usage is
// in.
func (s *sharing) finish() {
	s.poolUsed, s.wideOver, s.idle = 0, 0, 0
	for _, c := range s.cohorts {
		s.idle += c.idle()
		if c.wide {
			s.wideOver += c.over()
		} else {
			s.poolUsed += c.over()
		}
	}
}

// lendable is what of idle guarantee idle exists: when the guarantees add
// up to more than the cluster, the excess is idle only on paper.
func (s *sharing) lendable(idle int64) int64 {
	return max(0, idle-max(0, s.sumG-s.totals[resGPU]))
}

// dominantShare is q's largest share of any resource, over its weight.
func (s *sharing) dominantShare(q *queueState) float64 {
	best := 0.0
	for r := range nRes {
		if s.totals[r] > 0 {
			best = max(best, float64(q.usage[r])/float64(s.totals[r]))
		}
	}
	return best / q.weight
}

// admit reports whether q's quota lets g start: always within q's
// guarantee; above it, within the borrowing limit and what the cohort and
// the unguaranteed pool can lend. within is true when g stays within the
// guarantee (so it may reclaim GPUs from borrowers).
func (s *sharing) admit(q *queueState, g *gang) (ok, within bool, reason string) {
	after := q.usage[resGPU] + g.usage
	if after <= q.guarantee {
		return true, true, ""
	}
	if q.limit >= 0 && after > q.limit {
		return false, false, fmt.Sprintf("queue %s would use %s GPUs; its guarantee is %s and it may borrow at most %s more",
			q.name, milliStr(after), milliStr(q.guarantee), milliStr(q.limit-q.guarantee))
	}
	if !s.guarded {
		return true, false, ""
	}
	// Wide cohorts borrow idle guarantee first and the pool for the rest;
	// the others borrow the pool.
	co := q.cohort
	newOver := max(0, co.usage+g.usage-co.guarantee)
	newIdle := max(0, co.guarantee-co.usage-g.usage)
	nonWide, wide := s.poolUsed, s.wideOver
	if co.wide {
		wide += newOver - co.over()
	} else {
		nonWide += newOver - co.over()
	}
	idle := s.lendable(s.idle - co.idle() + newIdle)
	if nonWide+max(0, wide-idle) <= s.pool {
		return true, false, ""
	}
	head := fmt.Sprintf("queue %s would use %s GPUs, above its %s-GPU guarantee", q.name, milliStr(after), milliStr(q.guarantee))
	over := s.overcommitted()
	switch {
	case co.wide:
		others := s.lendable(s.idle - co.idle())
		left := max(0, s.pool+others-s.poolUsed-s.wideOver)
		why := fmt.Sprintf("%s; it borrows the GPUs no queue is guaranteed (%s) and those other queues are guaranteed but leave idle (%s now), and %s of them are left to borrow",
			head, milliStr(s.pool), milliStr(others), milliStr(left))
		if over != "" {
			why += "; " + over + ": lower the guarantees with 'gangway queue set'"
		}
		return false, false, why
	case co.name == "" && s.pool == 0:
		why := fmt.Sprintf("%s; it is in no cohort, so it borrows only GPUs no queue is guaranteed, and there are none: ", head)
		if over != "" {
			why += over
		} else {
			why += fmt.Sprintf("the queues' guarantees take all %s GPUs of this cluster", milliStr(s.totals[resGPU]))
		}
		return false, false, why + fmt.Sprintf("; give it a cohort whose queues lend it their idle guarantee ('gangway queue set %s --cohort C'), or lower the guarantees", q.name)
	case co.name == "":
		return false, false, fmt.Sprintf("%s; it is in no cohort, so it borrows only GPUs no queue is guaranteed, and %s of those %s are in use",
			head, milliStr(s.poolLoad()), milliStr(s.pool))
	}
	return false, false, fmt.Sprintf("%s; cohort %s has %s idle guaranteed GPUs to lend, and %s of the %s GPUs no queue is guaranteed are in use",
		head, co.name, milliStr(co.idle()), milliStr(s.poolLoad()), milliStr(s.pool))
}

// poolLoad is how much of the pool is borrowed now: what cohorts use
// beyond their guarantees, less what idle guarantee covers of wide ones'.
func (s *sharing) poolLoad() int64 {
	return s.poolUsed + max(0, s.wideOver-s.lendable(s.idle))
}

// overcommitted names the queues whose guarantees add up to more GPUs than
// the cluster has, for people, or returns "": "queue research guarantees
// 64 GPUs of this 32-GPU cluster".
func (s *sharing) overcommitted() string {
	if s.sumG <= s.totals[resGPU] {
		return ""
	}
	var gs []*queueState
	for _, q := range s.queues {
		if q.guarantee > 0 {
			gs = append(gs, q)
		}
	}
	slices.SortStableFunc(gs, func(a, b *queueState) int { return cmp.Compare(b.guarantee, a.guarantee) })
	total := milliStr(s.totals[resGPU])
	if len(gs) == 1 {
		return fmt.Sprintf("queue %s guarantees %s GPUs of this %s-GPU cluster", gs[0].name, milliStr(gs[0].guarantee), total)
	}
	names := make([]string, 0, 4)
	for i, q := range gs {
		if i == 3 {
			names = append(names, fmt.Sprintf("%d more", len(gs)-3))
			break
		}
		names = append(names, fmt.Sprintf("%s (%s)", q.name, milliStr(q.guarantee)))
	}
	return fmt.Sprintf("queues %s guarantee %s GPUs of this %s-GPU cluster", strings.Join(names, ", "), milliStr(s.sumG), total)
}

// borrowing reports whether q uses more than its guarantee.
func (q *queueState) borrowing() bool { return q.usage[resGPU] > q.guarantee }

// milliStr formats milli-GPUs as GPUs: "8", "2.5".
func milliStr(m int64) string {
	if m%1000 == 0 {
		return fmt.Sprintf("%d", m/1000)
	}
	return fmt.Sprintf("%.3g", float64(m)/1000)
}

// queueHeap orders queues for the next decision: queues whose next gang
// stays within their guarantee first, then the lowest dominant share over
// weight, then the name.
type queueHeap []*queueState

func (h queueHeap) Len() int { return len(h) }
func (h queueHeap) Less(i, j int) bool {
	a, b := h[i], h[j]
	if a.tier != b.tier {
		return a.tier < b.tier
	}
	if a.share != b.share {
		return a.share < b.share
	}
	return a.name < b.name
}
func (h queueHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].heapAt = i
	h[j].heapAt = j
}
func (h *queueHeap) Push(x any) {
	q := x.(*queueState)
	q.heapAt = len(*h)
	*h = append(*h, q)
}
func (h *queueHeap) Pop() any {
	old := *h
	q := old[len(old)-1]
	*h = old[:len(old)-1]
	return q
}
