package controller

import (
	"context"
	"time"
)

// Submissions' leftovers: arrays whose tasks a crashed submitter did not
// all write, and idempotency keys a leader change kept past their time
// (see store.FinishArrays and store.ExpireKeys). The leader looks at once
// when it starts, so that an array cut short by the last leader's crash
// is whole within seconds, and then every sweepTick.
const sweepTick = time.Minute

// sweepArrayAge is how old an unfinished array must be before the sweep
// finishes it: a younger one's submitter is still writing it.
const sweepArrayAge = 30 * time.Second

// sweep runs sweepOnce at once and every sweepTick until ctx ends.
func (c *Controller) sweep(ctx context.Context) {
	first := true
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		c.sweepOnce(ctx, first)
		first = false
		t.Reset(sweepTick)
	}
}

// sweepOnce finishes unfinished arrays (every one when all, as at a new
// leader's start; else those older than sweepArrayAge) and expires
// idempotency keys. A submitter still writing an array it finishes loses
// nothing: both go on from the array's count of written tasks.
func (c *Controller) sweepOnce(ctx context.Context, all bool) {
	now := c.cfg.Now()
	before := now.Add(-sweepArrayAge)
	if all {
		before = now.Add(time.Second)
	}
	n, err := c.st.FinishArrays(ctx, before)
	if n > 0 {
		c.log.Info("finished arrays a submitter left part-written", "arrays", n)
	}
	if err != nil && ctx.Err() == nil {
		c.log.Warn("finishing part-written arrays failed", "err", err)
	}
	n, err = c.st.ExpireKeys(ctx, now)
	if n > 0 {
		c.log.Info("expired idempotency keys a leader change had kept", "leases", n)
	}
	if err != nil && ctx.Err() == nil {
		c.log.Warn("expiring idempotency keys failed", "err", err)
	}
}
