package controller

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gangway/gangway/internal/api"
	"github.com/gangway/gangway/internal/controlplane/store"
)

// ErrNotTaken is Submit's answer when no pass took the jobs in time: the
// caller stores them itself and a later pass schedules them.
var ErrNotTaken = errors.New("controller: submission not taken")

// Submitting through the leader's controller stores a new job in the same
// transaction as its first placement, when the pass places it at once:
// one store write and one fsync less per job, and no wait for the next
// pass to see it. A job the pass does not place is stored pending, as the
// API would have.

// submission is a batch of new jobs waiting for a pass.
type submission struct {
	jobs []*api.Job
	// claim is the idempotency key taken with jobs[0] (Submit takes one
	// job with a claim); nil: none.
	claim *store.Claim
	state atomic.Int32 // subWaiting, then subTaken or subWithdrawn
	// done receives the stored jobs (each as written) or why not, once
	// the pass that took it has committed.
	done chan submitted
}

type submitted struct {
	jobs []*api.Job
	err  error
}

const (
	subWaiting = iota
	subTaken
	subWithdrawn
)

// submissions holds the batches no pass has taken yet.
type submissions struct {
	mu   sync.Mutex
	q    []*submission
	poke chan struct{} // wakes Run
	// arrived ends a holdReports wait: a submission is waiting.
	arrived chan struct{}
	// passNanos is how long the last pass took to decide (up to its
	// writes, which a job stored directly would queue behind as well).
	passNanos atomic.Int64
	// slow is the pass time past which hand-offs are refused: slowPass,
	// or (in tests, whose passes a loaded machine can stretch) longer.
	slow time.Duration
}

// waiting reports whether a batch waits for a pass (withdrawn ones, which
// take() drops, do not count).
func (s *submissions) waiting() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, b := range s.q {
		if b.state.Load() == subWaiting {
			return true
		}
	}
	return false
}

// slowLastPass reports whether the last pass took longer than hand-offs
// are worth waiting for.
func (s *submissions) slowLastPass() bool {
	return time.Duration(s.passNanos.Load()) > s.slow
}

// slowPass is the pass decision time past which Submit does not offer
// jobs to passes: with a large backlog a pass takes longer than a store
// write, and new jobs would wait for the scheduler rather than in it.
const slowPass = 5 * time.Millisecond

// Submit hands new jobs (from store.NewJob: IDs reserved, not stored) to
// the next pass, which stores each one, placed if it can be, and returns
// them as stored. claim, if not nil, is an idempotency key the pass takes
// in the transaction of the job (then the only one), or, if a submission
// took it first, stores nothing and answers store.ErrKeyTaken. If no pass
// takes them within wait (the controller is busy with a long pass, or not
// running), it returns ErrNotTaken and has stored nothing. Any other error
// leaves it unknown whether a job was stored: create it again with
// store.CreateJobAs, which refuses an ID (and a key) that exists.
func (c *Controller) Submit(ctx context.Context, jobs []*api.Job, claim *store.Claim, wait time.Duration) ([]*api.Job, error) {
	if claim != nil && len(jobs) != 1 {
		return nil, errors.New("controller: an idempotency key goes with one job")
	}
	if c.subs.slowLastPass() {
		// The submitter would wait a whole pass: store it now instead.
		return nil, ErrNotTaken
	}
	s := &submission{jobs: jobs, claim: claim, done: make(chan submitted, 1)}
	c.subs.mu.Lock()
	c.subs.q = append(c.subs.q, s)
	c.subs.mu.Unlock()
	select {
	case c.subs.arrived <- struct{}{}:
	default:
	}
	c.wake()
	r, err := await(ctx, &s.state, s.done, wait)
	if err != nil {
		return nil, err
	}
	return r.jobs, r.err
}

// await waits up to wait for a pass to take a handed-over batch (its
// state moves from subWaiting to subTaken) and then for the outcome on
// done. Not taken in time, the batch is withdrawn: ErrNotTaken.
func await[T any](ctx context.Context, state *atomic.Int32, done <-chan T, wait time.Duration) (T, error) {
	var zero T
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case r := <-done:
		return r, nil
	case <-t.C:
	case <-ctx.Done():
	}
	if state.CompareAndSwap(subWaiting, subWithdrawn) {
		if err := ctx.Err(); err != nil {
			return zero, err
		}
		return zero, ErrNotTaken
	}
	// A pass has it: its outcome is the answer.
	select {
	case r := <-done:
		return r, nil
	case <-ctx.Done():
		return zero, ctx.Err()
	}
}

// wake starts a pass at once if Run is waiting for one.
func (c *Controller) wake() {
	select {
	case c.subs.poke <- struct{}{}:
	default:
	}
}

// take returns the new jobs of every batch still waiting, marking the
// batches taken; withdrawn ones are dropped.
func (c *Controller) take() []*submission {
	c.subs.mu.Lock()
	q := c.subs.q
	c.subs.q = nil
	c.subs.mu.Unlock()
	select { // what arrived is taken now
	case <-c.subs.arrived:
	default:
	}
	out := q[:0]
	for _, s := range q {
		if s.state.CompareAndSwap(subWaiting, subTaken) {
			out = append(out, s)
		}
	}
	return out
}

// freshJob is one taken new job during its pass: how its write went.
type freshJob struct {
	claim  *store.Claim // the idempotency key its write takes; nil: none
	stored *api.Job     // as written; nil until its write was committed or failed
	err    error
}

// answer tells every taken batch how its jobs were stored.
func answer(subs []*submission, fresh map[string]*freshJob, passErr error) {
	for _, s := range subs {
		r := submitted{jobs: make([]*api.Job, len(s.jobs))}
		for i, j := range s.jobs {
			f := fresh[j.ID]
			switch {
			case f == nil || f.stored == nil:
				r.err = errors.Join(passErr, errors.New("controller: the pass wrote no job "+j.ID))
			case f.err != nil:
				r.err = f.err
			default:
				r.jobs[i] = f.stored
			}
		}
		if r.err != nil {
			r.jobs = nil
		}
		s.done <- r
	}
}
