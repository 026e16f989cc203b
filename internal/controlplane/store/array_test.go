package store

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/gangway/gangway/internal/api"
	clientv3 "go.etcd.io/etcd/client/v3"
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
	jobs, err := s.CreateJobs(ctx, spec(1), a, time.Now(), nil)
	if err != nil {
		t.Fatal(err)
	}
	// 300 do not fit the 127 left of the block: a block of their own.
	first, _ := strconv.Atoi(jobs[0].ID)
	for i, j := range jobs {
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

	// A second array whose later transaction collides with an existing key
	// leaves none of its tasks behind.
	base, _ := strconv.Atoi(next.ID)
	blockEnd := base - 1 + idBlock // the rest of next's block cannot hold 300 either
	collide := strconv.Itoa(blockEnd + 1 + batchOps + 5)
	if _, err := s.c.Put(ctx, jobKey(collide), "{}"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateJobs(ctx, spec(1), a, time.Now(), nil); !errors.Is(err, ErrConflict) || errors.Is(err, ErrUnfinished) {
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
	if k := arrayKeys(t, s); k != 0 {
		t.Errorf("%d array keys left behind", k)
	}
}

// arrayKeys counts the keys of arrays committed and not all written.
func arrayKeys(t *testing.T, s *Store) int64 {
	t.Helper()
	resp, err := s.c.Get(context.Background(), arraysPrefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	return resp.Count
}

// tasksOf reads the stored tasks of the array whose first ID is first,
// failing the test if one was written more than once.
func tasksOf(t *testing.T, s *Store, array string) map[int]*api.Job {
	t.Helper()
	resp, err := s.c.Get(context.Background(), jobsPrefix, clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	out := map[int]*api.Job{}
	for _, kv := range resp.Kvs {
		var j api.Job
		if err := json.Unmarshal(kv.Value, &j); err != nil {
			t.Fatal(err)
		}
		if j.Array == nil || j.Array.ID != array {
			continue
		}
		if kv.Version != 1 {
			t.Errorf("task %s written %d times", j.ID, kv.Version)
		}
		out[j.Array.Index] = &j
	}
	return out
}

// TestArrayInterruptedBetweenChunksIsFinished: a write of an array's tasks
// that stops part-way (a crash after the commit) leaves the array to
// FinishArrays, which writes exactly the tasks missing, once each, even
// with two finishers at once; a task deleted meanwhile (retention) is not
// written again; and nothing of the array's bookkeeping is left after.
func TestArrayInterruptedBetweenChunksIsFinished(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	a, err := api.ParseArray("0-999")
	if err != nil {
		t.Fatal(err)
	}
	crash := errors.New("crash")
	s.failArrayChunk = func(written int) error {
		if written >= 2*(batchOps-2) {
			return crash
		}
		return nil
	}
	jobs, err := s.CreateJobs(ctx, spec(1), a, time.Now(), nil)
	if !errors.Is(err, ErrUnfinished) || !errors.Is(err, crash) || len(jobs) != 1000 {
		t.Fatalf("interrupted array: %d jobs, %v; want 1000 and ErrUnfinished", len(jobs), err)
	}
	s.failArrayChunk = nil
	array := jobs[0].ID
	got := tasksOf(t, s, array)
	if len(got) != 2*(batchOps-2) || arrayKeys(t, s) != 2 {
		t.Fatalf("after the crash: %d tasks, %d array keys; want %d and the intent with its count", len(got), arrayKeys(t, s), 2*(batchOps-2))
	}
	// Retention deletes a finished task meanwhile.
	if _, err := s.c.Delete(ctx, jobKey(got[7].ID)); err != nil {
		t.Fatal(err)
	}
	// Too young for the sweep: left to its submitter.
	if n, err := s.FinishArrays(ctx, time.Now().Add(-time.Minute)); n != 0 || err != nil {
		t.Fatalf("FinishArrays of a young array = %d, %v; want 0", n, err)
	}
	// Two finishers at once: the sweep and a retry of the submission.
	errc := make(chan error, 2)
	go func() { _, err := s.FinishArrays(ctx, time.Now()); errc <- err }()
	go func() { errc <- s.FinishArray(ctx, array) }()
	for range 2 {
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	}
	got = tasksOf(t, s, array)
	if len(got) != 999 || got[7] != nil {
		t.Fatalf("finished: %d tasks, task 7 %v; want 999, the deleted one not written again", len(got), got[7])
	}
	for i := range 1000 {
		if i == 7 {
			continue
		}
		j := got[i]
		if j == nil || j.ID != strconv.Itoa(mustAtoi(t, array)+i) || j.Array.Count != 1000 || j.Status.Phase != api.JobPending {
			t.Fatalf("task %d = %+v", i, j)
		}
	}
	if k := arrayKeys(t, s); k != 0 {
		t.Errorf("%d array keys left after finishing", k)
	}
	if n, err := s.FinishArrays(ctx, time.Now()); n != 0 || err != nil {
		t.Errorf("FinishArrays with nothing left = %d, %v", n, err)
	}
}

func mustAtoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestArrayRefusedBeforeItsCommitLeavesNothing: an array whose
// idempotency key is taken is refused by its commit, and none of it, nor
// of its bookkeeping, is stored.
func TestArrayRefusedBeforeItsCommitLeavesNothing(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	now := time.Now()
	c, err := s.ClaimKey(ctx, "user:alice", "k1", "h1", 201, now)
	if err != nil {
		t.Fatal(err)
	}
	one, err := s.NewJob(ctx, spec(1), now)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.CreateJobAs(ctx, one, c); err != nil {
		t.Fatal(err)
	}
	a, _ := api.ParseArray("0-499")
	if _, err := s.CreateJobs(ctx, spec(1), a, now, c); !errors.Is(err, ErrKeyTaken) {
		t.Fatalf("array with a taken key: %v; want ErrKeyTaken", err)
	}
	all, _, err := s.Jobs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 1 || arrayKeys(t, s) != 0 {
		t.Errorf("after the refused array: %d jobs, %d array keys; want the one job and none", len(all), arrayKeys(t, s))
	}
}
