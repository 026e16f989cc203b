package server

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gangway/gangway/internal/api"
	"github.com/gangway/gangway/internal/api/client"
	"github.com/gangway/gangway/internal/base/wait"
)

func finding(check string, gpu int, status api.CheckStatus, action api.HealthAction, code int) api.HealthCheck {
	return api.HealthCheck{Check: check, GPU: gpu, Status: status, Action: action, Code: code, Message: "m"}
}

var (
	okXid   = finding("xid", -1, api.CheckOK, "", 0)
	xid79   = finding("xid", 2, api.CheckFatal, api.ActionCordonNode, 79)
	xid48   = finding("xid", 1, api.CheckFatal, api.ActionResetGPU, 48)
	hotWarn = finding("thermal", 0, api.CheckWarn, api.ActionCount, 0)
	ibDown  = finding("ib", -1, api.CheckFatal, api.ActionCordonNode, 0)
)

func healthNode() *api.Node {
	n := testNode("n1", "https://127.0.0.1:1", nil)
	n.GPUs = append(n.GPUs, api.GPU{Index: 2, UUID: "n1-2"})
	for i := range n.GPUs {
		n.GPUs[i].Health = api.GPUHealthy
	}
	return &n
}

func TestNodeHealth(t *testing.T) {
	t1 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	pol := healthPolicy{returnAfter: 10 * time.Minute, lemonFaults: 3, lemonWindow: 24 * time.Hour}
	type step struct {
		at      time.Duration // after t1
		checks  []api.HealthCheck
		changed bool
		fault   bool  // the node out of service
		faulty  []int // GPUs out of service
		healthy bool  // HealthyAt set
		lemon   bool
	}
	tests := []struct {
		name  string
		pol   healthPolicy
		steps []step
	}{{
		name: "warnings take nothing out",
		steps: []step{
			{checks: []api.HealthCheck{okXid, hotWarn}, changed: true},
			{at: time.Second, checks: []api.HealthCheck{okXid, hotWarn}},
		},
	}, {
		name: "xid 79 takes the node out; it returns after passing for the return delay",
		steps: []step{
			{checks: []api.HealthCheck{xid79}, changed: true, fault: true},
			{at: time.Second, checks: []api.HealthCheck{xid79}, fault: true},
			{at: time.Minute, checks: []api.HealthCheck{okXid}, changed: true, fault: true, healthy: true},
			{at: 5 * time.Minute, fault: true, healthy: true},
			{at: 11 * time.Minute, changed: true},
		},
	}, {
		name: "xid 48 takes GPU 1 out, not the node",
		steps: []step{
			{checks: []api.HealthCheck{okXid, xid48}, changed: true, faulty: []int{1}},
		},
	}, {
		name: "a fault again while passing restarts the return delay",
		steps: []step{
			{checks: []api.HealthCheck{ibDown}, changed: true, fault: true},
			{at: time.Minute, checks: []api.HealthCheck{okXid}, changed: true, fault: true, healthy: true},
			{at: 2 * time.Minute, checks: []api.HealthCheck{ibDown}, changed: true, fault: true},
			{at: 12 * time.Minute, fault: true},
		},
	}, {
		name: "a policy that leaves the return to an operator",
		pol:  healthPolicy{returnAfter: -1, lemonFaults: 3, lemonWindow: time.Hour},
		steps: []step{
			{checks: []api.HealthCheck{xid48}, changed: true, faulty: []int{1}},
			{at: time.Minute, checks: []api.HealthCheck{okXid}, changed: true, faulty: []int{1}, healthy: true},
			{at: 48 * time.Hour, faulty: []int{1}, healthy: true},
		},
	}, {
		name: "three faults in a day make a lemon, which does not return by itself",
		steps: []step{
			{checks: []api.HealthCheck{xid48}, changed: true, faulty: []int{1}},
			{at: time.Minute, checks: []api.HealthCheck{okXid}, changed: true, faulty: []int{1}, healthy: true},
			{at: 12 * time.Minute, changed: true},
			{at: 13 * time.Minute, checks: []api.HealthCheck{ibDown}, changed: true, fault: true},
			{at: 14 * time.Minute, checks: []api.HealthCheck{okXid}, changed: true, fault: true, healthy: true},
			{at: 25 * time.Minute, changed: true},
			{at: 26 * time.Minute, checks: []api.HealthCheck{xid79}, changed: true, fault: true, lemon: true},
			{at: 27 * time.Minute, checks: []api.HealthCheck{okXid}, changed: true, fault: true, healthy: true, lemon: true},
			{at: 48 * time.Hour, fault: true, healthy: true, lemon: true},
		},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := tt.pol
			if p == (healthPolicy{}) {
				p = pol
			}
			n := healthNode()
			for i, s := range tt.steps {
				changed := nodeHealth(n, s.checks, t1.Add(s.at), p)
				var faulty []int
				for _, g := range n.GPUs {
					if g.Health == api.GPUFaulty {
						faulty = append(faulty, g.Index)
					}
				}
				if changed != s.changed || (n.Status.Fault != "") != s.fault || len(faulty) != len(s.faulty) ||
					(len(faulty) > 0 && faulty[0] != s.faulty[0]) || !n.Status.HealthyAt.IsZero() != s.healthy || n.Status.Lemon != s.lemon {
					t.Fatalf("step %d (+%s): changed %v fault %q faulty GPUs %v healthy since %v lemon %v; want changed %v fault %v GPUs %v healthy %v lemon %v",
						i, s.at, changed, n.Status.Fault, faulty, n.Status.HealthyAt, n.Status.Lemon, s.changed, s.fault, s.faulty, s.healthy, s.lemon)
				}
			}
		})
	}
}

