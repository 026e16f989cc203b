package store

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/gangway/gangway/internal/api"
)

// TestCacheNeverAnswersFromBehindTheAsker: a long poll is not answered
// from a cache that has not loaded the store (a server just started), nor
// from one behind the revision the asker holds (its list came from a
// replica further on): it waits for the cache, bounded by its wait, then
// fails with ErrStale; once the cache has caught up it answers at the
// asker's revision or later.
func TestCacheNeverAnswersFromBehindTheAsker(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	c := NewCache(s, nil)
	const wait = 200 * time.Millisecond

	for _, after := range []int64{0, 5} {
		if _, _, err := c.Assignments(ctx, "n1", after, wait, false); !errors.Is(err, ErrStale) {
			t.Fatalf("index %d before the first list: err = %v; want ErrStale", after, err)
		}
	}

	// One list, then the cache stops following: it stays at rev while the
	// store moves on.
	rctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = c.Run(rctx) }()
	if err := c.WaitRevision(ctx, 1); err != nil {
		t.Fatal(err)
	}
	stop()
	<-done
	rev := c.Revision()
	for i := range 2 {
		if err := s.PutQueue(ctx, &api.Queue{Spec: api.QueueSpec{Name: string(rune('a' + i)), Weight: 1}}); err != nil {
			t.Fatal(err)
		}
	}
	ahead := rev + 2
	if _, _, err := c.Assignments(ctx, "n1", ahead, wait, false); !errors.Is(err, ErrStale) {
		t.Fatalf("index %d from a cache at %d: err = %v; want ErrStale", ahead, rev, err)
	}
	if _, got, err := c.Assignments(ctx, "n1", rev, 0, false); err != nil || got != rev {
		t.Fatalf("index %d (the cache's own) with no wait: revision %d, err %v; want the list at %d", rev, got, err, rev)
	}

	// The cache follows again: the poll ahead of it waits and is answered
	// at its index or later.
	type answer struct {
		body []byte
		rev  int64
		err  error
	}
	got := make(chan answer, 1)
	go func() {
		b, r, err := c.Assignments(ctx, "n1", ahead, 5*wait, false)
		got <- answer{b, r, err}
	}()
	rctx, stop = context.WithCancel(ctx)
	done = make(chan struct{})
	go func() { defer close(done); _ = c.Run(rctx) }()
	defer func() { stop(); <-done }()
	a := <-got
	var l api.AssignmentList
	if a.err == nil {
		a.err = json.Unmarshal(a.body, &l)
	}
	if a.err != nil || a.rev < ahead || l.Revision != a.rev {
		t.Fatalf("poll at %d once the cache caught up: revision %d (body %s), err %v; want %d or later", ahead, a.rev, a.body, a.err, ahead)
	}
}
