package cli

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gangway/gangway/internal/api"
	"github.com/gangway/gangway/internal/node/health"
)

// TestHealthFaultMovesGang runs each check's path on a live cluster whose
// agents check fake GPUs: a fault injected as NVML would report it, the
// agent's report, the GPU or node out of service, and the gang stopped and
// placed around it without using a restart; a mere warning moves nothing.
// describe node shows the check's result either way.
func TestHealthFaultMovesGang(t *testing.T) {
	tests := []struct {
		name   string
		inject string // %d: the rank's GPU
		check  string
		// node: the whole node leaves service; gpu: only the GPU; neither:
		// a warning, the gang stays.
		node, gpu bool
	}{
		{"xid 79 takes the node out", `{"gpu":%d,"xid":79}`, "xid", true, false},
		{"xid 48 takes the GPU out", `{"gpu":%d,"xid":48}`, "xid", false, true},
		{"a double-bit ECC error takes the GPU out", `{"gpu":%d,"ecc_dbe":1}`, "ecc", false, true},
		{"an NVLink going down takes the GPU out", `{"gpu":%d,"nvlink_down":1}`, "nvlink", false, true},
		{"heat only warns", `{"gpu":%d,"temp":95}`, "thermal", false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cl := startClusterWith(t, 0, 0, nil)
			cl.fakes = map[string]*health.Fake{}
			for _, n := range []string{"n1", "n2"} {
				cl.startAgent(n, 2)
			}
			cl.waitNodes(2)
			id := cl.submitYAML("ranks: 1\ngpusPerRank: 1\nmaxRestarts: 0\ncommand: [sleep, '300']\n")
			d := cl.waitPhase(id, api.JobRunning, 30*time.Second)
			p := d.Job.Status.Current().Placement[0]
			node, g := p.Node, p.GPUs[0]
			if err := cl.fakes[node].Inject(fmt.Sprintf(tt.inject, g)); err != nil {
				t.Fatal(err)
			}
			var n *api.Node
			cl.wait(20*time.Second, "the finding to reach the server", func() bool {
				var err error
				if n, err = cl.c.Node(t.Context(), node); err != nil {
					return false
				}
				for _, h := range n.Status.Health {
					if h.Check == tt.check && h.GPU == g && h.Status != api.CheckOK {
						return true
					}
				}
				return false
			})
			out, _, code := cl.run("describe", "node", node)
			if code != 0 || !strings.Contains(out, "Checks:") || !strings.Contains(out, tt.check) {
				t.Errorf("describe node %s (code %d) shows no %s check:\n%s", node, code, tt.check, out)
			}
			if !tt.node && !tt.gpu {
				time.Sleep(time.Second) // a heartbeat or more: nothing may move
				d := cl.detail(id)
				if n, _ := cl.c.Node(t.Context(), node); n.Status.Fault != "" || !n.GPUs[g].InService() || len(d.Job.Status.Attempts) != 1 {
					t.Errorf("a warning moved things: node fault %q, GPU %q, %d attempts", n.Status.Fault, n.GPUs[g].Health, len(d.Job.Status.Attempts))
				}
				return
			}
			cl.wait(20*time.Second, "the gang running again", func() bool {
				d = cl.detail(id)
				a := d.Job.Status.Current()
				return a.Number == 2 && a.Phase == api.AttemptRunning
			})
			n, _ = cl.c.Node(t.Context(), node)
			if tt.node && n.Status.Fault == "" {
				t.Errorf("node %s still in service after %s", node, tt.inject)
			}
			if tt.gpu && (n.Status.Fault != "" || n.GPUs[g].InService()) {
				t.Errorf("after %s: node fault %q, GPU %d %q; want only the GPU out", tt.inject, n.Status.Fault, g, n.GPUs[g].Health)
			}
			first, again := d.Job.Status.Attempts[0], d.Job.Status.Current().Placement[0]
			// Every fault here is a GPU's, even the one that takes its
			// node out: node-fault is for the node's own checks.
			want := api.CauseGPUFault
			if first.Outcome != api.OutcomeInterrupted || first.Cause != want || d.Job.Status.Restarts != 0 {
				t.Errorf("attempt 1 ended %s (%s: %s), %d restarts; want interrupted by %s, none used", first.Outcome, first.Cause, first.Reason, d.Job.Status.Restarts, want)
			}
			if again.Node == node && (tt.node || slices.Contains(again.GPUs, g)) {
				t.Errorf("attempt 2 placed on %s GPU %v, which is out of service", again.Node, again.GPUs)
			}
			out, _, _ = cl.run("describe", "job", id)
			if !strings.Contains(out, "interrupted: "+string(want)) {
				t.Errorf("describe job does not show the cause %s:\n%s", want, out)
			}
		})
	}
}

// TestHangTimeoutRestartsSilentGang: a gang whose progress stops for its
// hangTimeout is stopped and restarted (cause hang, a restart counted, as
// the program's own failure), and describe job shows the timeout.
func TestHangTimeoutRestartsSilentGang(t *testing.T) {
	cl := startCluster(t, 1, 2)
	id := cl.submitYAML(`ranks: 1
gpusPerRank: 1
maxRestarts: 1
hangTimeout: 2s
restartBackoff: 100ms
command: [sh, -c, 'echo "{\"step\": 1}" >> "$GANGWAY_PROGRESS_FILE"; exec sleep 300']
`)
	var d *api.JobDetail
	cl.wait(30*time.Second, "the silent gang restarted", func() bool {
		d = cl.detail(id)
		return len(d.Job.Status.Attempts) >= 2
	})
	first := d.Job.Status.Attempts[0]
	if api.CauseOf(&first) != api.CauseHang || !strings.Contains(first.Reason, "no progress for") || d.Job.Status.Restarts != 1 {
		t.Errorf("attempt 1 ended %s (%s: %s), %d restarts; want a hang, one restart counted", first.Outcome, api.CauseOf(&first), first.Reason, d.Job.Status.Restarts)
	}
	out, _, _ := cl.run("describe", "job", id)
	if !strings.Contains(out, "hang timeout 2s") || !strings.Contains(out, "failed: hang") {
		t.Errorf("describe job shows neither the hang timeout nor the cause:\n%s", out)
	}
}
