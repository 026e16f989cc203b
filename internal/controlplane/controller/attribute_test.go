package controller

import (
	"testing"
	"time"

	"github.com/gangway/gangway/internal/api"
	"github.com/google/go-cmp/cmp"
)

// TestFirstCauseWins: an attempt ends for the first thing that went wrong
// in time, and only the job's own failures use up its restarts. A dead
// node's peers fail within milliseconds of it and are heard first; a
// fault is reported a heartbeat after the crash it caused; a fence's
// exits arrive once its agent hears the server again.
func TestFirstCauseWins(t *testing.T) {
	stopAt := t0.Add(30 * time.Second)
	exited := func(r, code int, at time.Time) api.RankStatus {
		rs := rank(r, api.RankExited, code)
		rs.FinishedAt = at
		return rs
	}
	fenced := func(r int, at time.Time) api.RankStatus {
		rs := exited(r, 137, at)
		rs.Signal, rs.Fenced, rs.Message = "killed", true, "node "+rs.Node+" fenced itself: no answer from the server for 2.1s"
		return rs
	}
	lostAt := func(name string, seen time.Time) *api.Node {
		n := lostNode(name)
		n.Status.LostAt, n.Status.LastSeenAt = seen.Add(4500*time.Millisecond), seen
		return n
	}
	gpuFault := func(name string, at time.Time) *api.Node {
		n := node(name)
		n.GPUs = []api.GPU{{Index: 0, Health: api.GPUFaulty, Fault: "Xid 79", FaultAt: at}}
		return n
	}
	// stoppingFor is j1 with attempt 1 stopping since stopAt for rank 0's
	// exit.
	stoppingFor := stopping(func(j *api.Job) {
		a := j.Status.Current()
		a.Reason, a.StoppingAt, a.Cause = "rank 0 on n1 exited with code 1", stopAt, api.CauseUserError
	})
	// restartingAfter is j1 waiting to restart after attempt 1 ended for
	// rank 0's exit, which used up a restart.
	restartingAfter := running(func(j *api.Job) {
		j.Status.Phase, j.Status.Restarts, j.Status.NotBefore = api.JobRestarting, 1, stopAt.Add(time.Minute)
		a := j.Status.Current()
		a.Phase, a.Outcome, a.Reason, a.Cause, a.Charged = api.AttemptEnded, api.OutcomeFailed, "rank 0 on n1 exited with code 1", api.CauseUserError, true
		a.StoppingAt, a.EndedAt = stopAt, stopAt
	})
	type want struct {
		Step      step
		Phase     api.JobPhase
		Outcome   api.Outcome
		Cause     api.Cause
		Reason    string
		Restarts  int
		NotBefore time.Time
	}
	tests := []struct {
		name  string
		job   *api.Job
		world world
		want  want
	}{{
		name:  "running: of two exits the first in time is charged, not the lower rank",
		job:   running(nil),
		world: world{ranks: []api.RankStatus{exited(0, 1, stopAt.Add(time.Millisecond)), exited(1, 1, stopAt)}, now: stopAt},
		want:  want{stepStopEnd, api.JobRestarting, api.OutcomeFailed, api.CauseUserError, "rank 1 on n2 exited with code 1", 1, stopAt.Add(time.Second)},
	}, {
		name: "running: a rank killed by its node's fence wins over the exit its peer died of first",
		job:  running(nil),
		world: world{ranks: []api.RankStatus{exited(0, 1, stopAt), fenced(1, stopAt.Add(time.Millisecond))},
			now: stopAt},
		want: want{stepStopEnd, api.JobRestarting, api.OutcomeInterrupted, api.CauseFenced, "node n2 fenced itself: no answer from the server for 2.1s", 0, stopAt},
	}, {
		name: "running: a rank's stderr tail is in the reason",
		job:  running(nil),
		world: world{ranks: []api.RankStatus{func() api.RankStatus {
			rs := exited(0, 1, stopAt)
			rs.StderrTail = "AttributeError: 'NoneType' object has no attribute 'step'"
			return rs
		}(), rank(1, api.RankRunning, 0)}, now: stopAt},
		want: want{stepStop, api.JobStopping, api.OutcomeFailed, api.CauseUserError, "rank 0 on n1 exited with code 1: AttributeError: 'NoneType' object has no attribute 'step'", 0, time.Time{}},
	}, {
		name:  "stopping: the node the failing rank's peer ran on was lost, last heard before the stop",
		job:   stoppingFor,
		world: world{nodes: []*api.Node{node("n1"), lostAt("n2", stopAt.Add(-800*time.Millisecond))}, ranks: []api.RankStatus{exited(0, 1, stopAt)}},
		want: want{stepEnd, api.JobRestarting, api.OutcomeFailed, api.CauseNodeLost,
			"node n2 lost (then rank 0 on n1 exited with code 1)", 0, now},
	}, {
		name:  "stopping: a node heard well after the stop and lost later is not what failed the job",
		job:   stoppingFor,
		world: world{nodes: []*api.Node{node("n1"), lostAt("n2", stopAt.Add(10*time.Second))}, ranks: []api.RankStatus{exited(0, 1, stopAt)}},
		want:  want{stepEnd, api.JobRestarting, api.OutcomeFailed, api.CauseUserError, "rank 0 on n1 exited with code 1", 1, now.Add(time.Second)},
	}, {
		name:  "restarting: a GPU fault reported a heartbeat after the crash gives the restart back",
		job:   restartingAfter,
		world: world{nodes: []*api.Node{gpuFault("n1", stopAt.Add(time.Second)), node("n2")}},
		want: want{stepAmend, api.JobRestarting, api.OutcomeInterrupted, api.CauseGPUFault,
			"GPU 0 of node n1 out of service: Xid 79 (then rank 0 on n1 exited with code 1)", 0, now},
	}, {
		name:  "restarting: a fence's exits reported once its agent hears the server again",
		job:   restartingAfter,
		world: world{ranks: []api.RankStatus{exited(0, 1, stopAt), fenced(1, stopAt.Add(-time.Millisecond))}},
		want: want{stepAmend, api.JobRestarting, api.OutcomeInterrupted, api.CauseFenced,
			"node n2 fenced itself: no answer from the server for 2.1s (then rank 0 on n1 exited with code 1)", 0, now},
	}, {
		name:  "restarting: a fault found long after the crash is another story",
		job:   restartingAfter,
		world: world{nodes: []*api.Node{gpuFault("n1", stopAt.Add(time.Minute)), node("n2")}},
		want:  want{stepNone, api.JobRestarting, api.OutcomeFailed, api.CauseUserError, "rank 0 on n1 exited with code 1", 1, stopAt.Add(time.Minute)},
	}, {
		name: "running again: the attempt before is amended and its restart given back",
		job: func() *api.Job {
			j := restartingAfter.Clone()
			j.Status.Phase = api.JobRunning
			j.Status.Attempts = append(j.Status.Attempts, api.Attempt{Number: 2, Phase: api.AttemptRunning, CreatedAt: stopAt.Add(time.Second),
				Placement: []api.RankPlacement{{Rank: 0, Node: "n3", GPUs: []int{0}}, {Rank: 1, Node: "n3", GPUs: []int{1}}}})
			return j
		}(),
		world: world{nodes: []*api.Node{node("n1"), lostAt("n2", stopAt.Add(-time.Second)), node("n3")},
			ranks: []api.RankStatus{{JobID: "j1", Attempt: 2, Rank: 0, Node: "n3", State: api.RankRunning}}},
		want: want{stepAmend, api.JobRunning, api.OutcomeFailed, api.CauseNodeLost,
			"node n2 lost (then rank 0 on n1 exited with code 1)", 0, stopAt.Add(time.Minute)},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := tt.world.lifecycle(tt.job)
			d := l.decide(tt.job)
			j := d.job
			if j == nil {
				j = tt.job
			}
			a := &j.Status.Attempts[0]
			got := want{d.step, j.Status.Phase, a.Outcome, api.CauseOf(a), a.Reason, j.Status.Restarts, j.Status.NotBefore}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("attempt 1 and its job (-want +got):\n%s", diff)
			}
			if a.Charged != (got.Restarts == 1) {
				t.Errorf("attempt 1 charged = %v with %d restarts used", a.Charged, got.Restarts)
			}
		})
	}
}

