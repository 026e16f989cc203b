package gateway

import "sort"

// lruSet is one replica's slice of the prefix index: the block hashes it
// is believed to cache, bounded, least recently used evicted first. Not
// safe for concurrent use; the Router's lock guards it.
//
// It holds no pointers, so that the index (tens of thousands of blocks
// per replica) costs the garbage collector nothing to scan: the recency
// list links slots of one slice by index, a map finds a hash's slot, and
// an evicted block's slot is reused by the next new one.
type lruSet struct {
	cap   int
	slots []lruSlot        // slots[0] is the list's sentinel
	at    map[uint64]int32 // hash → slot
}

type lruSlot struct {
	hash       uint64
	prev, next int32 // sentinel.next is the most recent
}

func newLRUSet(capacity int) *lruSet {
	return &lruSet{cap: max(capacity, 1), slots: make([]lruSlot, 1), at: make(map[uint64]int32)}
}

func (s *lruSet) len() int { return len(s.at) }

// prefixLen is how many leading hashes of a chain are in the set.
//
// addChain uses a chain's blocks tail first, so no block is more
// recently used than those before it in any chain it belongs to, and
// eviction takes a chain's tail before its head: what the set holds of a
// chain is always a prefix of it. A binary search finds its length.
func (s *lruSet) prefixLen(hashes []uint64) int {
	return sort.Search(len(hashes), func(i int) bool { return !s.contains(hashes[i]) })
}

func (s *lruSet) contains(h uint64) bool {
	_, ok := s.at[h]
	return ok
}

// addChain records a prompt's blocks as most recently used. The tail is
// used first so that, as in vLLM's free queue, a sequence's last blocks
// are evicted before its first ones and the chain stays a prefix.
//
// It is add(hashes[i]) for i from the tail down, done in runs: a chain
// used before sits in the list in order (each block just after the one
// before it), so from a block found in the map the blocks before it are
// found by following the list and comparing hashes, and the whole run
// moves to the front at once, as the one-by-one moves would leave it.
// A long shared prefix costs a map lookup per run, not per block.
func (s *lruSet) addChain(hashes []uint64) {
	for i := len(hashes) - 1; i >= 0; {
		last, ok := s.at[hashes[i]]
		if !ok {
			s.add(hashes[i])
			i--
			continue
		}
		first, j := last, i
		for j > 0 {
			p := s.slots[first].prev
			if p == 0 || s.slots[p].hash != hashes[j-1] {
				break
			}
			first, j = p, j-1
		}
		s.moveFront(first, last)
		i = j - 1
	}
}

// moveFront moves the run of slots from first to last (following next)
// to the front of the list.
func (s *lruSet) moveFront(first, last int32) {
	p, n := s.slots[first].prev, s.slots[last].next
	s.slots[p].next, s.slots[n].prev = n, p
	front := s.slots[0].next
	s.slots[first].prev, s.slots[last].next = 0, front
	s.slots[front].prev = last
	s.slots[0].next = first
}

func (s *lruSet) add(h uint64) {
	if i, ok := s.at[h]; ok {
		s.unlink(i)
		s.pushFront(i)
		return
	}
	var i int32
	if len(s.at) >= s.cap {
		// Full: the least recent block's slot becomes this one's.
		i = s.slots[0].prev
		s.unlink(i)
		delete(s.at, s.slots[i].hash)
	} else {
		i = int32(len(s.slots))
		s.slots = append(s.slots, lruSlot{})
	}
	s.slots[i].hash = h
	s.at[h] = i
	s.pushFront(i)
}

// resize changes the capacity, evicting the least recent blocks first.
// The slots are rebuilt in recency order so that none is left unused.
func (s *lruSet) resize(capacity int) {
	s.cap = max(capacity, 1)
	if len(s.at) <= s.cap && len(s.slots)-1 <= s.cap {
		return
	}
	old := s.slots
	s.slots = make([]lruSlot, 1, min(len(old), s.cap+1))
	clear(s.at)
	for i := old[0].next; i != 0 && len(s.at) < s.cap; i = old[i].next {
		j := int32(len(s.slots))
		s.slots = append(s.slots, lruSlot{hash: old[i].hash})
		s.at[old[i].hash] = j
		// Append at the tail: the walk goes from most to least recent.
		s.slots[j].prev, s.slots[j].next = s.slots[0].prev, 0
		s.slots[s.slots[0].prev].next = j
		s.slots[0].prev = j
	}
}

func (s *lruSet) pushFront(i int32) {
	first := s.slots[0].next
	s.slots[i].prev, s.slots[i].next = 0, first
	s.slots[first].prev = i
	s.slots[0].next = i
}

func (s *lruSet) unlink(i int32) {
	p, n := s.slots[i].prev, s.slots[i].next
	s.slots[p].next, s.slots[n].prev = n, p
}
