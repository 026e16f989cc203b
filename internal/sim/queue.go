package sim

import (
	"slices"
	"sort"
)

// pqueue is the pending queue: jobs sorted by lastKey, kept as a list of
// sorted blocks so that inserting or removing anywhere costs O(log n +
// block) and walking from the front stops early. A queue of 40,000 jobs
// is a few hundred blocks.
type pqueue struct {
	blocks [][]*job
	n      int
}

const blockMax = 512

func (q *pqueue) len() int { return q.n }

// find returns the block that holds (or would hold) key k.
func (q *pqueue) find(k key) int {
	b := sort.Search(len(q.blocks), func(i int) bool {
		blk := q.blocks[i]
		return !blk[len(blk)-1].lastKey.less(k)
	})
	if b == len(q.blocks) {
		b--
	}
	return b
}

func (q *pqueue) insert(j *job) {
	q.n++
	if len(q.blocks) == 0 {
		q.blocks = append(q.blocks, []*job{j})
		return
	}
	b := q.find(j.lastKey)
	blk := q.blocks[b]
	i := sort.Search(len(blk), func(i int) bool { return j.lastKey.less(blk[i].lastKey) })
	blk = slices.Insert(blk, i, j)
	if len(blk) > blockMax {
		half := len(blk) / 2
		right := append([]*job(nil), blk[half:]...)
		clear(blk[half:])
		blk = blk[:half]
		q.blocks = slices.Insert(q.blocks, b+1, right)
	}
	q.blocks[b] = blk
}

// remove takes j out; it must be in the queue under j.lastKey.
func (q *pqueue) remove(j *job) bool {
	if len(q.blocks) == 0 {
		return false
	}
	b := q.find(j.lastKey)
	blk := q.blocks[b]
	i := sort.Search(len(blk), func(i int) bool { return !blk[i].lastKey.less(j.lastKey) })
	for ; i < len(blk) && blk[i] != j; i++ {
	}
	if i == len(blk) {
		return false
	}
	blk = slices.Delete(blk, i, i+1)
	q.n--
	if len(blk) == 0 {
		q.blocks = slices.Delete(q.blocks, b, b+1)
	} else {
		q.blocks[b] = blk
	}
	return true
}

func (q *pqueue) first() *job {
	if q.n == 0 {
		return nil
	}
	return q.blocks[0][0]
}

// cursor walks the queue from the front, or from just after a key.
type cursor struct {
	q    *pqueue
	b, i int
}

func (q *pqueue) cursor() cursor { return cursor{q: q} }

// after positions a cursor at the first job whose key is above k.
func (q *pqueue) after(k key) cursor {
	c := cursor{q: q}
	if len(q.blocks) == 0 {
		return c
	}
	c.b = sort.Search(len(q.blocks), func(i int) bool {
		blk := q.blocks[i]
		return k.less(blk[len(blk)-1].lastKey)
	})
	if c.b < len(q.blocks) {
		blk := q.blocks[c.b]
		c.i = sort.Search(len(blk), func(i int) bool { return k.less(blk[i].lastKey) })
	}
	return c
}

// next returns the next job, or nil at the end. The queue must not change
// while a cursor is in use.
func (c *cursor) next() *job {
	for c.b < len(c.q.blocks) {
		blk := c.q.blocks[c.b]
		if c.i < len(blk) {
			j := blk[c.i]
			c.i++
			return j
		}
		c.b++
		c.i = 0
	}
	return nil
}

// peek returns the next job without moving.
func (c *cursor) peek() *job {
	d := *c
	return d.next()
}