// TestRegistrationKeepsFaults: an agent restart is no clean bill of
// health; uncordon is.
func TestRegistrationKeepsFaults(t *testing.T) {
	now := time.Now()
	old := healthNode()
	nodeHealth(old, []api.HealthCheck{xid48, ibDown}, now, healthPolicy{returnAfter: time.Minute, lemonFaults: 3, lemonWindow: time.Hour})
	reg := healthNode()
	keepHealth(reg, old)
	if reg.Status.Fault == "" || reg.GPUs[1].Health != api.GPUFaulty || len(reg.Status.Faults) != 2 {
		t.Fatalf("re-registered: fault %q, GPU 1 %s, %d faults; want both faults kept", reg.Status.Fault, reg.GPUs[1].Health, len(reg.Status.Faults))
	}
	swapped := healthNode()
	swapped.GPUs[1].UUID = "a new board"
	keepHealth(swapped, old)
	if swapped.GPUs[1].Health != api.GPUHealthy {
		t.Errorf("a GPU replaced at index 1 inherited the old one's fault")
	}
	clearHealth(reg)
	if reg.Status.Fault != "" || !reg.GPUs[1].InService() || reg.Status.Lemon {
		t.Errorf("uncordoned: fault %q GPU 1 %s lemon %v; want all back", reg.Status.Fault, reg.GPUs[1].Health, reg.Status.Lemon)
	}
}

