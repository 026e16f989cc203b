package store

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/gangway/gangway/internal/api"
	"github.com/gangway/gangway/internal/base/testenv"
	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, testenv.EtcdLeaks()...)
}

// newStore starts an embedded etcd for one test.
func newStore(t *testing.T) *Store {
	t.Helper()
	ctx := context.Background()
	e, err := StartEmbedded(ctx, EmbeddedConfig{Dir: t.TempDir()})
	if err != nil {
		t.Fatalf("StartEmbedded: %v", err)
	}
	cli := e.Client()
	t.Cleanup(func() {
		cli.Close()
		e.Close()
	})
	return New(cli)
}

func spec(ranks int) api.JobSpec {
	s := api.JobSpec{Ranks: ranks, Command: []string{"true"}}
	s.Default()
	return s
}

func TestJobsCRUD(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	var ids []string
	for i := 0; i < 11; i++ {
		j, err := s.CreateJob(ctx, spec(i+1), now)
		if err != nil {
			t.Fatalf("CreateJob: %v", err)
		}
		ids = append(ids, j.ID)
	}
	if ids[0] != "1" || ids[10] != "11" {
		t.Fatalf("ids = %v, want 1..11", ids)
	}
	jobs, _, err := s.Jobs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, j := range jobs {
		got = append(got, j.ID)
	}
	if diff := cmp.Diff(ids, got); diff != "" {
		t.Errorf("Jobs order (-want +got):\n%s", diff)
	}

	j, err := s.Job(ctx, "3")
	if err != nil || j.Spec.Ranks != 3 || j.Status.Phase != api.JobPending || !j.SubmittedAt.Equal(now) {
		t.Fatalf("Job(3) = %+v, %v", j, err)
	}
	stale := j.Clone()
	j.Status.Reason = "first"
	if err := s.UpdateJob(ctx, j); err != nil {
		t.Fatalf("UpdateJob: %v", err)
	}
	stale.Status.Reason = "second"
	if err := s.UpdateJob(ctx, stale); !errors.Is(err, ErrConflict) {
		t.Fatalf("stale UpdateJob = %v, want ErrConflict", err)
	}
	if _, err := s.Job(ctx, "99"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Job(99) = %v, want ErrNotFound", err)
	}
	m, err := s.ModifyJob(ctx, "3", func(j *api.Job) error { j.Status.Reason += "+more"; return nil })
	if err != nil || m.Status.Reason != "first+more" {
		t.Fatalf("ModifyJob = %+v, %v", m, err)
	}
}

