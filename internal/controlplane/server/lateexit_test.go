package server

import (
	"context"
	"testing"
	"time"

	"github.com/gangway/gangway/internal/api"
	"github.com/gangway/gangway/internal/api/client"
	"github.com/gangway/gangway/internal/base/wait"
)

// TestLostNodeReportsLateExits: a gang's ranks all exit 0, and the node of
// one of them is lost before its agent could say so. When that agent
// speaks again, the exits it reports (from its supervisor's journal) are
// stored although the node is lost, and the job succeeds with the attempt
// that did the work instead of running again.
func TestLostNodeReportsLateExits(t *testing.T) {
	e := startAgentEnv(t)
	nodes := map[string]*client.Client{}
	for _, name := range []string{"n1", "n2"} {
		nodes[name] = e.node(name)
		if err := e.register(nodes[name], testNode(name, "https://127.0.0.1:1", nil)); err != nil {
			t.Fatal(err)
		}
	}
	// Two ranks of two GPUs: one on each node.
	id, err := e.admin.SubmitID(e.ctx, []byte(`{"ranks": 2, "gpusPerRank": 2, "command": ["true"], "maxRestarts": 3}`))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(e.ctx, time.Minute)
	defer cancel()
	attempt := map[string]api.Assignment{}
	if err := wait.Until(ctx, 20*time.Millisecond, func() (bool, error) {
		for name, c := range nodes {
			l, err := c.Assignments(ctx, client.AssignmentQuery{Node: name})
			if err != nil {
				return false, err
			}
			for _, a := range l.Assignments {
				if a.JobID == id {
					attempt[name] = a
				}
			}
		}
		return len(attempt) == 2, nil
	}); err != nil {
		t.Fatalf("the gang was never placed on both nodes (%d): %v", len(attempt), err)
	}
	started := time.Now()
	status := func(name string, state api.RankState) api.RankStatus {
		a := attempt[name]
		rs := api.RankStatus{JobID: id, Attempt: a.Attempt, Rank: a.Rank, Node: name, State: state, PID: 100, StartedAt: started}
		if state == api.RankExited {
			rs.FinishedAt = time.Now()
		}
		return rs
	}
	beat := func(name string, ranks ...api.RankStatus) api.HeartbeatResponse {
		t.Helper()
		resp, err := nodes[name].Heartbeat(e.ctx, &api.Heartbeat{Node: name, SentAt: time.Now(), Ranks: ranks})
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	beat("n1", status("n1", api.RankRunning))
	beat("n2", status("n2", api.RankRunning))
	// Both exit 0; n1 says so, n2 is cut off first.
	n2exit := status("n2", api.RankExited)
	beat("n1", status("n1", api.RankExited))
	e.lose("n2")
	if err := wait.Until(ctx, 20*time.Millisecond, func() (bool, error) {
		d, err := e.admin.Job(ctx, id)
		return err == nil && d.Job.Status.Current().Phase == api.AttemptEnded, err
	}); err != nil {
		t.Fatalf("losing n2 never ended the attempt: %v", err)
	}
	if resp := beat("n2", n2exit); !resp.Reregister {
		t.Fatalf("the lost node's heartbeat = %+v; want it told to register again", resp)
	}
	d := &api.JobDetail{}
	if err := wait.Until(ctx, 20*time.Millisecond, func() (bool, error) {
		got, err := e.admin.Job(ctx, id)
		if err == nil {
			d = got
		}
		return err == nil && d.Job.Status.Phase.Final(), err
	}); err != nil {
		t.Fatalf("the job never finished after the late exit (phase %s: %s): %v", d.Job.Status.Phase, d.Job.Status.Reason, err)
	}
	st := d.Job.Status
	if st.Phase != api.JobSucceeded || st.Attempts[0].Outcome != api.OutcomeSucceeded {
		t.Fatalf("job %s (%s), attempt 1 %s; want Succeeded with attempt 1 succeeded", st.Phase, st.Reason, st.Attempts[0].Outcome)
	}
	if st.Restarts != 0 {
		t.Errorf("restarts = %d; the loss of a node after the job was done cost it one", st.Restarts)
	}
	for _, a := range st.Attempts[1:] {
		if a.Outcome != api.OutcomeSuperseded {
			t.Errorf("attempt %d ended %s (%s); a rerun must end superseded", a.Number, a.Outcome, a.Reason)
		}
	}
}
