package store

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/gangway/gangway/internal/api"
	"github.com/gangway/gangway/internal/base/wait"
	"github.com/google/go-cmp/cmp"
	clientv3 "go.etcd.io/etcd/client/v3"
)

func eventJSON(t *testing.T, reason, job string) []byte {
	t.Helper()
	b, err := json.Marshal(api.Event{Reason: reason, Kind: api.KindJob, Name: job, Type: api.EventNormal})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func reasons(evs []api.Event) []string {
	out := []string{}
	for _, e := range evs {
		out = append(out, fmt.Sprintf("%d:%s", e.Index, e.Reason))
	}
	return out
}

// TestEventLogOrdersBoundsAndFilters: events go in index order whatever
// order they come in, a deleted or re-put key leaves no trace of its old
// self, the oldest go beyond the bound, and Events keeps what the filter
// keeps, the newest limit of them.
func TestEventLogOrdersBoundsAndFilters(t *testing.T) {
	l := NewEventLog(4)
	put := func(key string, rev int64, reason, job string) { l.apply(key, eventJSON(t, reason, job), rev, false) }
	put("k1", 10, "A", "1")
	put("k3", 30, "C", "2")
	put("k2", 20, "B", "1") // a list's keys come nearly in order
	all := &api.EventFilter{}
	evs, idx := l.Events(context.Background(), 0, all, 0, 0)
	if diff := cmp.Diff([]string{"10:A", "20:B", "30:C"}, reasons(evs)); diff != "" || idx != 30 {
		t.Fatalf("events (-want +got):\n%s; index %d, want 30", diff, idx)
	}
	l.apply("k2", nil, 40, true)
	put("k1", 41, "A2", "1") // written again: it moves to its new index
	put("k4", 42, "D", "2")
	put("k5", 43, "E", "2")
	put("k6", 44, "F", "1") // five live: the oldest (k3) goes
	evs, idx = l.Events(context.Background(), 0, all, 0, 0)
	if diff := cmp.Diff([]string{"41:A2", "42:D", "43:E", "44:F"}, reasons(evs)); diff != "" || idx != 44 || l.Len() != 4 {
		t.Fatalf("events (-want +got):\n%s; index %d, len %d", diff, idx, l.Len())
	}
	evs, _ = l.Events(context.Background(), 0, &api.EventFilter{Job: "2"}, 1, 0)
	if diff := cmp.Diff([]string{"43:E"}, reasons(evs)); diff != "" {
		t.Errorf("job 2's newest (-want +got):\n%s", diff)
	}
	evs, _ = l.Events(context.Background(), 42, all, 0, time.Second)
	if diff := cmp.Diff([]string{"43:E", "44:F"}, reasons(evs)); diff != "" {
		t.Errorf("after 42 (-want +got):\n%s", diff)
	}
}

// TestEventLogWaitsForAMatch: a blocking read returns when an event it
// keeps comes, not for one it does not; and with nothing, after wait,
// with the index it has seen up to.
func TestEventLogWaitsForAMatch(t *testing.T) {
	l := NewEventLog(0)
	l.apply("k1", eventJSON(t, "A", "1"), 10, false)
	got := make(chan []api.Event, 1)
	go func() {
		evs, _ := l.Events(context.Background(), 10, &api.EventFilter{Job: "2"}, 0, 30*time.Second)
		got <- evs
	}()
	l.apply("k2", eventJSON(t, "B", "1"), 11, false)
	select {
	case evs := <-got:
		t.Fatalf("returned %v for another job's event", reasons(evs))
	case <-time.After(100 * time.Millisecond):
	}
	l.apply("k3", eventJSON(t, "C", "2"), 12, false)
	select {
	case evs := <-got:
		if diff := cmp.Diff([]string{"12:C"}, reasons(evs)); diff != "" {
			t.Errorf("(-want +got):\n%s", diff)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the blocking read never returned")
	}
	evs, idx := l.Events(context.Background(), 12, &api.EventFilter{}, 0, 20*time.Millisecond)
	if len(evs) != 0 || idx != 12 {
		t.Errorf("idle read = %v, %d; want none at 12", reasons(evs), idx)
	}
}

// recordingTap keeps what a cache tells it.
type recordingTap struct {
	mu    sync.Mutex
	got   []Change
	fulls int
	rev   int64
}

func (r *recordingTap) Changed(chs []Change, rev int64, full bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got = append(r.got, chs...)
	r.rev = rev
	if full {
		r.fulls++
	}
}

func (r *recordingTap) take() []Change {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.got
	r.got = nil
	return out
}

// describeChange is a change in a line: its kind, name, and what it was
// and became.
func describeChange(ch Change) string {
	phase := func(j *api.Job) string {
		if j == nil {
			return "-"
		}
		return string(j.Status.Phase)
	}
	state := func(n *api.Node) string {
		if n == nil {
			return "-"
		}
		return string(n.Status.State)
	}
	step := func(c *api.Checkpoint) string {
		if c == nil {
			return "-"
		}
		return fmt.Sprint(c.Step)
	}
	switch ch.Kind {
	case ChangeJob:
		return "job " + ch.Name + " " + phase(ch.OldJob) + ">" + phase(ch.Job)
	case ChangeNode:
		return "node " + ch.Name + " " + state(ch.OldNode) + ">" + state(ch.Node)
	case ChangeCheckpoint:
		return "ckpt " + ch.Name + " " + step(ch.OldCheckpoint) + ">" + step(ch.Checkpoint)
	case ChangeStraggler:
		return fmt.Sprintf("straggler %s rank %d", ch.Name, ch.Straggler.Rank)
	}
	return fmt.Sprint(ch.Kind, ch.Name)
}

func describeChanges(chs []Change) []string {
	out := []string{}
	for _, ch := range chs {
		out = append(out, describeChange(ch))
	}
	return out
}

// TestCacheTapsChanges: the tap hears each change with the value before
// it (a job's last live one when it finishes), and after a list that
// missed some, what changed meanwhile against what the cache had, with
// the deletions, and nothing else; events written go to the event log,
// and wake no controller.
func TestCacheTapsChanges(t *testing.T) {
	s := newStore(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if _, err := s.CreateJob(ctx, spec(1), time.Now()); err != nil { // there before: no news
		t.Fatal(err)
	}
	c := NewCache(s, nil)
	tap, log := &recordingTap{}, NewEventLog(0)
	c.SetTap(tap)
	c.SetEvents(log)
	done := make(chan struct{})
	go func() { defer close(done); _ = c.Run(ctx) }()
	sync := func(rev int64) {
		t.Helper()
		wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
		defer wcancel()
		if err := c.WaitRevision(wctx, rev); err != nil {
			t.Fatal(err)
		}
	}
	sync(1)
	if got := tap.take(); len(got) != 0 {
		t.Fatalf("the first list told the tap %q; want nothing", describeChanges(got))
	}

	j, err := s.CreateJob(ctx, spec(1), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	n := &api.Node{Name: "n1", Status: api.NodeStatus{State: api.NodeReady}}
	if err := s.PutNode(ctx, n); err != nil {
		t.Fatal(err)
	}
	if err := s.PutCheckpoint(ctx, j.ID, api.Checkpoint{Step: 5}); err != nil {
		t.Fatal(err)
	}
	if err := s.PutStraggler(ctx, api.Straggler{JobID: j.ID, Attempt: 1, Rank: 3, Node: "n1"}); err != nil {
		t.Fatal(err)
	}
	fin, err := s.ModifyJob(ctx, j.ID, func(j *api.Job) error { j.Status.Phase = api.JobSucceeded; return nil })
	if err != nil {
		t.Fatal(err)
	}
	sync(fin.ModRevision)
	id := j.ID
	want := []string{"job " + id + " ->Pending", "node n1 ->Ready", "ckpt " + id + " ->5", "straggler " + id + " rank 3", "job " + id + " Pending>Succeeded"}
	if diff := cmp.Diff(want, describeChanges(tap.take())); diff != "" {
		t.Fatalf("tapped (-want +got):\n%s", diff)
	}

	// Events: in the log at the revision they were written at, and no
	// pass of a controller for them (but for the lease's record, written
	// with the first).
	put := func(reason string) int64 {
		t.Helper()
		if err := s.PutEvents(ctx, []EventWrite{{Source: 7, Seq: len(reason), Event: api.Event{Reason: reason, Kind: api.KindJob, Name: j.ID}}}, time.Now()); err != nil {
			t.Fatal(err)
		}
		rev, err := s.Revision(ctx)
		if err != nil {
			t.Fatal(err)
		}
		sync(rev)
		return rev
	}
	first := put("Scheduled")
	select {
	case <-c.Changed():
	default:
	}
	second := put("Started")
	if evs, _ := log.Events(ctx, 0, &api.EventFilter{}, 0, 0); len(evs) != 2 || evs[0].Index != first || evs[1].Index != second || evs[1].Reason != "Started" {
		t.Errorf("event log = %+v; want Scheduled at %d and Started at %d", evs, first, second)
	}
	select {
	case <-c.Changed():
		t.Error("writing events signalled Changed: the controller would run a pass for nothing")
	default:
	}

	// A list after changes the watch did not deliver: a second job and
	// the node's deletion. The list (relist, as after a compaction)
	// tells them against what the cache had.
	cancel()
	<-done
	tap.take()
	j2, err := s.CreateJob(context.Background(), spec(1), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Client().Delete(context.Background(), nodeKey("n1")); err != nil {
		t.Fatal(err)
	}
	if _, err := c.list(context.Background()); err != nil {
		t.Fatal(err)
	}
	changed := describeChanges(tap.take()) // what was there before, it heard then
	want = []string{"job " + j2.ID + " ->Pending", "node n1 Ready>-"}
	if diff := cmp.Diff(want, changed); diff != "" {
		t.Errorf("list's changes (-want +got):\n%s", diff)
	}
	if tap.fulls != 2 {
		t.Errorf("%d full lists; want 2 (the first and the relist)", tap.fulls)
	}
	if log.Len() != 2 {
		t.Errorf("the relisted log holds %d events; want the 2 stored", log.Len())
	}
}

// TestEventsTrimAndExpire: TrimEvents deletes the oldest beyond a count;
// ExpireEvents, the events of leases older than the TTL.
func TestEventsTrimAndExpire(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	now := time.Now()
	var ws []EventWrite
	for i := range 5 {
		ws = append(ws, EventWrite{Source: int64(100 + i), Event: api.Event{Reason: fmt.Sprint("R", i)}})
	}
	if err := s.PutEvents(ctx, ws[:3], now.Add(-DefaultEventTTL-2*time.Hour)); err != nil {
		t.Fatal(err)
	}
	if err := s.PutEvents(ctx, ws[3:], now); err != nil {
		t.Fatal(err)
	}
	stored := func() []string {
		resp, err := s.Client().Get(ctx, eventsPrefix, clientv3.WithPrefix())
		if err != nil {
			t.Fatal(err)
		}
		out := []string{}
		for _, kv := range resp.Kvs {
			var e api.Event
			if err := json.Unmarshal(kv.Value, &e); err != nil {
				t.Fatal(err)
			}
			out = append(out, e.Reason)
		}
		return out
	}
	if n, err := s.TrimEvents(ctx, 4); n != 1 || err != nil {
		t.Fatalf("TrimEvents(4) = %d, %v; want 1", n, err)
	}
	if diff := cmp.Diff([]string{"R1", "R2", "R3", "R4"}, stored()); diff != "" {
		t.Errorf("after trimming (-want +got):\n%s", diff)
	}
	if n, err := s.TrimEvents(ctx, 10); n != 0 || err != nil {
		t.Errorf("TrimEvents(10) = %d, %v; want nothing to trim", n, err)
	}
	if n, err := s.ExpireEvents(ctx, now); n != 1 || err != nil {
		t.Fatalf("ExpireEvents = %d, %v; want the old lease revoked", n, err)
	}
	if err := wait.Until(ctx, 10*time.Millisecond, func() (bool, error) { return len(stored()) == 2, nil }); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"R3", "R4"}, stored()); diff != "" {
		t.Errorf("after expiry (-want +got):\n%s", diff)
	}
}
