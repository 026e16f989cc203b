package events

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gangway/gangway/internal/api"
	"github.com/gangway/gangway/internal/controlplane/store"
	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var t0 = time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)

// oneLine is an event as the tables below write it: type, reason,
// attempt and nodes when set, and message.
func oneLine(e api.Event) string {
	s := string(e.Type)[:1] + " " + e.Reason
	if e.Attempt > 0 {
		s += fmt.Sprintf(" #%d", e.Attempt)
	}
	if len(e.Nodes) > 0 {
		s += " [" + strings.Join(e.Nodes, ",") + "]"
	}
	return s + ": " + e.Message
}

// told is what Derive tells of ch, a line an event, checking each is
// about ch's object.
func told(t *testing.T, ch *store.Change) []string {
	t.Helper()
	var out []string
	for _, e := range Derive(ch, t0) {
		if e.Name != ch.Name || !e.Time.Equal(t0) {
			t.Errorf("event %+v: want %s's at %s", e, ch.Name, t0)
		}
		out = append(out, oneLine(e))
	}
	return out
}

// jobAt is a job in phase with attempts (each given as "nodes:phase",
// e.g. "n1,n2:Running", the nodes one rank each).
func jobAt(phase api.JobPhase, reason string, attempts ...string) *api.Job {
	j := &api.Job{ID: "7", Spec: api.JobSpec{Queue: "research", User: "alice", Ranks: 2, GPUsPerRank: 4, Command: []string{"train"}},
		Status: api.JobStatus{Phase: phase, Reason: reason}}
	for i, a := range attempts {
		nodes, ph, _ := strings.Cut(a, ":")
		at := api.Attempt{Number: i + 1, Phase: api.AttemptPhase(ph), CreatedAt: t0}
		for r, n := range strings.Split(nodes, ",") {
			at.Placement = append(at.Placement, api.RankPlacement{Rank: r, Node: n})
		}
		j.Status.Attempts = append(j.Status.Attempts, at)
	}
	return j
}

// with returns a copy of j changed by fn.
func with(j *api.Job, fn func(j *api.Job)) *api.Job {
	c := j.Clone()
	fn(c)
	return c
}

func ended(outcome api.Outcome, cause api.Cause, reason string) func(*api.Job) {
	return func(j *api.Job) {
		a := j.Status.Current()
		a.Phase, a.Outcome, a.Cause, a.Reason, a.EndedAt = api.AttemptEnded, outcome, cause, reason, t0.Add(time.Minute)
	}
}

