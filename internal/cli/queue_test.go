package cli

import (
	"strings"
	"testing"
	"time"

	"github.com/gangway/gangway/internal/api"
)

// TestGuaranteeAboveTheClusterLeavesDefaultRunning is the README's
// 'queue set --guarantee 64' on an 8-GPU cluster: the answer warns, the
// default queue's jobs run on the idle guarantee, and the guaranteed
// queue gets its GPUs back by preempting them.
func TestGuaranteeAboveTheClusterLeavesDefaultRunning(t *testing.T) {
	cl := startCluster(t, 1, 8)
	_, errOut, code := cl.run("queue", "set", "research", "--guarantee", "64")
	if code != 0 {
		t.Fatal(errOut)
	}
	if !strings.Contains(errOut, "warning: guaranteeGPUs: 64 is more than the 8 GPUs this cluster has now") {
		t.Errorf("queue set's warning = %q", errOut)
	}
	low := cl.submitYAML("ranks: 8\npreemptionGracePeriod: 1s\ncommand: [sh, -c, 'sleep 60']\n")
	cl.waitPhase(low, api.JobRunning, 15*time.Second)
	high := cl.submitYAML("queue: research\nranks: 8\ncommand: [sh, -c, 'sleep 60']\n")
	cl.waitPhase(high, api.JobRunning, 30*time.Second)
	d := cl.detail(low)
	if a := d.Job.Status.Attempts; len(a) == 0 || a[0].Outcome != api.OutcomePreempted || a[0].PreemptedFor != high {
		t.Fatalf("the default queue's job was not preempted for %s: %+v", high, a)
	}
	if !strings.Contains(d.Job.Status.Reason, "queue research guarantees 64 GPUs of this 8-GPU cluster") {
		t.Errorf("the default queue's job waits with reason %q; want it to name research's guarantee", d.Job.Status.Reason)
	}
	cl.run("cancel", low)
	cl.run("cancel", high)
}