func TestAttemptTransactions(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	j, err := s.CreateJob(ctx, spec(2), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	j.Status.Attempts = []api.Attempt{{Number: 1, Placement: []api.RankPlacement{{Rank: 0, Node: "a"}, {Rank: 1, Node: "b"}}}}
	asg := []api.Assignment{
		{JobID: j.ID, Attempt: 1, Rank: 0, Node: "a", Command: []string{"x"}},
		{JobID: j.ID, Attempt: 1, Rank: 1, Node: "b", Command: []string{"x"}},
	}
	if _, err := s.StartAttempt(ctx, j, asg); err != nil {
		t.Fatalf("StartAttempt: %v", err)
	}
	la, err := s.Assignments(ctx, "a")
	if err != nil || len(la.Assignments) != 1 || la.Assignments[0].Rank != 0 {
		t.Fatalf("Assignments(a) = %+v, %v", la, err)
	}
	// A stale job copy must not place anything.
	stale := j.Clone()
	stale.ModRevision--
	if _, err := s.StartAttempt(ctx, stale, []api.Assignment{{JobID: j.ID, Attempt: 2, Rank: 0, Node: "c"}}); !errors.Is(err, ErrConflict) {
		t.Fatalf("stale StartAttempt = %v, want ErrConflict", err)
	}
	if lc, _ := s.Assignments(ctx, "c"); len(lc.Assignments) != 0 {
		t.Fatalf("stale plan wrote assignments: %+v", lc)
	}
	rev, err := s.StopAttempt(ctx, j, 1, []string{"a", "b"})
	if err != nil {
		t.Fatalf("StopAttempt: %v", err)
	}
	for _, n := range []string{"a", "b"} {
		l, err := s.Assignments(ctx, n)
		if err != nil || len(l.Assignments) != 0 || l.Revision < rev {
			t.Fatalf("after stop, Assignments(%s) = %+v, %v", n, l, err)
		}
	}
}

func TestCheckpointsAndProgress(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	for _, step := range []int64{20, 100, 40} {
		if err := s.PutCheckpoint(ctx, "7", api.Checkpoint{Step: step, Path: "/c"}); err != nil {
			t.Fatal(err)
		}
	}
	// "77" shares a prefix with "7": it must not leak into 7's list.
	if err := s.PutCheckpoint(ctx, "77", api.Checkpoint{Step: 999}); err != nil {
		t.Fatal(err)
	}
	cs, err := s.Checkpoints(ctx, "7")
	if err != nil {
		t.Fatal(err)
	}
	var steps []int64
	for _, c := range cs {
		steps = append(steps, c.Step)
	}
	if diff := cmp.Diff([]int64{20, 40, 100}, steps); diff != "" {
		t.Errorf("checkpoint steps (-want +got):\n%s", diff)
	}
	if c, err := s.LatestCheckpoint(ctx, "7"); err != nil || c.Step != 100 {
		t.Fatalf("LatestCheckpoint = %+v, %v", c, err)
	}
	if c, err := s.LatestCheckpoint(ctx, "8"); err != nil || c != nil {
		t.Fatalf("LatestCheckpoint(no checkpoints) = %+v, %v", c, err)
	}
	const total = api.MaxRecentProgress + 14 // a multiple of the batch of 5
	for i := 0; i < total; i += 5 {
		var lines []api.Progress
		for k := i; k < i+5; k++ {
			lines = append(lines, api.Progress{Step: int64(k)})
		}
		if err := s.AppendProgress(ctx, "7", lines); err != nil {
			t.Fatal(err)
		}
	}
	pl, err := s.Progress(ctx, "7")
	if err != nil {
		t.Fatal(err)
	}
	if len(pl.Recent) != api.MaxRecentProgress || pl.Latest.Step != total-1 || pl.Recent[0].Step != total-api.MaxRecentProgress {
		t.Fatalf("progress: %d recent, latest %d, first %d", len(pl.Recent), pl.Latest.Step, pl.Recent[0].Step)
	}
}

func TestWaitChangeAndCache(t *testing.T) {
	s := newStore(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rev, err := s.Revision(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Nothing changes: WaitChange returns the index it was given.
	if got, err := s.WaitChange(ctx, JobsPrefix, rev, 50*time.Millisecond); err != nil || got != rev {
		t.Fatalf("idle WaitChange = %d, %v; want %d", got, err, rev)
	}
	c := NewCache(s, nil)
	done := make(chan struct{})
	go func() { defer close(done); _ = c.Run(ctx) }()

	changed := make(chan int64, 1)
	go func() {
		r, _ := s.WaitChange(ctx, JobsPrefix, rev, 10*time.Second)
		changed <- r
	}()
	j, err := s.CreateJob(ctx, spec(1), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if r := <-changed; r != j.ModRevision {
		t.Fatalf("WaitChange returned %d, want the job's revision %d", r, j.ModRevision)
	}
	n := &api.Node{Name: "n1", Address: "10.0.0.1", Status: api.NodeStatus{State: api.NodeReady}}
	if err := s.PutNode(ctx, n); err != nil {
		t.Fatal(err)
	}
	if err := s.PutRankStatuses(ctx, []api.RankStatus{{JobID: j.ID, Attempt: 1, Rank: 0, State: api.RankRunning}}); err != nil {
		t.Fatal(err)
	}
	if err := s.PutCheckpoint(ctx, j.ID, api.Checkpoint{Step: 5}); err != nil {
		t.Fatal(err)
	}
	wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
	defer wcancel()
	if err := c.WaitRevision(wctx, n.ModRevision); err != nil {
		t.Fatalf("WaitRevision: %v", err)
	}
	// Rank and checkpoint writes come after the node; wait for them too.
	for v := c.Snapshot(); v.Ckpts[j.ID] == nil; v = c.Snapshot() {
		if wctx.Err() != nil {
			t.Fatal("cache never saw the checkpoint")
		}
		time.Sleep(10 * time.Millisecond)
	}
	v := c.Snapshot()
	if v.Jobs[j.ID] == nil || v.Jobs[j.ID].ModRevision != j.ModRevision {
		t.Errorf("cache job = %+v", v.Jobs[j.ID])
	}
	if v.Nodes["n1"] == nil || v.Nodes["n1"].Address != "10.0.0.1" {
		t.Errorf("cache node = %+v", v.Nodes["n1"])
	}
	if r := v.Ranks[api.TaskKey(j.ID, 1, 0)]; r == nil || r.State != api.RankRunning {
		t.Errorf("cache rank = %+v", r)
	}
	cancel()
	<-done
}

func TestCacheKeepsOnlyLiveJobsAndServesAssignments(t *testing.T) {
	s := newStore(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := NewCache(s, nil)
	done := make(chan struct{})
	go func() { defer close(done); _ = c.Run(ctx) }()
	defer func() { cancel(); <-done }()
	wctx, wcancel := context.WithTimeout(ctx, 20*time.Second)
	defer wcancel()

	// The first poll (no index) answers at once with an empty list.
	body, rev0, err := c.Assignments(wctx, "n1", 0, time.Minute, false)
	if err != nil {
		t.Fatal(err)
	}
	var l api.AssignmentList
	if err := json.Unmarshal(body, &l); err != nil || len(l.Assignments) != 0 || l.Revision != rev0 || rev0 == 0 {
		t.Fatalf("first list = %s (rev %d), %v", body, rev0, err)
	}
	// A long poll wakes when its node's list changes, and only then.
	type answer struct {
		l   api.AssignmentList
		rev int64
	}
	got := make(chan answer, 1)
	go func() {
		b, rev, err := c.Assignments(wctx, "n1", rev0, 10*time.Second, false)
		var l api.AssignmentList
		if err == nil {
			err = json.Unmarshal(b, &l)
		}
		if err != nil {
			t.Error(err)
		}
		got <- answer{l, rev}
	}()
	j, err := s.CreateJob(ctx, spec(1), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	other := j.Clone()
	other.Status.Phase = api.JobRunning
	other.Status.Attempts = []api.Attempt{{Number: 1, Phase: api.AttemptRunning}}
	if _, err := s.StartAttempt(ctx, other, []api.Assignment{{JobID: j.ID, Attempt: 1, Rank: 0, Node: "n2", Command: []string{"x"}}}); err != nil {
		t.Fatal(err)
	}
	select {
	case a := <-got:
		t.Fatalf("n1's poll woke for n2's assignment: %+v", a)
	case <-time.After(200 * time.Millisecond):
	}
	cur, err := s.Job(ctx, j.ID)
	if err != nil {
		t.Fatal(err)
	}
	asg := api.Assignment{JobID: j.ID, Attempt: 1, Rank: 1, Node: "n1", Command: []string{"true"}}
	start, err := s.StartAttempt(ctx, cur, []api.Assignment{asg})
	if err != nil {
		t.Fatal(err)
	}
	a := <-got
	if len(a.l.Assignments) != 1 || a.l.Assignments[0].TaskKey() != asg.TaskKey() || a.rev < start || a.l.Revision != a.rev {
		t.Fatalf("woken poll = %+v at %d; want %s at ≥ %d", a.l, a.rev, asg.TaskKey(), start)
	}

	// Ranks and checkpoints of a live job are in the view; once the job
	// finishes they leave with it, and late reports stay out.
	if err := s.PutRankStatuses(ctx, []api.RankStatus{{JobID: j.ID, Attempt: 1, Rank: 1, State: api.RankRunning}}); err != nil {
		t.Fatal(err)
	}
	if err := s.PutCheckpoint(ctx, j.ID, api.Checkpoint{Step: 5}); err != nil {
		t.Fatal(err)
	}
	rev, _ := s.Revision(ctx)
	if err := c.WaitRevision(wctx, rev); err != nil {
		t.Fatal(err)
	}
	v := c.Snapshot()
	if v.Jobs[j.ID] == nil || v.Ranks[api.TaskKey(j.ID, 1, 1)] == nil || v.Ckpts[j.ID] == nil {
		t.Fatalf("live job's view: job %v rank %v ckpt %v", v.Jobs[j.ID] != nil, v.Ranks[api.TaskKey(j.ID, 1, 1)], v.Ckpts[j.ID])
	}
	// Stopping the attempt deletes its assignments; the view gives that
	// transaction's revision as the attempt's stop revision.
	cur, err = s.Job(ctx, j.ID)
	if err != nil {
		t.Fatal(err)
	}
	cur.Status.Phase = api.JobStopping
	stopRev, err := s.StopAttempt(ctx, cur, 1, []string{"n1", "n2"})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.WaitRevision(wctx, stopRev); err != nil {
		t.Fatal(err)
	}
	if v := c.Snapshot(); v.Stops[j.ID][1] != stopRev || v.Stops[j.ID][2] != 0 {
		t.Fatalf("stop revisions = %v; want attempt 1 at %d", v.Stops[j.ID], stopRev)
	}
	cur.Status.Phase = api.JobSucceeded
	if err := s.UpdateJob(ctx, cur); err != nil {
		t.Fatal(err)
	}
	if err := s.PutRankStatuses(ctx, []api.RankStatus{{JobID: j.ID, Attempt: 1, Rank: 1, State: api.RankExited}}); err != nil {
		t.Fatal(err)
	}
	rev, _ = s.Revision(ctx)
	if err := c.WaitRevision(wctx, rev); err != nil {
		t.Fatal(err)
	}
	v = c.Snapshot()
	if v.Jobs[j.ID] != nil || len(v.Ranks) != 0 || len(v.Ckpts) != 0 {
		t.Fatalf("finished job still in the view: job %v, %d ranks, %d checkpoints", v.Jobs[j.ID] != nil, len(v.Ranks), len(v.Ckpts))
	}
	// The store still has it for the API.
	if fin, err := s.Job(ctx, j.ID); err != nil || fin.Status.Phase != api.JobSucceeded {
		t.Fatalf("store job = %+v, %v", fin, err)
	}
}