func TestDeriveJob(t *testing.T) {
	pending := jobAt(api.JobPending, "")
	placed := jobAt(api.JobRunning, "", "n1,n2:Running")
	running := with(placed, func(j *api.Job) { j.Status.Attempts[0].RunningAt = t0.Add(1500 * time.Millisecond) })
	lost := with(running, func(j *api.Job) {
		ended(api.OutcomeFailed, api.CauseNodeLost, "node n2 lost (no heartbeat for 4.5s)")(j)
		j.Status.Phase, j.Status.Reason = api.JobRestarting, "waiting for 8 GPUs"
	})
	restarted := with(lost, func(j *api.Job) {
		j.Status.Phase, j.Status.Reason = api.JobRunning, ""
		j.Status.Attempts = append(j.Status.Attempts, api.Attempt{Number: 2, Phase: api.AttemptRunning, CreatedAt: t0,
			Placement:  []api.RankPlacement{{Node: "n1"}, {Rank: 1, Node: "n3"}},
			ResumeFrom: &api.Checkpoint{Step: 400}})
	})
	tests := []struct {
		name     string
		old, new *api.Job
		want     []string
	}{
		{"submitted", nil, pending, []string{"N Submitted: submitted by alice to queue research: 2 ranks × 4 GPUs"}},
		{"submitted and placed in one write", nil, placed, []string{
			"N Submitted: submitted by alice to queue research: 2 ranks × 4 GPUs",
			"N Scheduled #1 [n1,n2]: attempt 1 placed on n1,n2 (2 ranks)"}},
		{"waits", pending, jobAt(api.JobPending, "needs 8 GPUs under one leaf; the best has 4 free"), []string{
			"N Waiting: needs 8 GPUs under one leaf; the best has 4 free"}},
		{"new: no reason yet", nil, jobAt(api.JobPending, api.ReasonNew), []string{
			"N Submitted: submitted by alice to queue research: 2 ranks × 4 GPUs"}},
		{"the scheduler says why", jobAt(api.JobPending, api.ReasonNew), jobAt(api.JobPending, "needs 8 GPUs; 4 free"), []string{
			"N Waiting: needs 8 GPUs; 4 free"}},
		{"waits on, for another count", jobAt(api.JobPending, "needs 8 GPUs; 4 free"), jobAt(api.JobPending, "needs 8 GPUs; 2 free"), nil},
		{"placed", pending, placed, []string{"N Scheduled #1 [n1,n2]: attempt 1 placed on n1,n2 (2 ranks)"}},
		{"started", placed, running, []string{"N Started #1 [n1,n2]: 2 ranks of attempt 1 running, 1.5s after placement"}},
		{"a status write that changes nothing told", running, with(running, func(j *api.Job) { j.Status.Avoid = []string{"n9"} }), nil},
		{"node lost, then waits", running, lost, []string{
			"W NodeLost #1 [n1,n2]: attempt 1 ended: node n2 lost (no heartbeat for 4.5s)",
			"N Waiting: waiting for 8 GPUs"}},
		{"restarted", lost, restarted, []string{
			"N Restarted #2 [n1,n3]: restarted as attempt 2 on n1,n3 (2 ranks), resuming from the checkpoint of step 400"}},
		{"preempting", running, with(running, func(j *api.Job) { j.Status.Current().PreemptedFor = "12" }), []string{
			"N Preempting #1 [n1,n2]: job 12 needs the GPUs: ranks sent SIGUSR1 to checkpoint before they stop"}},
		{"preempted", running, with(running, ended(api.OutcomePreempted, api.CausePreempted, "preempted for job 12 after checkpointing")), []string{
			"N Preempted #1 [n1,n2]: attempt 1 ended: preempted for job 12 after checkpointing"}},
		{"GPU fault", running, with(running, ended(api.OutcomeFailed, api.CauseGPUFault, "GPU 3 on n1 out of service: Xid 79")), []string{
			"W GPUFault #1 [n1,n2]: attempt 1 ended: GPU 3 on n1 out of service: Xid 79"}},
		{"succeeded: the job's end alone", running, with(running, func(j *api.Job) {
			ended(api.OutcomeSucceeded, api.CauseSucceeded, "")(j)
			j.Status.Phase, j.Status.StartedAt, j.Status.FinishedAt = api.JobSucceeded, t0, t0.Add(90*time.Second)
		}), []string{"N Succeeded #1 [n1,n2]: succeeded after 1 attempt, 1m30s after it was first placed"}},
		{"failed for good", running, with(running, func(j *api.Job) {
			ended(api.OutcomeFailed, api.CauseUserError, "rank 1 exited 2: no such file")(j)
			j.Status.Phase, j.Status.Reason = api.JobFailed, "rank 1 exited 2: no such file (no restarts left)"
		}), []string{"W Failed #1 [n1,n2]: failed after 1 attempt: rank 1 exited 2: no such file (no restarts left)"}},
		{"cancelled while waiting", pending, jobAt(api.JobCancelled, "cancelled"), []string{"N Cancelled: cancelled before it was placed"}},
		{"restarted after a passed preflight is a placement", with(placed, func(j *api.Job) {
			ended(api.OutcomeSucceeded, api.CausePreflight, "preflight passed")(j)
			j.Status.Current().Preflight = &api.PreflightRun{Passed: true}
		}), with(placed, func(j *api.Job) {
			ended(api.OutcomeSucceeded, api.CausePreflight, "preflight passed")(j)
			j.Status.Current().Preflight = &api.PreflightRun{Passed: true}
			j.Status.Attempts = append(j.Status.Attempts, api.Attempt{Number: 2, Phase: api.AttemptRunning, Placement: []api.RankPlacement{{Node: "n1"}}})
		}), []string{"N Scheduled #2 [n1]: attempt 2 placed on n1 (1 rank)"}},
		{"preflight failed", placed, with(placed, func(j *api.Job) {
			ended(api.OutcomeFailed, api.CausePreflight, "preflight: n2's links ran at 3 GB/s against the gang's 40")(j)
			j.Status.Current().Preflight = &api.PreflightRun{}
			j.Status.Phase = api.JobRestarting
		}), []string{"W Preflight #1 [n1,n2]: attempt 1 ended: preflight: n2's links ran at 3 GB/s against the gang's 40"}},
		{"deleted by retention", running, nil, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := told(t, &store.Change{Kind: store.ChangeJob, Name: "7", OldJob: tt.old, Job: tt.new})
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("events (-want +got):\n%s", diff)
			}
		})
	}
}

