package controller

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/gangway/gangway/internal/api"
	"github.com/gangway/gangway/internal/controlplane/store"
)

// testControl is a store with one 8-GPU node and a controller over it.
type testControl struct {
	st    *store.Store
	cache *store.Cache
	ctl   *Controller
}

func newTestControl(t testing.TB) *testControl {
	t.Helper()
	return newTestControlWith(t, nil)
}

// newTestControlWith lets a test adjust the controller's configuration.
func newTestControlWith(t testing.TB, adjust func(*Config)) *testControl {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	e, err := store.StartEmbedded(ctx, store.EmbeddedConfig{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	cli := e.Client()
	st := store.New(cli)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	cache := store.NewCache(st, log)
	done := make(chan struct{})
	go func() { defer close(done); _ = cache.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
		cli.Close()
		e.Close()
	})
	n := &api.Node{Name: "n1", Address: "127.0.0.1", Status: api.NodeStatus{State: api.NodeReady, LastHeartbeat: time.Now()}}
	for i := range 8 {
		n.GPUs = append(n.GPUs, api.GPU{Index: i, Model: "H100-SXM-80GB"})
	}
	if err := st.PutNode(ctx, n); err != nil {
		t.Fatal(err)
	}
	live := NewLiveness(time.Now())
	live.Beat("n1", 0, time.Now())
	cfg := Config{NodeTimeout: time.Hour, CheckpointRoot: t.TempDir()}
	if adjust != nil {
		adjust(&cfg)
	}
	ctl := New(st, cache, live, cfg, log)
	// A loaded CI machine can stretch a pass past slowPass; these tests
	// are about the hand-off, so only the one about slow passes sets it.
	ctl.subs.slow = time.Hour
	return &testControl{st: st, cache: cache, ctl: ctl}
}

func (tc *testControl) run(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = tc.ctl.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
}

func (tc *testControl) newJob(t *testing.T, gpus int) *api.Job {
	t.Helper()
	spec := api.JobSpec{Queue: "default", Ranks: 1, GPUsPerRank: gpus, Command: []string{"true"}}
	j, err := tc.st.NewJob(context.Background(), spec, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return j
}

// submit hands j to the running controller and returns what Submit
// answered and what the store holds.
func (tc *testControl) submit(t *testing.T, j *api.Job) (got, stored *api.Job) {
	t.Helper()
	ctx := context.Background()
	js, err := tc.ctl.Submit(ctx, []*api.Job{j}, nil, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	stored, err = tc.st.Job(ctx, j.ID)
	if err != nil {
		t.Fatal(err)
	}
	return js[0], stored
}

// submitRunning submits a one-GPU job and waits until the store has it
// Running: placed at once, or (before the node's first pass) by a later
// pass.
func (tc *testControl) submitRunning(t *testing.T) *api.Job {
	t.Helper()
	_, j := tc.submit(t, tc.newJob(t, 1))
	for deadline := time.Now().Add(10 * time.Second); j.Status.Phase != api.JobRunning; {
		if time.Now().After(deadline) {
			t.Fatalf("job %s is %s; want Running", j.ID, j.Status.Phase)
		}
		time.Sleep(20 * time.Millisecond)
		var err error
		if j, err = tc.st.Job(context.Background(), j.ID); err != nil {
			t.Fatal(err)
		}
	}
	return j
}

func TestSubmitStoresAPlacedJobInOneWrite(t *testing.T) {
	tc := newTestControl(t)
	tc.run(t)
	ctx := context.Background()
	// Let the first passes settle (node readiness) before counting writes.
	time.Sleep(200 * time.Millisecond)
	j := tc.newJob(t, 2)
	before, err := tc.st.Revision(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got, stored := tc.submit(t, j)
	if stored.Status.Phase != api.JobRunning || len(stored.Status.Attempts) != 1 {
		t.Fatalf("stored job is %s with %d attempts; want Running with 1", stored.Status.Phase, len(stored.Status.Attempts))
	}
	if got.ModRevision != stored.ModRevision || got.Status.Phase != api.JobRunning {
		t.Errorf("Submit returned the job at revision %d (%s); the store has %d", got.ModRevision, got.Status.Phase, stored.ModRevision)
	}
	asg, err := tc.st.Assignments(ctx, "n1")
	if err != nil {
		t.Fatal(err)
	}
	if len(asg.Assignments) != 1 || asg.Assignments[0].JobID != j.ID || len(asg.Assignments[0].GPUs) != 2 {
		t.Fatalf("assignments on n1: %+v; want one of job %s with 2 GPUs", asg.Assignments, j.ID)
	}
	// The create and the placement were one transaction: the job's
	// revision is the assignment's, and nothing else of it was written.
	if stored.ModRevision != before+1 {
		t.Errorf("job stored at revision %d, %d after the store's %d; want the first write after", stored.ModRevision, stored.ModRevision-before, before)
	}
}

func TestSubmitStoresAJobThatMustWaitPending(t *testing.T) {
	tc := newTestControl(t)
	tc.run(t)
	tc.submit(t, tc.newJob(t, 8))
	got, stored := tc.submit(t, tc.newJob(t, 4))
	if stored.Status.Phase != api.JobPending || len(stored.Status.Attempts) != 0 {
		t.Fatalf("job behind a full node is %s with %d attempts; want Pending", stored.Status.Phase, len(stored.Status.Attempts))
	}
	if got.Status.Phase != api.JobPending || got.ModRevision != stored.ModRevision {
		t.Errorf("Submit returned %s at %d; stored %s at %d", got.Status.Phase, got.ModRevision, stored.Status.Phase, stored.ModRevision)
	}
}

func TestSubmitWithNoControllerRunningStoresNothing(t *testing.T) {
	tc := newTestControl(t) // not running
	ctx := context.Background()
	j := tc.newJob(t, 1)
	_, err := tc.ctl.Submit(ctx, []*api.Job{j}, nil, 20*time.Millisecond)
	if !errors.Is(err, ErrNotTaken) {
		t.Fatalf("Submit with no pass running: %v; want ErrNotTaken", err)
	}
	// A pass that starts later must not store the withdrawn job: the
	// caller stores it itself.
	if _, err := tc.ctl.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := tc.st.Job(ctx, j.ID); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("withdrawn job read back: %v; want not found", err)
	}
	if err := tc.st.CreateJobAs(ctx, j, nil); err != nil {
		t.Fatal(err)
	}
	if err := tc.st.CreateJobAs(ctx, j.Clone(), nil); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("creating job %s twice: %v; want ErrConflict", j.ID, err)
	}
}

func TestSubmitSkipsSlowPasses(t *testing.T) {
	tc := newTestControl(t) // not running: only the last pass's length counts
	tc.ctl.subs.slow = slowPass
	tc.ctl.subs.passNanos.Store(int64(time.Second))
	_, err := tc.ctl.Submit(context.Background(), []*api.Job{tc.newJob(t, 1)}, nil, 20*time.Millisecond)
	if !errors.Is(err, ErrNotTaken) {
		t.Fatalf("Submit after a 1s pass: %v; want ErrNotTaken", err)
	}
	if n := len(tc.ctl.subs.q); n != 0 {
		t.Errorf("after a 1s pass Submit still offered its job to the next pass (%d batches queued)", n)
	}
}

func TestReportedLastExitEndsTheAttemptInTheSameWrite(t *testing.T) {
	tc := newTestControl(t)
	tc.run(t)
	ctx := context.Background()
	j := tc.submitRunning(t)
	// A status that decides nothing is stored on its own.
	running := api.RankStatus{JobID: j.ID, Attempt: 1, Rank: 0, Node: "n1", State: api.RankRunning, PID: 42, StartedAt: time.Now()}
	if err := tc.ctl.Report(ctx, []api.RankStatus{running}, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if rs, err := tc.st.RankStatuses(ctx, j.ID); err != nil || len(rs) != 1 || rs[0].State != api.RankRunning {
		t.Fatalf("rank statuses after the running report: %+v, %v", rs, err)
	}
	if still, _ := tc.st.Job(ctx, j.ID); still.Status.Phase != api.JobRunning {
		t.Fatalf("a running report moved the job to %s", still.Status.Phase)
	}
	before, err := tc.st.Revision(ctx)
	if err != nil {
		t.Fatal(err)
	}
	exited := running
	exited.State, exited.FinishedAt = api.RankExited, time.Now()
	if err := tc.ctl.Report(ctx, []api.RankStatus{exited}, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	done, err := tc.st.Job(ctx, j.ID)
	if err != nil {
		t.Fatal(err)
	}
	if done.Status.Phase != api.JobSucceeded {
		t.Fatalf("after its only rank exited 0 the job is %s (%s); want Succeeded", done.Status.Phase, done.Status.Reason)
	}
	rs, err := tc.st.RankStatuses(ctx, j.ID)
	if err != nil || len(rs) != 1 || rs[0].State != api.RankExited {
		t.Fatalf("rank statuses after the exit: %+v, %v; want the exit stored", rs, err)
	}
	// One transaction: the exit, the end and the assignment's removal.
	if done.ModRevision != before+1 {
		t.Errorf("job ended at revision %d, %d writes after %d; want the first", done.ModRevision, done.ModRevision-before, before)
	}
	if asg, _ := tc.st.Assignments(ctx, "n1"); len(asg.Assignments) != 0 {
		t.Errorf("assignments left on n1: %+v", asg.Assignments)
	}
}

func TestReportWithNoControllerRunningStoresNothing(t *testing.T) {
	tc := newTestControl(t) // not running
	st := api.RankStatus{JobID: "99", Attempt: 1, Rank: 0, Node: "n1", State: api.RankRunning}
	if err := tc.ctl.Report(context.Background(), []api.RankStatus{st}, 20*time.Millisecond); !errors.Is(err, ErrNotTaken) {
		t.Fatalf("Report with no pass running: %v; want ErrNotTaken", err)
	}
	if _, err := tc.ctl.Reconcile(context.Background()); err != nil {
		t.Fatal(err)
	}
	if rs, _ := tc.st.RankStatuses(context.Background(), "99"); len(rs) != 0 {
		t.Fatalf("a withdrawn report was stored: %+v", rs)
	}
}

// A pass runs again at once only after writes that open work for it: an
// ended attempt's GPUs for a waiting job; not a placement that took GPUs,
// a pending job's reason, or GPUs freed with no job waiting, after which
// it would only hold up the next submission.
func TestFollowUpPassOnlyAfterWritesThatOpenWork(t *testing.T) {
	tc := newTestControl(t)
	ctx := context.Background()
	pass := func(what string, wantFollow bool) {
		t.Helper()
		rev, follow, err := tc.ctl.reconcile(ctx)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if follow != wantFollow {
			t.Errorf("%s: follow-up %v, want %v", what, follow, wantFollow)
		}
		if rev > 0 {
			if err := tc.cache.WaitRevision(ctx, rev); err != nil {
				t.Fatal(err)
			}
		}
	}
	settle := func() {
		t.Helper()
		rev, err := tc.st.Revision(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := tc.cache.WaitRevision(ctx, rev); err != nil {
			t.Fatal(err)
		}
	}
	settle()
	small, err := tc.st.CreateJob(ctx, api.JobSpec{Queue: "default", Ranks: 1, GPUsPerRank: 2, Command: []string{"true"}}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	settle()
	pass("placing the only job", false)
	if _, err := tc.st.CreateJob(ctx, api.JobSpec{Queue: "default", Ranks: 1, GPUsPerRank: 8, Command: []string{"true"}}, time.Now()); err != nil {
		t.Fatal(err)
	}
	settle()
	pass("a job that must wait, given its reason", false)
	exited := api.RankStatus{JobID: small.ID, Attempt: 1, Rank: 0, Node: "n1", State: api.RankExited,
		StartedAt: time.Now(), FinishedAt: time.Now()}
	if err := tc.st.PutRankStatuses(ctx, []api.RankStatus{exited}); err != nil {
		t.Fatal(err)
	}
	settle()
	pass("ending the small job's attempt", true)
	pass("placing the big job on the freed GPUs", false)
	if j, err := tc.st.Job(ctx, small.ID); err != nil || j.Status.Phase != api.JobSucceeded {
		t.Fatalf("small job: %+v, %v; want Succeeded", j, err)
	}
	asg, _ := tc.st.Assignments(ctx, "n1")
	if len(asg.Assignments) != 1 || len(asg.Assignments[0].GPUs) != 8 {
		t.Fatalf("assignments on n1: %+v; want the big job's 8 GPUs", asg.Assignments)
	}
	big := asg.Assignments[0]
	exited.JobID, exited.Attempt = big.JobID, big.Attempt
	if err := tc.st.PutRankStatuses(ctx, []api.RankStatus{exited}); err != nil {
		t.Fatal(err)
	}
	settle()
	pass("ending the big job, nothing waiting", false)
	if j, err := tc.st.Job(ctx, big.JobID); err != nil || j.Status.Phase != api.JobSucceeded {
		t.Fatalf("big job: %+v, %v; want Succeeded", j, err)
	}
}

// Rank reports with no job waiting for GPUs wait for the next submission,
// and one pass stores both in one write; with jobs waiting, they do not
// wait.
func TestReportsWaitForTheNextSubmissionUnlessJobsWait(t *testing.T) {
	tc := newTestControl(t)
	// Long enough that only a submission can end it here.
	tc.ctl.reps.hold = time.Hour
	tc.run(t)
	ctx := context.Background()
	j := tc.submitRunning(t)
	exited := api.RankStatus{JobID: j.ID, Attempt: 1, Rank: 0, Node: "n1", State: api.RankExited, StartedAt: time.Now(), FinishedAt: time.Now()}
	// Not taken while no submission comes.
	if err := tc.ctl.Report(ctx, []api.RankStatus{exited}, 300*time.Millisecond); !errors.Is(err, ErrNotTaken) {
		t.Fatalf("a report with no submission after it: %v; want ErrNotTaken (held for the next submission)", err)
	}
	reported := make(chan error, 1)
	go func() { reported <- tc.ctl.Report(ctx, []api.RankStatus{exited}, time.Minute) }()
	for !tc.ctl.reps.waiting() {
		time.Sleep(time.Millisecond)
	}
	got, _ := tc.submit(t, tc.newJob(t, 1))
	if err := <-reported; err != nil {
		t.Fatal(err)
	}
	done, err := tc.st.Job(ctx, j.ID)
	if err != nil {
		t.Fatal(err)
	}
	if done.Status.Phase != api.JobSucceeded || got.Status.Phase != api.JobRunning {
		t.Fatalf("first job %s, second %s; want Succeeded and Running", done.Status.Phase, got.Status.Phase)
	}
	if done.ModRevision != got.ModRevision {
		t.Errorf("the exit was stored at revision %d and the submission at %d; want one write", done.ModRevision, got.ModRevision)
	}
	// With a job waiting for GPUs (8 of them, one is taken), an exit is
	// taken at once.
	waiting, _ := tc.submit(t, tc.newJob(t, 8))
	if waiting.Status.Phase != api.JobPending {
		t.Fatalf("third job is %s; want Pending behind the second", waiting.Status.Phase)
	}
	exited.JobID = got.ID
	if err := tc.ctl.Report(ctx, []api.RankStatus{exited}, 10*time.Second); err != nil {
		t.Fatalf("a report while a job waits for GPUs: %v; want it taken without waiting for a submission", err)
	}
}

// forEach handles every job exactly once, inline or in chunks.
func TestForEachHandlesEveryJobOnce(t *testing.T) {
	for _, n := range []int{0, 1, forEachChunk, forEachChunk + 1, 5*forEachChunk + 3} {
		p := &pass{sem: make(chan struct{}, 4)}
		jobs := make([]*api.Job, n)
		for i := range jobs {
			jobs[i] = &api.Job{ID: strconv.Itoa(i)}
		}
		var mu sync.Mutex
		seen := map[string]int{}
		p.forEach(jobs, func(j *api.Job) {
			mu.Lock()
			seen[j.ID]++
			mu.Unlock()
		})
		p.wg.Wait()
		if len(seen) != n {
			t.Errorf("%d jobs: %d handled", n, len(seen))
		}
		for id, c := range seen {
			if c != 1 {
				t.Errorf("%d jobs: job %s handled %d times", n, id, c)
			}
		}
	}
}

// TestSubmitTakesTheKeyWithThePlacedJob: a submission with an idempotency
// key stores the key in the placed job's own transaction; a second one
// with the same key, handed over at the same time (a client's retry while
// the first is still in flight), stores nothing and gets ErrKeyTaken.
func TestSubmitTakesTheKeyWithThePlacedJob(t *testing.T) {
	tc := newTestControl(t)
	tc.run(t)
	ctx := context.Background()
	time.Sleep(200 * time.Millisecond) // node readiness
	now := time.Now()
	claim := func() *store.Claim {
		c, err := tc.st.ClaimKey(ctx, "user:alice", "retry-me", "h", 201, now)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	jobs := []*api.Job{tc.newJob(t, 1), tc.newJob(t, 1)}
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for i, j := range jobs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = tc.ctl.Submit(ctx, []*api.Job{j}, claim(), 10*time.Second)
		}()
	}
	wg.Wait()
	won := 0
	if errs[1] == nil {
		won = 1
	}
	if errs[won] != nil || !errors.Is(errs[1-won], store.ErrKeyTaken) {
		t.Fatalf("Submit answers %v; want one nil and one ErrKeyTaken", errs)
	}
	stored, err := tc.st.Job(ctx, jobs[won].ID)
	if err != nil || stored.Status.Phase != api.JobRunning {
		t.Fatalf("the job that took the key: %+v, %v; want stored Running", stored, err)
	}
	if _, err := tc.st.Job(ctx, jobs[1-won].ID); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("the other job: %v; want not stored", err)
	}
	rec, err := tc.st.Claimed(ctx, "user:alice", "retry-me")
	if err != nil || rec.Job != jobs[won].ID {
		t.Errorf("key record %+v, %v; want job %s", rec, err, jobs[won].ID)
	}
}
