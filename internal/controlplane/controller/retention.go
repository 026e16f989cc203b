package controller

import (
	"context"
	"time"

	"github.com/gangway/gangway/internal/api"
	"github.com/gangway/gangway/internal/controlplane/store"
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
// no longer keeps, oldest first, archiving them first if asked, and
// returns how many it picked.
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
	del := ex
	if c.cfg.JobArchive != nil {
		var err error
		if del, err = c.archive(ctx, ex); err != nil {
			return len(ex), err
		}
	}
	n, err := c.st.DeleteFinishedJobs(ctx, del)
	if n > 0 {
		c.log.Info("deleted finished jobs past retention", "jobs", n,
			"oldest", ex[0].ID, "finished", ex[0].FinishedAt.Format(time.RFC3339))
	}
	return len(ex), err
}

// archive appends jobs, read whole, to Config.JobArchive and returns them
// at the revisions it read, so that what is deleted is what was archived.
// The append is durable, and all or nothing.
func (c *Controller) archive(ctx context.Context, jobs []store.FinishedJob) ([]store.FinishedJob, error) {
	ids := make([]string, len(jobs))
	for i, j := range jobs {
		ids[i] = j.ID
	}
	ds, err := c.st.JobDetails(ctx, ids)
	if err != nil {
		return nil, err
	}
	keep := make([]api.JobDetail, 0, len(ds))
	out := make([]store.FinishedJob, 0, len(ds))
	for i := range ds {
		j := &ds[i].Job
		if !j.Status.Phase.Final() {
			continue // a finished job made live again is not retention's
		}
		keep = append(keep, ds[i])
		out = append(out, store.FinishedJob{ID: j.ID, FinishedAt: j.Status.FinishedAt, ModRevision: j.ModRevision})
	}
	if err := c.cfg.JobArchive.Append(keep); err != nil {
		return nil, err
	}
	return out, nil
}
