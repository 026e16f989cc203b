package cli

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gangway/gangway/internal/api"
	"github.com/gangway/gangway/internal/controlplane/controller"
	"github.com/gangway/gangway/internal/controlplane/server"
)

// TestPreflightKeepsSlowNodeOut: a 4-node gang's preflight finds the node
// whose links run at a fraction of the others' (n2, slowed by the probe's
// test hook as a degraded NIC would be), keeps it out and places the gang
// again; with a fifth node joined the new placement passes its own test
// and the job's command runs there, with no restart used and the test's
// cost on record.
func TestPreflightKeepsSlowNodeOut(t *testing.T) {
	slow := filepath.Join(t.TempDir(), "slow")
	if err := os.WriteFile(slow, []byte("n2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cl := startClusterWith(t, 0, 0, func(c *server.Config) {
		// Loopback links on a busy test host vary threefold from one
		// measure to the next, where a fabric's vary by a few percent:
		// the slow node runs at a hundredth of them and the bar is a
		// tenth of the median, not the default half.
		c.Preflight = controller.Preflight{MinNodes: 3, MinRatio: 0.1,
			Args: []string{"--slow-file", slow, "--bytes", "1048576", "--slow-gbps", "0.002"}}
	})
	for _, n := range []string{"n1", "n2", "n3", "n4"} {
		cl.startAgent(n, 1)
	}
	cl.waitNodes(4)
	id := cl.submitYAML("ranks: 4\ngpusPerRank: 1\nranksPerNode: 1\nmaxRestarts: 0\ncommand: [sleep, '300']\n")
	var d *api.JobDetail
	cl.wait(60*time.Second, "the first preflight to end", func() bool {
		d = cl.detail(id)
		return len(d.Job.Status.Attempts) > 0 && d.Job.Status.Attempts[0].Phase == api.AttemptEnded
	})
	a1 := d.Job.Status.Attempts[0]
	if a1.Preflight == nil || a1.Cause != api.CausePreflight || a1.Preflight.Passed {
		t.Fatalf("attempt 1: cause %q, preflight %+v; want a failed preflight", a1.Cause, a1.Preflight)
	}
	t.Logf("attempt 1: %s", a1.Reason)
	for _, pn := range a1.Preflight.Nodes {
		if pn.Excluded != (pn.Node == "n2") {
			t.Errorf("node %s excluded %v (score %.2f GB/s, median %.2f): want only n2 out", pn.Node, pn.Excluded, pn.GBps, a1.Preflight.MedianGBps)
		}
	}
	if !slices.Equal(d.Job.Status.Avoid, []string{"n2"}) || !strings.Contains(a1.Reason, "n2") {
		t.Errorf("avoid %v, reason %q; want n2 kept out, and said", d.Job.Status.Avoid, a1.Reason)
	}
	// Three nodes left for a 4-node gang: it waits, and runs once a
	// fifth joins, tested again on its new set.
	cl.startAgent("n5", 1)
	d = cl.waitPhase(id, api.JobRunning, 60*time.Second)
	cl.wait(60*time.Second, "the job's own command running", func() bool {
		d = cl.detail(id)
		a := d.Job.Status.Current()
		return a.Preflight == nil && !a.RunningAt.IsZero()
	})
	run := d.Job.Status.Current()
	if slices.Contains(run.Nodes(), "n2") {
		t.Errorf("the job runs on n2, which its preflight kept out: %v", run.Nodes())
	}
	prev := d.Job.Status.Attempts[len(d.Job.Status.Attempts)-2]
	if prev.Preflight == nil || !prev.Preflight.Passed || !slices.Equal(prev.Nodes(), run.Nodes()) {
		t.Errorf("the attempt before the run: preflight %+v on %v; want a pass on the run's nodes %v", prev.Preflight, prev.Nodes(), run.Nodes())
	}
	if d.Job.Status.Restarts != 0 {
		t.Errorf("restarts %d; a preflight uses up none", d.Job.Status.Restarts)
	}
	t.Logf("attempt %d: %s", prev.Number, prev.Reason)
	out, _, code := cl.run("describe", "job", id)
	t.Logf("describe job:\n%s", out)
	if code != 0 || !strings.Contains(out, "preflight") {
		t.Errorf("describe job (code %d) says nothing of the preflight:\n%s", code, out)
	}
}
