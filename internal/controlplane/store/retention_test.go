package store

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/gangway/gangway/internal/api"
	"github.com/google/go-cmp/cmp"
)

// finishedJob stores a job that finished at, with a rank status, a
// checkpoint record and progress of its own.
func finishedJob(t *testing.T, s *Store, at time.Time) *api.Job {
	t.Helper()
	ctx := context.Background()
	j, err := s.NewJob(ctx, spec(1), at.Add(-time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	j.Status.Phase, j.Status.FinishedAt = api.JobSucceeded, at
	if err := s.CreateJobAs(ctx, j, nil); err != nil {
		t.Fatal(err)
	}
	if err := s.PutRankStatuses(ctx, []api.RankStatus{{JobID: j.ID, Attempt: 1, Rank: 0, Node: "n1", State: api.RankExited}}); err != nil {
		t.Fatal(err)
	}
	if err := s.PutCheckpoint(ctx, j.ID, api.Checkpoint{Step: 10, Path: "/c", Attempt: 1}); err != nil {
		t.Fatal(err)
	}
	if err := s.AppendProgress(ctx, j.ID, []api.Progress{{Step: 10}}); err != nil {
		t.Fatal(err)
	}
	if j, err = s.Job(ctx, j.ID); err != nil {
		t.Fatal(err)
	}
	return j
}

func TestDeleteFinishedJobsTakesEverythingOfTheirsAndSkipsChangedOnes(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	now := time.Now()
	var jobs []*api.Job
	for i := range deleteChunk + 6 { // more than one transaction
		jobs = append(jobs, finishedJob(t, s, now.Add(time.Duration(i)*time.Second)))
	}
	kept := finishedJob(t, s, now)
	changed := jobs[3]
	if _, err := s.ModifyJob(ctx, changed.ID, func(j *api.Job) error { j.Status.Reason = "edited"; return nil }); err != nil {
		t.Fatal(err)
	}
	var del []FinishedJob
	for _, j := range jobs {
		del = append(del, FinishedJob{ID: j.ID, FinishedAt: j.Status.FinishedAt, ModRevision: j.ModRevision})
	}
	n, err := s.DeleteFinishedJobs(ctx, del)
	if err != nil {
		t.Fatal(err)
	}
	if n != len(jobs)-1 {
		t.Errorf("deleted %d jobs; want %d (all but the one changed since it was listed)", n, len(jobs)-1)
	}
	for _, j := range jobs {
		_, err := s.Job(ctx, j.ID)
		if j == changed {
			if err != nil {
				t.Errorf("job %s, changed after it was listed, was deleted: %v", j.ID, err)
			}
			continue
		}
		if !errors.Is(err, ErrNotFound) {
			t.Fatalf("job %s after its deletion: %v; want not found", j.ID, err)
		}
		rs, _ := s.RankStatuses(ctx, j.ID)
		cs, _ := s.Checkpoints(ctx, j.ID)
		pl, _ := s.Progress(ctx, j.ID)
		if len(rs) != 0 || len(cs) != 0 || pl != nil {
			t.Fatalf("job %s deleted but left %d rank statuses, %d checkpoints, progress %+v", j.ID, len(rs), len(cs), pl)
		}
	}
	// A job whose ID another's starts with keeps everything.
	if rs, _ := s.RankStatuses(ctx, kept.ID); len(rs) != 1 {
		t.Errorf("job %s, not deleted, has %d rank statuses; want 1", kept.ID, len(rs))
	}
	if cs, _ := s.Checkpoints(ctx, kept.ID); len(cs) != 1 {
		t.Errorf("job %s, not deleted, has %d checkpoints; want 1", kept.ID, len(cs))
	}
}

func TestExpiredPicksOldestPastAgeOrCount(t *testing.T) {
	base := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	// IDs 1..6 finished at base+0h..5h, listed out of order; 9 and 10
	// finished together with 5.
	var fs []FinishedJob
	for _, i := range []int{4, 1, 6, 3, 2, 5} {
		fs = append(fs, FinishedJob{ID: fmt.Sprint(i), FinishedAt: base.Add(time.Duration(i-1) * time.Hour)})
	}
	fs = append(fs, FinishedJob{ID: "10", FinishedAt: base.Add(4 * time.Hour)}, FinishedJob{ID: "9", FinishedAt: base.Add(4 * time.Hour)})
	ids := func(fs []FinishedJob) []string {
		out := []string{}
		for _, f := range fs {
			out = append(out, f.ID)
		}
		return out
	}
	for _, c := range []struct {
		name   string
		cutoff time.Time
		keep   int
		want   []string
	}{
		{"nothing asked", time.Time{}, 0, []string{}},
		{"age only", base.Add(2 * time.Hour), 0, []string{"1", "2"}},
		{"count only", time.Time{}, 5, []string{"1", "2", "3"}},
		{"count splits a tie by ID", time.Time{}, 3, []string{"1", "2", "3", "4", "5"}},
		{"age beyond count", base.Add(4 * time.Hour), 6, []string{"1", "2", "3", "4"}},
		{"count beyond age", base.Add(time.Hour), 2, []string{"1", "2", "3", "4", "5", "9"}},
	} {
		if diff := cmp.Diff(c.want, ids(Expired(fs, c.cutoff, c.keep))); diff != "" {
			t.Errorf("%s (-want +got):\n%s", c.name, diff)
		}
	}
}

func TestCacheListsFinishedJobsUntilDeleted(t *testing.T) {
	s := newStore(t)
	ctx, cancel := context.WithCancel(context.Background())
	c := NewCache(s, slog.New(slog.DiscardHandler))
	done := make(chan struct{})
	go func() { defer close(done); _ = c.Run(ctx) }()
	defer func() { cancel(); <-done }()
	old := finishedJob(t, s, time.Now().Add(-time.Hour)) // before the cache's list
	live, err := s.CreateJob(ctx, spec(1), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	rev, _ := s.Revision(ctx)
	if err := c.WaitRevision(ctx, rev); err != nil {
		t.Fatal(err)
	}
	got := c.FinishedJobs()
	if len(got) != 1 || got[0].ID != old.ID || got[0].ModRevision != old.ModRevision || !got[0].FinishedAt.Equal(old.Status.FinishedAt) {
		t.Fatalf("finished jobs in the cache: %+v; want only job %s at revision %d", got, old.ID, old.ModRevision)
	}
	// The live job finishes: it joins the list.
	fin, err := s.ModifyJob(ctx, live.ID, func(j *api.Job) error {
		j.Status.Phase, j.Status.FinishedAt = api.JobFailed, time.Now()
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.DeleteFinishedJobs(ctx, []FinishedJob{{ID: old.ID, ModRevision: old.ModRevision}}); err != nil {
		t.Fatal(err)
	}
	rev, _ = s.Revision(ctx)
	if err := c.WaitRevision(ctx, rev); err != nil {
		t.Fatal(err)
	}
	got = c.FinishedJobs()
	if len(got) != 1 || got[0].ID != fin.ID || got[0].ModRevision != fin.ModRevision {
		t.Fatalf("finished jobs after %s finished and %s was deleted: %+v", fin.ID, old.ID, got)
	}
}

func TestJobDetailsReadsJobsWholeAndLeavesOutMissingOnes(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	var ids []string
	for range detailChunk + 3 { // more than one transaction
		ids = append(ids, finishedJob(t, s, time.Now()).ID)
	}
	ids = append(ids[:5], append([]string{"999999"}, ids[5:]...)...)
	ds, err := s.JobDetails(ctx, ids)
	if err != nil {
		t.Fatal(err)
	}
	if len(ds) != detailChunk+3 {
		t.Fatalf("read %d jobs; want %d (all but the missing one)", len(ds), detailChunk+3)
	}
	for _, d := range ds {
		want, err := s.Job(ctx, d.Job.ID)
		if err != nil {
			t.Fatal(err)
		}
		if d.Job.ModRevision != want.ModRevision || d.Job.Status.Phase != api.JobSucceeded {
			t.Errorf("job %s read at %d (%s); the store has %d", d.Job.ID, d.Job.ModRevision, d.Job.Status.Phase, want.ModRevision)
		}
		if len(d.Ranks) != 1 || len(d.Checkpoints) != 1 || d.Checkpoints[0].Step != 10 || d.Progress == nil || d.Progress.Latest.Step != 10 {
			t.Errorf("job %s read with ranks %+v, checkpoints %+v, progress %+v; want one of each at step 10", d.Job.ID, d.Ranks, d.Checkpoints, d.Progress)
		}
	}
}

func TestIssuedKnowsWhichIDsTheSequenceGaveOut(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	if s.Issued(ctx, "1") {
		t.Error("Issued(1) before any job; want false")
	}
	j, err := s.CreateJob(ctx, spec(1), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	for id, want := range map[string]bool{j.ID: true, "0": false, "-3": false, "abc": false, "1000000": false} {
		if got := s.Issued(ctx, id); got != want {
			t.Errorf("Issued(%q) = %v; want %v", id, got, want)
		}
	}
}