func TestDeriveCheckpointAndStraggler(t *testing.T) {
	ck := func(step int64) *api.Checkpoint {
		return &api.Checkpoint{Step: step, Attempt: 2, Path: fmt.Sprintf("/ckpt/7/%d", step)}
	}
	tests := []struct {
		name string
		ch   store.Change
		want []string
	}{
		{"first", store.Change{Kind: store.ChangeCheckpoint, Name: "7", Checkpoint: ck(100)}, []string{
			"N Checkpoint #2: checkpoint of step 100 committed by attempt 2 at /ckpt/7/100"}},
		{"newer", store.Change{Kind: store.ChangeCheckpoint, Name: "7", OldCheckpoint: ck(100), Checkpoint: ck(200)}, []string{
			"N Checkpoint #2: checkpoint of step 200 committed by attempt 2 at /ckpt/7/200"}},
		{"not newer", store.Change{Kind: store.ChangeCheckpoint, Name: "7", OldCheckpoint: ck(200), Checkpoint: ck(200)}, nil},
		{"straggler", store.Change{Kind: store.ChangeStraggler, Name: "7", Straggler: &api.Straggler{JobID: "7", Attempt: 1, Rank: 5, Node: "n4",
			ComputeS: 0.9, MedianS: 0.5, StepS: 1, Since: t0}}, []string{
			"W Straggler #1 [n4]: rank 5 on n4 works 0.9s per step against the gang's median 0.5s (step 1s) since 10:00:00"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := told(t, &tt.ch)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("events (-want +got):\n%s", diff)
			}
		})
	}
}

func nodeWith(fn func(n *api.Node)) *api.Node {
	n := &api.Node{Name: "n1", Address: "10.0.0.1", Status: api.NodeStatus{State: api.NodeReady, RegisteredAt: t0},
		GPUs: []api.GPU{{Index: 0, UUID: "GPU-a", Model: "H100"}, {Index: 1, UUID: "GPU-b", Model: "H100"}}}
	if fn != nil {
		fn(n)
	}
	return n
}

func TestDeriveNode(t *testing.T) {
	ready := nodeWith(nil)
	faultyGPU := nodeWith(func(n *api.Node) {
		n.GPUs[1].Health, n.GPUs[1].Fault = api.GPUFaulty, "xid: Xid 79: GPU has fallen off the bus"
	})
	tests := []struct {
		name     string
		old, new *api.Node
		want     []string
	}{
		{"registered", nil, ready, []string{"N Registered: registered: 2 × H100, address 10.0.0.1"}},
		{"registered with a faulty GPU", nil, faultyGPU, []string{
			"N Registered: registered: 2 × H100, address 10.0.0.1",
			"W GPUFault: GPU 1 (GPU-b) out of service: xid: Xid 79: GPU has fallen off the bus"}},
		{"registered again", ready, nodeWith(func(n *api.Node) { n.Status.RegisteredAt = t0.Add(time.Hour) }), []string{
			"N Registered: registered again (its agent restarted): 2 × H100, address 10.0.0.1"}},
		{"lost", ready, nodeWith(func(n *api.Node) { n.Status.State, n.Status.Reason = api.NodeLost, "no heartbeat for 4.5s" }), []string{
			"W NodeLost: lost: no heartbeat for 4.5s"}},
		{"back", nodeWith(func(n *api.Node) { n.Status.State = api.NodeLost }), ready, []string{"N Ready: ready again: its agent is heard"}},
		{"cordoned", ready, nodeWith(func(n *api.Node) { n.Status.Cordoned = true }), []string{"N Cordoned: cordoned: no new ranks"}},
		{"drained", ready, nodeWith(func(n *api.Node) { n.Status.Cordoned, n.Status.Draining = true, true }), []string{
			"N Draining: draining: no new ranks, and its gangs move elsewhere"}},
		{"uncordoned", nodeWith(func(n *api.Node) { n.Status.Cordoned, n.Status.Draining = true, true }), ready, []string{
			"N Uncordoned: uncordoned: ranks may be placed on it again"}},
		{"GPU fault", ready, faultyGPU, []string{"W GPUFault: GPU 1 (GPU-b) out of service: xid: Xid 79: GPU has fallen off the bus"}},
		{"GPU back", faultyGPU, ready, []string{"N GPURecovered: GPU 1 (GPU-b) back in service"}},
		{"node out of service for a GPU", ready, nodeWith(func(n *api.Node) {
			n.Status.Fault, n.Status.FaultCause = "GPU 0: Xid 79", api.CauseGPUFault
		}), []string{"W GPUFault: out of service: GPU 0: Xid 79"}},
		{"node out of service for its disk", ready, nodeWith(func(n *api.Node) { n.Status.Fault = "checkpoint disk full" }), []string{
			"W NodeFault: out of service: checkpoint disk full"}},
		{"node back", nodeWith(func(n *api.Node) { n.Status.Fault = "checkpoint disk full" }), ready, []string{
			"N Recovered: back in service after: checkpoint disk full"}},
		{"lemon", ready, nodeWith(func(n *api.Node) { n.Status.Lemon, n.Status.Faults = true, []time.Time{t0, t0, t0} }), []string{
			"W Lemon: a lemon: 3 faults recorded; kept out of gangs that span nodes until uncordoned"}},
		{"witnesses and health reports change: nothing told", ready, nodeWith(func(n *api.Node) {
			n.Status.Witnesses = []string{"n2", "n3"}
			n.Status.Health = []api.HealthCheck{{Check: "thermal", Status: api.CheckWarn}}
		}), nil},
		{"deleted", ready, nil, []string{"N Deleted: removed from the store"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := told(t, &store.Change{Kind: store.ChangeNode, Name: "n1", OldNode: tt.old, Node: tt.new})
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("events (-want +got):\n%s", diff)
			}
		})
	}
}

