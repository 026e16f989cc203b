package store

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/gangway/gangway/internal/api"
)

func TestCommitBatchesAndIsolatesConflicts(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	var jobs []*api.Job
	for range 3 {
		j, err := s.CreateJob(ctx, spec(1), time.Now())
		if err != nil {
			t.Fatal(err)
		}
		jobs = append(jobs, j)
	}
	start := func(j *api.Job) JobWrite {
		m := j.Clone()
		m.Status.Phase = api.JobRunning
		m.Status.Attempts = []api.Attempt{{Number: 1, Phase: api.AttemptRunning}}
		return s.StartAttemptWrite(m, []api.Assignment{{JobID: j.ID, Attempt: 1, Rank: 0, Node: "n1", Command: []string{"true"}}})
	}
	// All current: one transaction, one revision for all three.
	ws := []JobWrite{start(jobs[0]), start(jobs[1]), start(jobs[2])}
	revs, errs := s.Commit(ctx, ws)
	for i := range ws {
		if errs[i] != nil || revs[i] != revs[0] || ws[i].Job().ModRevision != revs[0] {
			t.Fatalf("write %d: rev %d err %v (job at %d); want all at %d", i, revs[i], errs[i], ws[i].Job().ModRevision, revs[0])
		}
	}
	if l, err := s.Assignments(ctx, "n1"); err != nil || len(l.Assignments) != 3 {
		t.Fatalf("assignments = %+v, %v", l, err)
	}
	// One stale write (its job changed since read) fails alone; the others
	// land.
	fresh := func(j *api.Job) *api.Job {
		c, err := s.Job(ctx, j.ID)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	a, b, c := fresh(jobs[0]), fresh(jobs[1]), fresh(jobs[2])
	stale := b.Clone()
	if err := s.UpdateJob(ctx, b); err != nil { // someone else writes job b
		t.Fatal(err)
	}
	for _, j := range []*api.Job{a, stale, c} {
		j.Status.Reason = "batched"
	}
	revs, errs = s.Commit(ctx, []JobWrite{s.UpdateJobWrite(a), s.UpdateJobWrite(stale), s.StopAttemptWrite(c, 1, []string{"n1"})})
	if errs[0] != nil || !errors.Is(errs[1], ErrConflict) || errs[2] != nil {
		t.Fatalf("errs = %v; want only the stale write to conflict", errs)
	}
	if got := fresh(jobs[1]); got.Status.Reason == "batched" {
		t.Fatal("the stale write landed")
	}
	if got := fresh(jobs[0]); got.Status.Reason != "batched" || got.ModRevision != revs[0] {
		t.Fatalf("job a = %q at %d; want batched at %d", got.Status.Reason, got.ModRevision, revs[0])
	}
	if l, _ := s.Assignments(ctx, "n1"); len(l.Assignments) != 2 {
		t.Fatalf("after stopping job c: %d assignments; want 2", len(l.Assignments))
	}
	// More writes than one transaction holds are split; the same job twice
	// goes in two transactions rather than a duplicate key.
	var many []JobWrite
	for range 200 {
		j, err := s.CreateJob(ctx, spec(1), time.Now())
		if err != nil {
			t.Fatal(err)
		}
		many = append(many, s.UpdateJobWrite(j))
	}
	revs, errs = s.Commit(ctx, many)
	distinct := map[int64]bool{}
	for i := range many {
		if errs[i] != nil {
			t.Fatalf("write %d: %v", i, errs[i])
		}
		distinct[revs[i]] = true
	}
	if len(distinct) < 2 || len(distinct) > 3 {
		t.Fatalf("200 writes in %d transactions; want 2 (128 a piece)", len(distinct))
	}
	j := fresh(jobs[0])
	twice := []JobWrite{s.UpdateJobWrite(j), s.UpdateJobWrite(j.Clone())}
	if _, errs = s.Commit(ctx, twice); errs[0] != nil || !errors.Is(errs[1], ErrConflict) {
		t.Fatalf("same job twice: %v; want the second to conflict with the first", errs)
	}
}
