package server

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/gangway/gangway/internal/api"
	"github.com/gangway/gangway/internal/controlplane/store"
)

// raceStore is a store whose controller finishes each job the moment its
// cancel is committed, and whose first commit loses every other write to a
// concurrent update: the race CI hit when cancelling an array.
type raceStore struct {
	jobs    map[string]*api.Job
	commits int
	always  bool // every commit conflicts
}

func (f *raceStore) Job(_ context.Context, id string) (*api.Job, error) {
	j, ok := f.jobs[id]
	if !ok {
		return nil, fmt.Errorf("job %s: %w", id, store.ErrNotFound)
	}
	c := *j
	return &c, nil
}

func (f *raceStore) UpdateJobWrite(j *api.Job) store.JobWrite {
	return new(store.Store).UpdateJobWrite(j) // builds the write only
}

func (f *raceStore) Commit(_ context.Context, ws []store.JobWrite) ([]int64, []error) {
	f.commits++
	errs := make([]error, len(ws))
	for i, w := range ws {
		if f.always || (f.commits == 1 && i%2 == 1) {
			errs[i] = store.ErrConflict
			continue
		}
		j := *w.Job()
		j.Status.Phase = api.JobCancelled // the controller was quick
		f.jobs[j.ID] = &j
	}
	return make([]int64, len(ws)), errs
}

func TestCancelJobsCountsWhatItCancelledAcrossRetries(t *testing.T) {
	f := &raceStore{jobs: map[string]*api.Job{}}
	var ids []string
	for i := range 10 {
		id := fmt.Sprint(i + 1)
		ids = append(ids, id)
		if i == 7 {
			continue // deleted by retention
		}
		j := &api.Job{ID: id}
		j.Status.Phase = api.JobRunning
		if i == 8 {
			j.Status.Phase = api.JobSucceeded
		}
		if i == 9 {
			j.Status.CancelRequested = true
		}
		f.jobs[id] = j
	}
	cancelled, done, err := cancelJobs(context.Background(), f, ids)
	if err != nil || cancelled != 8 || done != 1 {
		t.Fatalf("cancelJobs = %d cancelled, %d done, %v; want 8 (7 asked + 1 already asked), 1 done", cancelled, done, err)
	}
	if f.commits != 2 {
		t.Errorf("%d commits; want 2 (the conflicts retried once)", f.commits)
	}
	for _, id := range ids[:7] {
		if !f.jobs[id].Status.CancelRequested {
			t.Errorf("job %s not asked to cancel", id)
		}
	}
}

func TestCancelJobsGivesUpOnEndlessConflicts(t *testing.T) {
	f := &raceStore{jobs: map[string]*api.Job{"1": {ID: "1"}}, always: true}
	_, _, err := cancelJobs(context.Background(), f, []string{"1"})
	if !errors.Is(err, store.ErrConflict) || f.commits != 5 {
		t.Fatalf("err = %v after %d commits; want a conflict after 5", err, f.commits)
	}
}
