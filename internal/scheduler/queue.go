package scheduler

import (
	"fmt"
	"sort"
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
	heapAt    int
	tier      int
	share     float64
	head      gangSlot // the shape of order[next]
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
}

func (c *cohortState) over() int64 { return max(0, c.usage-c.guarantee) }

// sharing holds the queues, their usage and the unguaranteed pool.
type sharing struct {
	queues  []*queueState // sorted by name
	byName  map[string]*queueState
	cohorts []*cohortState
	totals  [nRes]int64
	// pool is the milli-GPUs no queue is guaranteed; poolUsed what cohorts
	// use beyond their guarantees. Checked only when some queue has a
	// guarantee.
	pool, poolUsed int64
	guarded        bool
	// version counts changes to usage, for memoized reasons.
	version uint64
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
		sumG += qs.guarantee
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
	s.pool = max(0, totals[resGPU]-sumG)
	return s
}

// queue returns the named queue, creating it with the defaults.
func (s *sharing) queue(name string) *queueState {
	if q := s.byName[name]; q != nil {
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
	before := q.cohort.over()
	q.usage[resGPU] += gpu
	q.usage[resCPU] += cpu
	q.usage[resMem] += mem
	q.cohort.usage += gpu
	s.poolUsed += q.cohort.over() - before
}

// finish computes poolUsed after the initial usage is in.
func (s *sharing) finish() {
	s.poolUsed = 0
	for _, c := range s.cohorts {
		s.poolUsed += c.over()
	}
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
	co := q.cohort
	newOver := max(0, co.usage+g.usage-co.guarantee)
	if used := s.poolUsed - co.over() + newOver; used > s.pool {
		lend := max(0, co.guarantee-co.usage)
		if co.name == "" {
			return false, false, fmt.Sprintf("queue %s would use %s GPUs, above its %s-GPU guarantee; it is in no cohort, so it borrows only GPUs no queue is guaranteed, and %s of those %s are in use",
				q.name, milliStr(after), milliStr(q.guarantee), milliStr(s.poolUsed), milliStr(s.pool))
		}
		return false, false, fmt.Sprintf("queue %s would use %s GPUs, above its %s-GPU guarantee; cohort %s has %s idle guaranteed GPUs to lend, and %s of the %s GPUs no queue is guaranteed are in use",
			q.name, milliStr(after), milliStr(q.guarantee), co.name, milliStr(lend), milliStr(s.poolUsed), milliStr(s.pool))
	}
	return true, false, ""
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
