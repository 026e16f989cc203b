package store

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/gangway/gangway/internal/api"
)

func TestCreateJobsStoresAnArrayWholeOrNotAtAll(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	one, err := s.CreateJob(ctx, spec(1), time.Now()) // id 1, block 1..128
	if err != nil || one.ID != "1" {
		t.Fatalf("first job %v, %v", one, err)
	}
	a, err := api.ParseArray("0-299%5")
	if err != nil {
		t.Fatal(err)
	}
	jobs, err := s.CreateJobs(ctx, spec(1), a, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	// 300 do not fit the 127 left of the block: a block of their own.
	first, _ := strconv.Atoi(jobs[0].ID)
	for i, j := range jobs {
		if j.ModRevision != jobs[0].ModRevision {
			t.Fatalf("task %d written at revision %d, task 0 at %d; want one transaction", i, j.ModRevision, jobs[0].ModRevision)
		}
		if j.ID != strconv.Itoa(first+i) || j.Array == nil || j.Array.ID != jobs[0].ID || j.Array.Index != i || j.Array.Count != 300 || j.Array.Limit != 5 {
			t.Fatalf("task %d = id %s array %+v", i, j.ID, j.Array)
		}
		if i%100 == 0 {
			got, err := s.Job(ctx, j.ID)
			if err != nil || got.Array == nil || got.Array.Index != i || got.Status.Phase != api.JobPending {
				t.Fatalf("stored task %d = %+v, %v", i, got, err)
			}
		}
	}
	next, err := s.CreateJob(ctx, spec(1), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := strconv.Atoi(next.ID); n <= first+299 {
		t.Fatalf("job after the array got id %s, inside the array's %d..%d", next.ID, first, first+299)
	}

	// A second array, written batchOps to a transaction (as for an etcd
	// that does not take it in one), whose later transaction collides with
	// an existing key leaves none of its tasks behind.
	s.arrayTxnOps = batchOps
	base, _ := strconv.Atoi(next.ID)
	blockEnd := base - 1 + idBlock // the rest of next's block cannot hold 300 either
	collide := strconv.Itoa(blockEnd + 1 + batchOps + 5)
	if _, err := s.c.Put(ctx, jobKey(collide), "{}"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateJobs(ctx, spec(1), a, time.Now()); !errors.Is(err, ErrConflict) {
		t.Fatalf("colliding array: %v; want ErrConflict", err)
	}
	all, _, err := s.Jobs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range all {
		if n, _ := strconv.Atoi(j.ID); n > blockEnd && j.ID != collide {
			t.Errorf("job %s of the failed array was left behind", j.ID)
		}
	}
}
