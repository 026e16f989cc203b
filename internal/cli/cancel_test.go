package cli

import (
	"strings"
	"testing"
	"time"

	"github.com/gangway/gangway/internal/api"
)

// cancel takes several IDs, or picks jobs as scancel does; a failed
// cancel fails the command, naming the job.
func TestCancelSeveralAndByFilter(t *testing.T) {
	cl := startCluster(t, 1, 8)
	sleep := func(name string) string {
		return cl.submitYAML("name: " + name + "\nranks: 1\ncommand: [sh, -c, 'sleep 60']\n")
	}
	a1, a2, b := sleep("a"), sleep("a"), sleep("b")
	out, errOut, code := cl.run("cancel", a1, a2)
	if code != 0 || !strings.Contains(out, "job "+a1+": cancel requested") || !strings.Contains(out, "job "+a2+": cancel requested") {
		t.Fatalf("cancel %s %s: %d %q %q", a1, a2, code, out, errOut)
	}
	cl.waitPhase(a1, api.JobCancelled, 20*time.Second)
	cl.waitPhase(a2, api.JobCancelled, 20*time.Second)
	if d := cl.detail(b); d.Job.Status.Phase.Final() {
		t.Fatalf("job %s (b) ended: %s", b, d.Job.Status.Phase)
	}
	if out, _, code := cl.run("cancel", "--name", "a"); code != 0 || !strings.Contains(out, "no unfinished job matches") {
		t.Errorf("cancel --name a again: %d %q", code, out)
	}
	if out, _, code := cl.run("cancel", "--name", "b", "--state", "running"); code != 0 || !strings.Contains(out, "job "+b+":") {
		t.Errorf("cancel --name b --state running: %d %q", code, out)
	}
	cl.waitPhase(b, api.JobCancelled, 20*time.Second)
	if _, errOut, code := cl.run("cancel", "99999"); code != 1 || !strings.Contains(errOut, "99999") {
		t.Errorf("cancel of no such job: %d %q", code, errOut)
	}
	if _, errOut, code := cl.run("cancel", "--state", "sleepy"); code != 2 || !strings.Contains(errOut, "--state") {
		t.Errorf("cancel --state sleepy: %d %q", code, errOut)
	}
}
