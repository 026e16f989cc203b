package controller

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/gangway/gangway/internal/api"
	"github.com/gangway/gangway/internal/store"
)

// The leader deletes finished jobs past the retention age, and the oldest
// beyond the count limit, with their rank statuses; live jobs stay, however
// old.
func TestRetentionDeletesOldAndSurplusFinishedJobs(t *testing.T) {
	tc := newTestControlWith(t, func(c *Config) {
		c.JobRetention, c.MaxFinishedJobs, c.RetentionTick = time.Hour, 3, 20*time.Millisecond
	})
	ctx := context.Background()
	now := time.Now()
	finished := func(ago time.Duration) *api.Job {
		t.Helper()
		j := tc.newJob(t, 1)
		j.SubmittedAt = now.Add(-ago - time.Minute)
		j.Status.Phase, j.Status.FinishedAt = api.JobSucceeded, now.Add(-ago)
		if err := tc.st.CreateJobAs(ctx, j); err != nil {
			t.Fatal(err)
		}
		if err := tc.st.PutRankStatuses(ctx, []api.RankStatus{{JobID: j.ID, Attempt: 1, Rank: 0, Node: "n1", State: api.RankExited}}); err != nil {
			t.Fatal(err)
		}
		return j
	}
	old := finished(2 * time.Hour)       // past the age
	surplus := finished(4 * time.Minute) // the oldest beyond 3
	kept := []*api.Job{finished(3 * time.Minute), finished(2 * time.Minute), finished(time.Minute)}
	live := tc.newJob(t, 8)
	live.SubmittedAt = now.Add(-3 * time.Hour) // submitted long ago, never finished
	if err := tc.st.CreateJobAs(ctx, live); err != nil {
		t.Fatal(err)
	}
	tc.run(t)

	gone := func(j *api.Job) bool {
		_, err := tc.st.Job(ctx, j.ID)
		return errors.Is(err, store.ErrNotFound)
	}
	for deadline := time.Now().Add(10 * time.Second); !gone(old) || !gone(surplus); {
		if time.Now().After(deadline) {
			t.Fatalf("after 10s: job %s (finished 2h ago) gone %v, job %s (4th newest of 3 kept) gone %v; want both deleted",
				old.ID, gone(old), surplus.ID, gone(surplus))
		}
		time.Sleep(20 * time.Millisecond)
	}
	if rs, _ := tc.st.RankStatuses(ctx, old.ID); len(rs) != 0 {
		t.Errorf("deleted job %s left %d rank statuses", old.ID, len(rs))
	}
	// A few more looks must not take more.
	time.Sleep(100 * time.Millisecond)
	for _, j := range append(kept, live) {
		if gone(j) {
			t.Errorf("job %s was deleted; only 2 of the 6 were past retention", j.ID)
		}
	}
}

// With neither limit set, nothing is deleted.
func TestNoRetentionKeepsFinishedJobs(t *testing.T) {
	tc := newTestControlWith(t, func(c *Config) { c.RetentionTick = 10 * time.Millisecond })
	ctx := context.Background()
	j := tc.newJob(t, 1)
	j.Status.Phase, j.Status.FinishedAt = api.JobFailed, time.Now().Add(-365*24*time.Hour)
	if err := tc.st.CreateJobAs(ctx, j); err != nil {
		t.Fatal(err)
	}
	tc.run(t)
	time.Sleep(200 * time.Millisecond)
	if _, err := tc.st.Job(ctx, j.ID); err != nil {
		t.Fatalf("job finished a year ago, no retention set: %v; want it kept", err)
	}
}
