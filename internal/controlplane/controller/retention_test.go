package controller

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/gangway/gangway/internal/api"
	"github.com/gangway/gangway/internal/controlplane/jobarchive"
	"github.com/gangway/gangway/internal/controlplane/store"
)

// The leader deletes finished jobs past the retention age, and the oldest
// beyond the count limit, with their rank statuses; live jobs stay, however
// old.
func TestRetentionDeletesOldAndSurplusFinishedJobs(t *testing.T) {
	tc := newTestControlWith(t, func(c *Config) {
		c.JobRetention, c.MaxFinishedJobs, c.RetentionTick = time.Hour, 3, 20*time.Millisecond
	})
	ctx := context.Background()
	old := tc.storeFinished(t, 2*time.Hour)       // past the age
	surplus := tc.storeFinished(t, 4*time.Minute) // the oldest beyond 3
	kept := []*api.Job{tc.storeFinished(t, 3*time.Minute), tc.storeFinished(t, 2*time.Minute), tc.storeFinished(t, time.Minute)}
	live := tc.newJob(t, 8)
	live.SubmittedAt = time.Now().Add(-3 * time.Hour) // submitted long ago, never finished
	if err := tc.st.CreateJobAs(ctx, live, nil); err != nil {
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
	if err := tc.st.CreateJobAs(ctx, j, nil); err != nil {
		t.Fatal(err)
	}
	tc.run(t)
	time.Sleep(200 * time.Millisecond)
	if _, err := tc.st.Job(ctx, j.ID); err != nil {
		t.Fatalf("job finished a year ago, no retention set: %v; want it kept", err)
	}
}

// storeFinished stores a job that finished ago, with one rank status.
func (tc *testControl) storeFinished(t *testing.T, ago time.Duration) *api.Job {
	t.Helper()
	ctx := context.Background()
	j := tc.newJob(t, 1)
	j.Status.Phase, j.Status.FinishedAt = api.JobSucceeded, time.Now().Add(-ago)
	if err := tc.st.CreateJobAs(ctx, j, nil); err != nil {
		t.Fatal(err)
	}
	if err := tc.st.PutRankStatuses(ctx, []api.RankStatus{{JobID: j.ID, Attempt: 1, Rank: 0, Node: "n1", State: api.RankExited, ExitCode: 3}}); err != nil {
		t.Fatal(err)
	}
	return j
}

// Jobs retention deletes are in the archive first, whole, once each.
func TestRetentionArchivesJobsBeforeDeletingThem(t *testing.T) {
	archive := filepath.Join(t.TempDir(), "jobs.jsonl")
	tc := newTestControlWith(t, func(c *Config) {
		c.JobRetention, c.RetentionTick, c.JobArchive = time.Hour, 20*time.Millisecond, jobarchive.New(jobarchive.Config{Path: archive})
	})
	ctx := context.Background()
	old1, old2 := tc.storeFinished(t, 3*time.Hour), tc.storeFinished(t, 2*time.Hour)
	recent := tc.storeFinished(t, time.Minute)
	tc.run(t)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		_, e1 := tc.st.Job(ctx, old1.ID)
		_, e2 := tc.st.Job(ctx, old2.ID)
		if errors.Is(e1, store.ErrNotFound) && errors.Is(e2, store.ErrNotFound) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("jobs finished 3h and 2h ago, retention 1h: still there after 10s (%v, %v)", e1, e2)
		}
	}
	time.Sleep(100 * time.Millisecond) // later looks must not archive them again
	f, err := os.Open(archive)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var got []api.JobDetail
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var d api.JobDetail
		if err := json.Unmarshal(sc.Bytes(), &d); err != nil {
			t.Fatalf("archive line %q: %v", sc.Text(), err)
		}
		got = append(got, d)
	}
	if len(got) != 2 || got[0].Job.ID != old1.ID || got[1].Job.ID != old2.ID {
		t.Fatalf("archive holds %d jobs %v; want %s then %s, once each", len(got), got, old1.ID, old2.ID)
	}
	for _, d := range got {
		if d.Job.Status.Phase != api.JobSucceeded || len(d.Ranks) != 1 || d.Ranks[0].ExitCode != 3 {
			t.Errorf("archived job %s: %s with ranks %+v; want Succeeded with its rank's exit 3", d.Job.ID, d.Job.Status.Phase, d.Ranks)
		}
	}
	if _, err := tc.st.Job(ctx, recent.ID); err != nil {
		t.Errorf("job finished a minute ago: %v; want kept", err)
	}
}

// An archive that cannot be written keeps the jobs in the store.
func TestRetentionKeepsJobsItCannotArchive(t *testing.T) {
	dir := t.TempDir()
	tc := newTestControlWith(t, func(c *Config) {
		c.JobRetention, c.RetentionTick, c.JobArchive = time.Hour, 10*time.Millisecond, jobarchive.New(jobarchive.Config{Path: filepath.Join(dir, "gone", "jobs.jsonl")})
	})
	old := tc.storeFinished(t, 2*time.Hour)
	tc.run(t)
	time.Sleep(200 * time.Millisecond)
	if _, err := tc.st.Job(context.Background(), old.ID); err != nil {
		t.Fatalf("job whose archiving failed: %v; want it kept", err)
	}
}
