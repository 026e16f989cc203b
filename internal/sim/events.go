package sim

type evKind uint8

// Kinds in the order they are handled at one instant: GPUs are released
// before anything new arrives, as in the Helios reference (end jobs, then
// admit arrivals, then schedule).
const (
	evComplete evKind = iota
	evFailure
	evRepair
	evRekey
)

type event struct {
	t     float64
	kind  evKind
	seq   uint64
	job   int32  // evComplete, evRekey
	node  int32  // evRepair
	gpu   int8   // evRepair: -1 for the whole node
	epoch uint32 // evComplete, evRekey: the job's epoch when scheduled
}

func (a *event) before(b *event) bool {
	if a.t != b.t {
		return a.t < b.t
	}
	if a.kind != b.kind {
		return a.kind < b.kind
	}
	return a.seq < b.seq
}

// evHeap is a binary min-heap of events.
type evHeap []event

func (h *evHeap) push(e event) {
	*h = append(*h, e)
	s := *h
	i := len(s) - 1
	for i > 0 {
		p := (i - 1) / 2
		if !s[i].before(&s[p]) {
			break
		}
		s[i], s[p] = s[p], s[i]
		i = p
	}
}

func (h *evHeap) pop() event {
	s := *h
	top := s[0]
	last := len(s) - 1
	s[0] = s[last]
	s = s[:last]
	i := 0
	for {
		l := 2*i + 1
		if l >= len(s) {
			break
		}
		m := l
		if r := l + 1; r < len(s) && s[r].before(&s[l]) {
			m = r
		}
		if !s[m].before(&s[i]) {
			break
		}
		s[i], s[m] = s[m], s[i]
		i = m
	}
	*h = s
	return top
}
