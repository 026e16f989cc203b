package store

import (
	"bytes"
	"context"
	"fmt"
	"sort"
	"strconv"
	"time"
)

// cachedAssign is one assignment as stored, and the revision it was
// written at.
type cachedAssign struct {
	raw []byte
	mod int64
}

// Assignments returns node's assignments, as JSON in api.AssignmentList's
// shape, once something in them changed after revision after (at once when
// after is 0), or when wait passes or ctx ends, whichever is first. The
// list's revision is the cache's: every change up to it is in the list, so
// an agent that acknowledges it has seen every stop issued before it.
// With delta, a list answering a change carries in full only the
// assignments written after after, and names the others (which the asker
// had at after) in "unchanged".
//
// It never answers from a view older than the asker's: before the cache
// has loaded the store (a server just started), or while it is behind
// revision after (the asker's list came from a replica further on), it
// waits, and fails with ErrStale when wait passes first. An agent that
// applied such a list would stop ranks it was assigned since.
func (c *Cache) Assignments(ctx context.Context, node string, after int64, wait time.Duration, delta bool) (body []byte, rev int64, err error) {
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	if err := c.WaitRevision(wctx, max(after, 1)); err != nil {
		if ctx.Err() != nil {
			return nil, 0, ctx.Err()
		}
		cur := c.Revision()
		if cur == 0 {
			return nil, 0, fmt.Errorf("%w: it has not loaded the store since the server started; retry", ErrStale)
		}
		return nil, 0, fmt.Errorf("%w: it is at revision %d, before the index %d asked with; retry", ErrStale, cur, after)
	}
	for {
		c.mu.Lock()
		if after == 0 || c.assignAt[node] > after {
			since := int64(0)
			if delta {
				since = after
			}
			out, rev := c.assignmentsLocked(node, since), c.rev
			c.mu.Unlock()
			return out, rev, nil
		}
		ch := c.wake[node]
		if ch == nil {
			ch = make(chan struct{})
			c.wake[node] = ch
		}
		c.mu.Unlock()
		select {
		case <-ch:
		case <-wctx.Done():
			if ctx.Err() != nil {
				return nil, 0, ctx.Err()
			}
			after = 0 // answer with the list as it is, at after or later
		}
	}
}

// assignmentsLocked encodes node's list; with since > 0, as a delta
// against the list at revision since.
func (c *Cache) assignmentsLocked(node string, since int64) []byte {
	m := c.assign[node]
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b bytes.Buffer
	b.WriteString(`{"revision":`)
	b.WriteString(strconv.FormatInt(c.rev, 10))
	if since > 0 {
		b.WriteString(`,"delta":true`)
	}
	b.WriteString(`,"assignments":[`)
	n := 0
	for _, k := range keys {
		if a := m[k]; a.mod > since {
			if n > 0 {
				b.WriteByte(',')
			}
			b.Write(a.raw)
			n++
		}
	}
	b.WriteString("]")
	if since > 0 && n < len(keys) {
		b.WriteString(`,"unchanged":[`)
		n = 0
		for _, k := range keys {
			if m[k].mod <= since {
				if n > 0 {
					b.WriteByte(',')
				}
				b.WriteString(strconv.Quote(k)) // task keys are plain ASCII
				n++
			}
		}
		b.WriteString("]")
	}
	b.WriteString("}")
	return b.Bytes()
}
