package controller

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gangway/gangway/internal/api"
	"github.com/gangway/gangway/internal/controlplane/store"
)

// preflightJob is job p1, a gang of one rank on each of nodes, in its
// preflight attempt.
func preflightJob(nodes int) *api.Job {
	j := &api.Job{ID: "p1", ModRevision: 100, Spec: api.JobSpec{Ranks: nodes, GPUsPerRank: 1, RanksPerNode: 1, Command: []string{"train"}},
		Status: api.JobStatus{Phase: api.JobRunning}}
	a := api.Attempt{Number: 1, Phase: api.AttemptRunning, CreatedAt: t0, Preflight: &api.PreflightRun{}}
	for i := range nodes {
		a.Placement = append(a.Placement, api.RankPlacement{Rank: i, Node: fmt.Sprintf("n%d", i+1), NodeRank: i, GPUs: []int{0}})
	}
	j.Status.Attempts = []api.Attempt{a}
	return j
}

// TestPreflightVerdict: a test ends once every probe has; a node whose
// links both run slow, or whose probe failed, is kept out; a neighbour of
// a slow node (one slow link) is not; two nodes cannot be told apart;
// when every probe failed nobody is blamed; a probe that never ends fails
// the test at its timeout.
func TestPreflightVerdict(t *testing.T) {
	ok := func(r int, in float64) api.RankStatus {
		return api.RankStatus{JobID: "p1", Attempt: 1, Rank: r, State: api.RankExited, Preflight: &api.PreflightResult{InGBps: in}}
	}
	failed := func(r int) api.RankStatus {
		return api.RankStatus{JobID: "p1", Attempt: 1, Rank: r, State: api.RankFailedStart, ExitCode: -1, Message: "preflight: xid check on GPU 0: Xid 79"}
	}
	tests := []struct {
		name     string
		nodes    int
		ranks    []api.RankStatus
		at       time.Duration // after the attempt's creation
		done     bool
		passed   bool
		excluded []string
	}{
		{"a probe still runs", 3, []api.RankStatus{ok(0, 10), ok(1, 10), {JobID: "p1", Attempt: 1, Rank: 2, State: api.RankRunning}}, time.Second, false, false, nil},
		{"all fast", 4, []api.RankStatus{ok(0, 10), ok(1, 11), ok(2, 9.5), ok(3, 10)}, time.Second, true, true, nil},
		// n3 slow: its in-link (from n2) and its out-link (n4's in) run slow.
		{"one slow node", 4, []api.RankStatus{ok(0, 10), ok(1, 10), ok(2, 1), ok(3, 1)}, time.Second, true, false, []string{"n3"}},
		{"a probe failed its health check", 3, []api.RankStatus{ok(0, 10), failed(1), ok(2, 10)}, time.Second, true, false, []string{"n2"}},
		{"two nodes: no telling which", 2, []api.RankStatus{ok(0, 10), ok(1, 1)}, time.Second, true, true, nil},
		{"every probe failed: inconclusive", 3, []api.RankStatus{failed(0), failed(1), failed(2)}, time.Second, true, true, nil},
		{"a probe past the timeout", 3, []api.RankStatus{ok(0, 10), ok(1, 10), {JobID: "p1", Attempt: 1, Rank: 2, State: api.RankRunning}}, 3 * time.Minute, true, false, []string{"n3"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			j := preflightJob(tt.nodes)
			rep := map[string]*api.RankStatus{}
			for i := range tt.ranks {
				rs := tt.ranks[i]
				rep[api.TaskKey(rs.JobID, rs.Attempt, rs.Rank)] = &rs
			}
			l := lifecycle{v: store.View{Jobs: map[string]*api.Job{"p1": j}}, reported: rep, now: t0.Add(tt.at)}
			d, done := l.preflightDone(j, j.Status.Current())
			if done != tt.done {
				t.Fatalf("done %v, want %v", done, tt.done)
			}
			if !done {
				return
			}
			a := d.job.Status.Current()
			if a.Cause != api.CausePreflight || a.Preflight == nil || a.Preflight.Passed != tt.passed {
				t.Fatalf("cause %q, preflight %+v; want passed %v", a.Cause, a.Preflight, tt.passed)
			}
			if !slices.Equal(d.job.Status.Avoid, tt.excluded) {
				t.Errorf("avoid %v, want %v (reason %q)", d.job.Status.Avoid, tt.excluded, a.Reason)
			}
			for _, n := range tt.excluded {
				if !strings.Contains(a.Reason, n) {
					t.Errorf("reason %q does not name %s", a.Reason, n)
				}
			}
		})
	}
}

// TestPreflightWants: wide gangs are tested, narrow ones not; the run
// after a passed test is not tested again on the same nodes, but is on
// others.
func TestPreflightWants(t *testing.T) {
	pf := Preflight{MinNodes: 3}
	j := preflightJob(3)
	fresh := &api.Job{ID: "x"}
	if !pf.wants(fresh, []string{"n1", "n2", "n3"}) || pf.wants(fresh, []string{"n1", "n2"}) {
		t.Error("a 3-node gang not tested, or a 2-node one tested, at MinNodes 3")
	}
	if (Preflight{}).wants(fresh, []string{"n1", "n2", "n3", "n4"}) {
		t.Error("tested with preflight off")
	}
	j.Status.Current().Preflight.Passed = true
	if pf.wants(j, []string{"n3", "n1", "n2"}) {
		t.Error("tested again on the nodes it just passed on")
	}
	if !pf.wants(j, []string{"n1", "n2", "n4"}) {
		t.Error("not tested on a node it has not passed on")
	}
}