func TestDeriveDeploymentAndQueue(t *testing.T) {
	dep := func(gen int64, desired, ready int, deleting bool) *api.Deployment {
		return &api.Deployment{Spec: api.DeploymentSpec{Name: "chat", Model: "llama-3-8b", Engine: api.EngineVLLM, GPUsPerReplica: 1},
			Generation: gen, Status: api.DeploymentStatus{Desired: desired, Ready: ready, Deleting: deleting}}
	}
	scaled := dep(1, 3, 1, false)
	scaled.Status.Reason = "queue depth 40 over 10 per replica"
	two := 2
	q := func(guarantee int, weight float64) *api.Queue {
		return &api.Queue{Spec: api.QueueSpec{Name: "research", GuaranteeGPUs: guarantee, Weight: weight, BorrowLimitGPUs: &two, Cohort: "lab"}}
	}
	busy := q(8, 1)
	busy.Status.UsedGPUs = 8
	tests := []struct {
		name string
		ch   store.Change
		want []string
	}{
		{"deployment created", store.Change{Kind: store.ChangeDeployment, Name: "chat", Deployment: dep(1, 0, 0, false)}, []string{
			"N Created: created: llama-3-8b on vllm, 1 GPU(s) per replica"}},
		{"scaled, one ready", store.Change{Kind: store.ChangeDeployment, Name: "chat", OldDeployment: dep(1, 1, 0, false), Deployment: scaled}, []string{
			"N Scaled: scaled from 1 to 3 replicas: queue depth 40 over 10 per replica",
			"N Ready: 1 of 3 replicas ready"}},
		{"spec changed", store.Change{Kind: store.ChangeDeployment, Name: "chat", OldDeployment: dep(1, 1, 1, false), Deployment: dep(2, 1, 1, false)}, []string{
			"N Changed: spec changed (generation 2): replicas are replaced"}},
		{"deleting, deleted", store.Change{Kind: store.ChangeDeployment, Name: "chat", OldDeployment: dep(1, 1, 1, false), Deployment: dep(1, 1, 1, true)}, []string{
			"N Deleting: deleting: its replicas stop"}},
		{"deleted", store.Change{Kind: store.ChangeDeployment, Name: "chat", OldDeployment: dep(1, 0, 0, true)}, []string{"N Deleted: deleted"}},
		{"queue created", store.Change{Kind: store.ChangeQueue, Name: "research", Queue: q(8, 1)}, []string{
			"N Created: created: guarantee 8 GPUs, borrow limit 2, weight 1, cohort lab"}},
		{"queue changed", store.Change{Kind: store.ChangeQueue, Name: "research", OldQueue: q(8, 1), Queue: q(16, 2)}, []string{
			"N Changed: changed: guarantee 16 GPUs, borrow limit 2, weight 2, cohort lab (was guarantee 8 GPUs, borrow limit 2, weight 1, cohort lab)"}},
		{"queue usage: nothing told", store.Change{Kind: store.ChangeQueue, Name: "research", OldQueue: q(8, 1), Queue: busy}, nil},
		{"queue deleted", store.Change{Kind: store.ChangeQueue, Name: "research", OldQueue: q(8, 1)}, []string{"N Deleted: deleted"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := told(t, &tt.ch)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("events (-want +got):\n%s", diff)
			}
		})
	}
}
