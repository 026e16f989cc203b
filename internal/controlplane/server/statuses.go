package server

import (
	"context"
	"sync"
	"time"

	"github.com/gangway/gangway/internal/api"
	"github.com/gangway/gangway/internal/controlplane/store"
)

// statusBatcher stores rank statuses from concurrent heartbeats in shared
// transactions (group commit): the first heartbeat to find no commit in
// progress commits everything queued, round after round, for itself and
// for those that queued behind it; each caller returns when its own
// statuses are stored. With many agents reporting starts and exits at
// once this is one transaction per round rather than one per heartbeat.
type statusBatcher struct {
	st *store.Store

	mu      sync.Mutex // guards the fields below
	pending []api.RankStatus
	waiters []chan error
	busy    bool // a caller is committing
}

// put stores rs and returns once they are stored (or failed to be), or
// when ctx ends: the commit goes on without the caller.
func (b *statusBatcher) put(ctx context.Context, rs []api.RankStatus) error {
	if len(rs) == 0 {
		return nil
	}
	done := make(chan error, 1)
	b.mu.Lock()
	b.pending = append(b.pending, rs...)
	b.waiters = append(b.waiters, done)
	if !b.busy {
		// The commit runs apart from every caller, its starter included:
		// a heartbeat that starts it while the store takes no write must
		// still be answered within its own deadline (an answer late past
		// the agent's lease fences the node's ranks), and its giving up
		// must not fail the statuses others queued behind it.
		b.busy = true
		go b.commit(context.WithoutCancel(ctx))
	}
	b.mu.Unlock()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// commitTimeout bounds one round of the group commit.
const commitTimeout = 10 * time.Second

// commit stores what is pending, round after round, until nothing is.
func (b *statusBatcher) commit(ctx context.Context) {
	b.mu.Lock()
	for len(b.pending) > 0 {
		batch, ws := b.pending, b.waiters
		b.pending, b.waiters = nil, nil
		b.mu.Unlock()
		cctx, cancel := context.WithTimeout(ctx, commitTimeout)
		err := b.st.PutRankStatuses(cctx, batch)
		cancel()
		for _, w := range ws {
			w <- err
		}
		b.mu.Lock()
	}
	b.busy = false
	b.mu.Unlock()
}