// TestNodeFaultIsNotTheJobs: a rank its node could not start for the
// node's own fault (its container engine down) ends the attempt as an
// interruption charged to the node, even though its peer's exit was heard
// first; the job uses up no restart and is kept off that node.
func TestNodeFaultIsNotTheJobs(t *testing.T) {
	stopAt := t0.Add(30 * time.Second)
	down := rank(0, api.RankFailedStart, -1)
	down.NodeFault, down.FinishedAt = true, stopAt.Add(time.Millisecond)
	down.Message = "the Docker engine on node n1 does not answer at unix:///x.sock (is dockerd running?)"
	peer := rank(1, api.RankExited, 1)
	peer.FinishedAt = stopAt
	job := running(nil)
	l := world{ranks: []api.RankStatus{peer, down}, now: stopAt}.lifecycle(job)
	d := l.decide(job)
	if d.job == nil {
		t.Fatal("no decision")
	}
	a := d.job.Status.Attempts[0]
	type got struct {
		Outcome  api.Outcome
		Cause    api.Cause
		Charged  bool
		Restarts int
		Avoid    []string
		Reason   string
	}
	want := got{api.OutcomeInterrupted, api.CauseNodeFault, false, 0, []string{"n1"},
		"rank 0 could not start for a fault of node n1, which the job now avoids: " + down.Message}
	if diff := cmp.Diff(want, got{a.Outcome, a.Cause, a.Charged, d.job.Status.Restarts, d.job.Status.Avoid, a.Reason}); diff != "" {
		t.Errorf("attempt 1 (-want +got):\n%s", diff)
	}
}