// TestGPUFaultRestartsGang: the loop through a real server: a fatal Xid on
// the GPU a rank runs on, reported in a heartbeat, takes that GPU out of
// service, stops the gang as interrupted by a GPU fault (no restart used
// up) and places its next attempt on the node's other GPUs.
func TestGPUFaultRestartsGang(t *testing.T) {
	e := startAgentEnv(t)
	c := e.node("n1")
	if err := e.register(c, testNode("n1", "https://127.0.0.1:1", nil)); err != nil {
		t.Fatal(err)
	}
	id, err := e.admin.SubmitID(e.ctx, []byte(`{"ranks": 1, "gpusPerRank": 1, "command": ["true"], "maxRestarts": 0}`))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(e.ctx, time.Minute)
	defer cancel()
	assigned := func(attempt int) api.Assignment {
		t.Helper()
		var got api.Assignment
		if err := wait.Until(ctx, 20*time.Millisecond, func() (bool, error) {
			l, err := c.Assignments(ctx, client.AssignmentQuery{Node: "n1"})
			for _, a := range l.Assignments {
				if a.JobID == id && a.Attempt == attempt {
					got = a
				}
			}
			return got.JobID != "", err
		}); err != nil {
			t.Fatalf("attempt %d never assigned: %v", attempt, err)
		}
		return got
	}
	a1 := assigned(1)
	gpu := a1.GPUs[0]
	running := api.RankStatus{JobID: id, Attempt: 1, Rank: 0, State: api.RankRunning, PID: 10, StartedAt: time.Now()}
	if _, err := c.Heartbeat(ctx, &api.Heartbeat{Node: "n1", SentAt: time.Now(), Ranks: []api.RankStatus{running}}); err != nil {
		t.Fatal(err)
	}
	bad := finding("xid", gpu, api.CheckFatal, api.ActionResetGPU, 48)
	if _, err := c.Heartbeat(ctx, &api.Heartbeat{Node: "n1", SentAt: time.Now(), Ranks: []api.RankStatus{running}, Health: []api.HealthCheck{bad}}); err != nil {
		t.Fatal(err)
	}
	n, err := e.admin.Node(ctx, "n1")
	if err != nil {
		t.Fatal(err)
	}
	if n.GPUs[gpu].Health != api.GPUFaulty || len(n.Status.Health) != 1 {
		t.Fatalf("after the Xid: GPU %d %q, %d checks recorded; want it faulty and the report stored", gpu, n.GPUs[gpu].Health, len(n.Status.Health))
	}
	// The rank dies of the stop; its agent says so.
	if err := wait.Until(ctx, 20*time.Millisecond, func() (bool, error) {
		d, err := e.admin.Job(ctx, id)
		if err != nil {
			return false, err
		}
		if a := d.Job.Status.Current(); a.Number == 1 && a.Phase == api.AttemptStopping {
			killed := running
			killed.State, killed.Signal, killed.FinishedAt = api.RankExited, "SIGTERM", time.Now()
			l, _ := c.Assignments(ctx, client.AssignmentQuery{Node: "n1"})
			_, err = c.Heartbeat(ctx, &api.Heartbeat{Node: "n1", SentAt: time.Now(), Ranks: []api.RankStatus{killed}, AckRevision: l.Revision})
			return false, err
		}
		return len(d.Job.Status.Attempts) > 1, nil
	}); err != nil {
		t.Fatalf("the GPU fault never restarted the gang: %v", err)
	}
	d, err := e.admin.Job(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	first := d.Job.Status.Attempts[0]
	if first.Outcome != api.OutcomeInterrupted || first.Cause != api.CauseGPUFault || d.Job.Status.Restarts != 0 {
		t.Errorf("attempt 1: %s, cause %q (%s), restarts %d; want interrupted by a GPU fault, no restart used", first.Outcome, first.Cause, first.Reason, d.Job.Status.Restarts)
	}
	if a2 := assigned(2); a2.GPUs[0] == gpu {
		t.Errorf("attempt 2 placed on GPU %d, which is out of service", gpu)
	}
	// Told as events: the GPU out of service, the attempt it ended, the
	// restart.
	evs := waitEvents(t, e.admin, client.EventQuery{Node: "n1"}, "n1 GPUFault", id+" GPUFault", id+" Restarted")
	if g := evs[slices.Index(eventLines(evs), "n1 GPUFault")]; g.Type != api.EventWarning || !strings.Contains(g.Message, fmt.Sprintf("GPU %d ", gpu)) {
		t.Errorf("the node's GPUFault event: %+v; want a warning naming GPU %d", g, gpu)
	}
}

// TestLemonKeptOutOfMultiNodeGangs: a node whose GPUs faulted LemonFaults
// times keeps serving with its other GPUs, but a gang that spans nodes is
// placed around it, though best fit alone would pick its last free GPU.
func TestLemonKeptOutOfMultiNodeGangs(t *testing.T) {
	e := startAgentEnv(t)
	four := func(name string) api.Node {
		n := testNode(name, "https://127.0.0.1:1", nil)
		for i := 2; i < 4; i++ {
			n.GPUs = append(n.GPUs, api.GPU{Index: i, UUID: fmt.Sprintf("%s-%d", name, i), Model: "H100", MemoryBytes: 80 << 30})
		}
		return n
	}
	var lemon *client.Client
	for _, name := range []string{"n1", "n2", "n3"} {
		c := e.node(name)
		if err := e.register(c, four(name)); err != nil {
			t.Fatal(err)
		}
		if name == "n1" {
			lemon = c
		}
	}
	var report []api.HealthCheck
	for g := range 3 {
		report = append(report, finding("xid", g, api.CheckFatal, api.ActionResetGPU, 48))
		if _, err := lemon.Heartbeat(e.ctx, &api.Heartbeat{Node: "n1", SentAt: time.Now(), Health: slices.Clone(report)}); err != nil {
			t.Fatal(err)
		}
	}
	n, err := e.admin.Node(e.ctx, "n1")
	if err != nil {
		t.Fatal(err)
	}
	if !n.Status.Lemon || n.Status.Fault != "" || !n.GPUs[3].InService() {
		t.Fatalf("n1 after three GPU faults: lemon %v, fault %q, GPU 3 %q; want a lemon still serving with GPU 3", n.Status.Lemon, n.Status.Fault, n.GPUs[3].Health)
	}
	id, err := e.admin.SubmitID(e.ctx, []byte(`{"ranks": 2, "ranksPerNode": 1, "gpusPerRank": 1, "command": ["true"]}`))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(e.ctx, 30*time.Second)
	defer cancel()
	var nodes []string
	if err := wait.Until(ctx, 20*time.Millisecond, func() (bool, error) {
		d, err := e.admin.Job(ctx, id)
		if err != nil {
			return false, err
		}
		if a := d.Job.Status.Current(); a != nil {
			nodes = a.Nodes()
		}
		return len(nodes) > 0, nil
	}); err != nil {
		t.Fatalf("the gang was never placed: %v", err)
	}
	if slices.Contains(nodes, "n1") {
		t.Errorf("a two-node gang was placed on %v, including the lemon n1", nodes)
	}
}
