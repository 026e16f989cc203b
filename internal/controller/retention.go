package controller

import (
	"context"
	"time"

	"github.com/gangway/gangway/internal/store"
)

// retainBatch bounds the jobs one look deletes, so that a long backlog
// (retention just turned on over months of history) is worked off in
// steps between the passes' writes instead of holding the store for
// minutes.
const retainBatch = 4096

// retain deletes finished jobs past Config.JobRetention or beyond
// Config.MaxFinishedJobs every RetentionTick until ctx ends; with a
// backlog it looks again after a second.
func (c *Controller) retain(ctx context.Context) {
	t := time.NewTimer(c.cfg.RetentionTick)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		picked, err := c.sweepFinished(ctx)
		if err != nil && ctx.Err() == nil {
			c.log.Warn("deleting finished jobs failed", "err", err)
		}
		next := c.cfg.RetentionTick
		if picked == retainBatch {
			next = min(next, time.Second)
		}
		t.Reset(next)
	}
}

// sweepFinished deletes up to retainBatch of the finished jobs retention
// no longer keeps, oldest first, and returns how many it picked.
func (c *Controller) sweepFinished(ctx context.Context) (int, error) {
	var cutoff time.Time
	if c.cfg.JobRetention > 0 {
		cutoff = c.cfg.Now().Add(-c.cfg.JobRetention)
	}
	ex := store.Expired(c.cache.FinishedJobs(), cutoff, c.cfg.MaxFinishedJobs)
	if len(ex) == 0 {
		return 0, nil
	}
	ex = ex[:min(len(ex), retainBatch)]
	n, err := c.st.DeleteFinishedJobs(ctx, ex)
	if n > 0 {
		c.log.Info("deleted finished jobs past retention", "jobs", n,
			"oldest", ex[0].ID, "finished", ex[0].FinishedAt.Format(time.RFC3339))
	}
	return len(ex), err
}
