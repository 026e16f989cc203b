package cli

import (
	"strings"
	"testing"
	"time"

	"github.com/gangway/gangway/internal/api"
)

// A drain, as Slurm's: the node takes no new ranks, its running gang
// finishes there, and the command returns once the node is empty; with
// --timeout the gangs still running then are moved.
func TestDrainLetsGangsFinish(t *testing.T) {
	cl := startCluster(t, 2, 8)
	placed := func(id string) string {
		var node string
		cl.wait(15*time.Second, "job "+id+" running", func() bool {
			if a := cl.detail(id).Job.Status.Current(); a != nil && a.Phase == api.AttemptRunning {
				node = a.Placement[0].Node
				return true
			}
			return false
		})
		return node
	}
	short := cl.submitYAML("ranks: 1\ncommand: [sh, -c, 'sleep 3']\n")
	node := placed(short)
	out, errOut, code := cl.run("drain", node, "--reason", "new PSU")
	if code != 0 {
		t.Fatalf("drain: %d %s", code, errOut)
	}
	if !strings.Contains(out, "still running: job "+short) || !strings.Contains(out, "node "+node+": drained") {
		t.Errorf("drain said:\n%s", out)
	}
	d := cl.detail(short)
	if d.Job.Status.Phase != api.JobSucceeded || len(d.Job.Status.Attempts) != 1 {
		t.Errorf("the gang was not let finish: %s after %d attempts", d.Job.Status.Phase, len(d.Job.Status.Attempts))
	}
	if out, _, _ := cl.run("get", "nodes"); !strings.Contains(out, "Draining(new PSU)") {
		t.Errorf("get nodes does not show the drain and its reason:\n%s", out)
	}
	// Nothing new lands on it.
	next := cl.submitYAML("ranks: 1\ncommand: [sh, -c, 'sleep 60']\n")
	if n := placed(next); n == node {
		t.Fatalf("job %s placed on the draining node %s", next, node)
	}
	cl.run("uncordon", node)

	other := cl.detail(next).Job.Status.Current().Placement[0].Node
	out, errOut, code = cl.run("drain", other, "--timeout", "2s")
	if code != 0 {
		t.Fatalf("drain --timeout: %d %s", code, errOut)
	}
	d = cl.detail(next)
	if a := d.Job.Status.Attempts[0]; a.Outcome != api.OutcomeInterrupted || !strings.Contains(a.Reason, "draining") || d.Job.Status.Restarts != 0 {
		t.Errorf("after the timeout: attempt 1 %s (%s), restarts %d; want it moved, not charged", a.Outcome, a.Reason, d.Job.Status.Restarts)
	}
	for _, bad := range [][]string{{"drain", other, "--timeout", "soon"}, {"drain", other, "--now", "--timeout", "5m"}} {
		if _, errOut, code := cl.run(bad...); code != 2 || !strings.Contains(errOut, "--timeout") {
			t.Errorf("%q: code %d, %q", bad, code, errOut)
		}
	}
	cl.run("cancel", next)
}
