package enginesim

// block is one KV-cache block of BlockSize tokens.
type block struct {
	ref        int32  // requests using it; 0 means it sits in the free queue
	hashed     bool   // it holds a full block registered in the prefix cache
	hash       uint64 // valid when hashed
	prev, next *block // free-queue links; nil when not queued
}

// blockPool is vLLM's KV block manager: a fixed set of blocks, a free
// queue in eviction order (least recently freed first) and a map from
// block hash to the block holding it. Freed blocks keep their hash and
// stay findable until reallocated, which is what makes prefix caching
// automatic; reallocating one is an eviction. Not safe for concurrent
// use; the Engine owns it.
type blockPool struct {
	blocks  []block
	head    block // sentinel of the circular free queue
	nfree   int
	cached  map[uint64]*block
	caching bool

	evictions int64
}

func newBlockPool(n int, caching bool) *blockPool {
	p := &blockPool{blocks: make([]block, n), caching: caching, cached: make(map[uint64]*block)}
	p.head.next, p.head.prev = &p.head, &p.head
	for i := range p.blocks {
		p.pushBack(&p.blocks[i])
	}
	return p
}

func (p *blockPool) pushBack(b *block) {
	b.prev, b.next = p.head.prev, &p.head
	p.head.prev.next = b
	p.head.prev = b
	p.nfree++
}

func (p *blockPool) unlink(b *block) {
	b.prev.next, b.next.prev = b.next, b.prev
	b.prev, b.next = nil, nil
	p.nfree--
}

// numFree counts blocks not referenced by any request, cached or not.
func (p *blockPool) numFree() int { return p.nfree }

// usage is vLLM's kv_cache_usage_perc: the share of blocks referenced.
func (p *blockPool) usage() float64 {
	if len(p.blocks) == 0 {
		return 0
	}
	return 1 - float64(p.nfree)/float64(len(p.blocks))
}

// lookup returns the cached blocks holding the longest prefix of hashes,
// at most limit of them. It changes nothing.
func (p *blockPool) lookup(hashes []uint64, limit int) []*block {
	if !p.caching {
		return nil
	}
	var out []*block
	for i, h := range hashes {
		if i >= limit {
			break
		}
		b, ok := p.cached[h]
		if !ok {
			break
		}
		out = append(out, b)
	}
	return out
}

// prefixLen is len(lookup(hashes, len(hashes))) without allocating.
func (p *blockPool) prefixLen(hashes []uint64) int {
	if !p.caching {
		return 0
	}
	n := 0
	for _, h := range hashes {
		if _, ok := p.cached[h]; !ok {
			break
		}
		n++
	}
	return n
}

// touch takes a reference on each block, pulling unreferenced ones out of
// the free queue so they cannot be evicted.
func (p *blockPool) touch(bs []*block) {
	for _, b := range bs {
		if b.ref == 0 {
			p.unlink(b)
		}
		b.ref++
	}
}

// alloc takes n blocks from the head of the free queue, evicting whatever
// they cached. The caller has checked numFree.
func (p *blockPool) alloc(n int, dst []*block) []*block {
	for range n {
		b := p.head.next
		p.unlink(b)
		if b.hashed {
			if p.cached[b.hash] == b {
				delete(p.cached, b.hash)
			}
			b.hashed = false
			p.evictions++
		}
		b.ref = 1
		dst = append(dst, b)
	}
	return dst
}

// release drops one reference on each block, in the order given; blocks
// reaching zero join the tail of the free queue (evicted last).
func (p *blockPool) release(bs []*block) {
	for _, b := range bs {
		b.ref--
		if b.ref == 0 {
			p.pushBack(b)
		}
	}
}

// register records that b holds the full block with hash h. If another
// block already holds h the map keeps the first, as vLLM does.
func (p *blockPool) register(b *block, h uint64) {
	if !p.caching || b.hashed {
		return
	}
	if _, ok := p.cached[h]; ok {
		return
	}
	b.hashed, b.hash = true, h
	p.cached[h] = b
}
