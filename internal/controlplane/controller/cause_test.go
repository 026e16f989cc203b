package controller

import (
	"testing"
	"time"

	"github.com/gangway/gangway/internal/api"
)

// TestStopsRecordTheirCause: every way the lifecycle stops a running
// attempt writes the cause goodput accounting charges it to, so that the
// report reads the attempt's own record rather than its reason's words.
func TestStopsRecordTheirCause(t *testing.T) {
	faultyGPU := node("n2")
	faultyGPU.GPUs = []api.GPU{{Index: 0, Health: api.GPUFaulty, Fault: "Xid 79"}}
	faultyNode := node("n2")
	faultyNode.Status.Fault = "ib port down"
	stopAt := t0.Add(30 * time.Second)
	exit0 := func(r int) api.RankStatus {
		rs := rank(r, api.RankExited, 0)
		rs.FinishedAt = stopAt.Add(-time.Second)
		return rs
	}
	tests := []struct {
		name  string
		job   *api.Job
		world world
		want  api.Cause
	}{
		{"every rank exited 0", running(nil), world{ranks: []api.RankStatus{rank(0, api.RankExited, 0), rank(1, api.RankExited, 0)}}, api.CauseSucceeded},
		{"cancelled", running(func(j *api.Job) { j.Status.CancelRequested = true }), world{ranks: ranksRunning()}, api.CauseCancelled},
		{"a rank exited non-zero", running(nil), world{ranks: []api.RankStatus{rank(0, api.RankRunning, 0), rank(1, api.RankExited, 1)}}, api.CauseUserError},
		{"a rank could not start", running(nil), world{ranks: []api.RankStatus{{JobID: "j1", Attempt: 1, Rank: 0, Node: "n1", State: api.RankFailedStart}, rank(1, api.RankRunning, 0)}}, api.CauseUserError},
		{"a node lost", running(nil), world{nodes: []*api.Node{node("n1"), lostNode("n2")}, ranks: ranksRunning()}, api.CauseNodeLost},
		{"a node draining", running(nil), world{nodes: []*api.Node{node("n1"), drainingNode("n2")}, ranks: ranksRunning()}, api.CauseDrain},
		{"a GPU out of service", running(nil), world{nodes: []*api.Node{node("n1"), faultyGPU}, ranks: ranksRunning()}, api.CauseGPUFault},
		{"a node out of service", running(nil), world{nodes: []*api.Node{node("n1"), faultyNode}, ranks: ranksRunning()}, api.CauseNodeFault},
		{"past the time limit", running(func(j *api.Job) { j.Spec.TimeLimit = api.Duration(time.Second) }), world{ranks: ranksRunning()}, api.CauseTimeLimit},
		{"hung", running(func(j *api.Job) { j.Spec.HangTimeout = api.Duration(time.Second) }),
			world{ranks: ranksRunning(), progress: &api.Progress{Step: 1, Attempt: 1, Time: t0}}, api.CauseHang},
		{"preempted", running(preemptedAt(t0)), world{ranks: ranksRunning()}, api.CausePreempted},
		{"superseded by an attempt a lost node cut short after it succeeded", running(func(j *api.Job) {
			a := &j.Status.Attempts[0]
			a.Phase, a.Outcome, a.Reason, a.StoppingAt, a.EndedAt = api.AttemptEnded, api.OutcomeFailed, "node n2 lost", stopAt, stopAt
			j.Status.Attempts = append(j.Status.Attempts, api.Attempt{Number: 2, Phase: api.AttemptRunning, CreatedAt: stopAt.Add(time.Second),
				Placement: []api.RankPlacement{{Rank: 0, Node: "n1", GPUs: []int{0}}, {Rank: 1, Node: "n1", GPUs: []int{1}}}})
		}), world{ranks: []api.RankStatus{exit0(0), exit0(1)}}, api.CauseNodeLost},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := tt.world.lifecycle(tt.job)
			d := l.decide(tt.job)
			if d.job == nil {
				t.Fatal("no decision: the attempt was not stopped")
			}
			a := d.job.Status.Current()
			if a.Phase == api.AttemptRunning {
				t.Fatalf("attempt %d still running", a.Number)
			}
			if a.Cause != tt.want {
				t.Errorf("attempt %d (%s: %s) has cause %q, want %q", a.Number, a.Outcome, a.Reason, a.Cause, tt.want)
			}
		})
	}
}
