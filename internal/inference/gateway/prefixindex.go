package gateway

// lruSet is one replica's slice of the prefix index: the block hashes it
// is believed to cache, bounded, least recently used evicted first. Not
// safe for concurrent use; the Router's lock guards it.
type lruSet struct {
	cap   int
	nodes map[uint64]*lruNode
	head  lruNode // sentinel; head.next is the most recent
}

type lruNode struct {
	hash       uint64
	prev, next *lruNode
}

func newLRUSet(capacity int) *lruSet {
	s := &lruSet{cap: max(capacity, 1), nodes: make(map[uint64]*lruNode)}
	s.head.next, s.head.prev = &s.head, &s.head
	return s
}

func (s *lruSet) len() int { return len(s.nodes) }

// prefixLen is how many leading hashes are in the set.
func (s *lruSet) prefixLen(hashes []uint64) int {
	n := 0
	for _, h := range hashes {
		if _, ok := s.nodes[h]; !ok {
			break
		}
		n++
	}
	return n
}

func (s *lruSet) contains(h uint64) bool {
	_, ok := s.nodes[h]
	return ok
}

// addChain records a prompt's blocks as most recently used. The tail is
// inserted first so that, as in vLLM's free queue, a sequence's last
// blocks are evicted before its first ones and the chain stays a prefix.
func (s *lruSet) addChain(hashes []uint64) {
	for i := len(hashes) - 1; i >= 0; i-- {
		s.add(hashes[i])
	}
}

func (s *lruSet) add(h uint64) {
	if n, ok := s.nodes[h]; ok {
		s.unlink(n)
		s.pushFront(n)
		return
	}
	n := &lruNode{hash: h}
	s.nodes[h] = n
	s.pushFront(n)
	s.trim()
}

func (s *lruSet) resize(capacity int) {
	s.cap = max(capacity, 1)
	s.trim()
}

func (s *lruSet) trim() {
	for len(s.nodes) > s.cap {
		old := s.head.prev
		s.unlink(old)
		delete(s.nodes, old.hash)
	}
}

func (s *lruSet) pushFront(n *lruNode) {
	n.prev, n.next = &s.head, s.head.next
	s.head.next.prev = n
	s.head.next = n
}

func (s *lruSet) unlink(n *lruNode) {
	n.prev.next, n.next.prev = n.next, n.prev
}
