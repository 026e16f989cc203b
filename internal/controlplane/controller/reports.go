package controller

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gangway/gangway/internal/api"
)

// Rank reports through the leader's controller: the API hands the rank
// statuses of a heartbeat to the next pass, which acts on them as if it
// had read them and stores them in the transaction of what it decided (an
// attempt that ended with its last exit), or on their own. An exit then
// costs one store write where it cost two (the status, then the end the
// controller wrote after seeing it), and the end does not wait for the
// status to come back through the watch.

// reportBatch is one heartbeat's changed statuses waiting for a pass.
type reportBatch struct {
	ranks []api.RankStatus
	state atomic.Int32 // subWaiting, then subTaken or subWithdrawn
	done  chan error
}

type reportQueue struct {
	mu   sync.Mutex
	q    []*reportBatch
	hold time.Duration // reportHold; tests set it
}

// maxCarried bounds the statuses one job write carries, so that it stays
// within a transaction's operation limit.
const maxCarried = 64

// Report hands rank statuses to the next pass and returns once they are
// stored. ErrNotTaken: no pass took them within wait (or passes are slow)
// and nothing was stored; any other error leaves it unknown, and storing
// them again is harmless.
func (c *Controller) Report(ctx context.Context, rs []api.RankStatus, wait time.Duration) error {
	if len(rs) == 0 {
		return nil
	}
	if c.subs.slowLastPass() {
		return ErrNotTaken
	}
	b := &reportBatch{ranks: rs, done: make(chan error, 1)}
	c.reps.mu.Lock()
	c.reps.q = append(c.reps.q, b)
	c.reps.mu.Unlock()
	c.wake()
	err, werr := await(ctx, &b.state, b.done, wait)
	if werr != nil {
		return werr
	}
	return err
}

// reportHold is how long rank reports wait for the next submission when
// no job waits for GPUs they may free: one pass and one store write then
// serve both (see holdReports). Well under the handler's passTakeWait.
const reportHold = time.Millisecond

// holdReports waits up to reportHold (reps.hold) for a submission when only rank
// reports are waiting for a pass. With jobs submitted one after another,
// each pass would otherwise alternate between a submission and the exits
// reported meanwhile, and every submission would wait for a report pass
// and its store write. The caller skips it while jobs wait for GPUs: an
// exit's freed GPUs should reach them at once.
func (c *Controller) holdReports(ctx context.Context) {
	if !c.reps.waiting() || c.subs.waiting() {
		return
	}
	t := time.NewTimer(c.reps.hold)
	defer t.Stop()
	select {
	case <-c.subs.arrived:
	case <-t.C:
	case <-ctx.Done():
	}
}

// waiting reports whether a batch waits for a pass (withdrawn ones, which
// take() drops, do not count).
func (q *reportQueue) waiting() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, b := range q.q {
		if b.state.Load() == subWaiting {
			return true
		}
	}
	return false
}

// takeReports returns the batches still waiting, marked taken, and their
// statuses by task key (a later report of a task wins).
func (c *Controller) takeReports() ([]*reportBatch, map[string]*api.RankStatus) {
	c.reps.mu.Lock()
	q := c.reps.q
	c.reps.q = nil
	c.reps.mu.Unlock()
	var taken []*reportBatch
	var by map[string]*api.RankStatus
	for _, b := range q {
		if !b.state.CompareAndSwap(subWaiting, subTaken) {
			continue
		}
		taken = append(taken, b)
		if by == nil {
			by = map[string]*api.RankStatus{}
		}
		for i := range b.ranks {
			r := b.ranks[i]
			by[api.TaskKey(r.JobID, r.Attempt, r.Rank)] = &r
		}
	}
	return taken, by
}
