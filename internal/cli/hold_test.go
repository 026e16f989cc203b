package cli

import (
	"strings"
	"testing"
	"time"

	"github.com/gangway/gangway/internal/api"
)

// hold and release as Slurm's: a held job waits, saying so and how to let
// it go, until released; sbatch --hold submits one held; a running job
// cannot be held, and a job not held cannot be released.
func TestHoldAndRelease(t *testing.T) {
	cl := startCluster(t, 1, 4)
	out, errOut, code := cl.run("submit", "--parsable", "--hold", "-J", "held", "--wrap", "true")
	if code != 0 {
		t.Fatalf("submit --hold: %d %s", code, errOut)
	}
	id := strings.TrimSpace(out)
	cl.wait(10*time.Second, "the held job to say it is held", func() bool {
		d := cl.detail(id)
		return d.Job.Status.Phase == api.JobPending && strings.Contains(d.Job.Status.Reason, "held: nothing places it until gangway release "+id)
	})
	time.Sleep(500 * time.Millisecond) // passes go by; it stays put
	if d := cl.detail(id); d.Job.Status.Phase != api.JobPending || len(d.Job.Status.Attempts) != 0 {
		t.Fatalf("held job %s: %s, %d attempts", id, d.Job.Status.Phase, len(d.Job.Status.Attempts))
	}
	if out, errOut, code := cl.run("release", "job/"+id); code != 0 || !strings.Contains(out, "job "+id+": released") {
		t.Fatalf("release: %d %q %q", code, out, errOut)
	}
	cl.waitPhase(id, api.JobSucceeded, 20*time.Second)
	if _, errOut, code := cl.run("release", id); code != 1 || !strings.Contains(errOut, "already Succeeded") && !strings.Contains(errOut, "not held") {
		t.Errorf("release of a finished job: %d %q", code, errOut)
	}

	// gangway hold of a waiting job: a gang too big waits, is held, and
	// its reason says so; a running one cannot be held.
	running := cl.submitYAML("ranks: 1\ncommand: [sh, -c, 'sleep 30']\n")
	cl.wait(15*time.Second, "job "+running+" running", func() bool { return cl.detail(running).Job.Status.Phase == api.JobRunning })
	if _, errOut, code := cl.run("hold", running); code != 1 || !strings.Contains(errOut, "only a waiting job can be held") {
		t.Errorf("hold of a running job: %d %q", code, errOut)
	}
	waiting := cl.submitYAML("ranks: 1\ngpusPerRank: 4\ncommand: [sh, -c, 'true']\n")
	if out, errOut, code := cl.run("hold", waiting); code != 0 || !strings.Contains(out, "job "+waiting+": held") {
		t.Fatalf("hold: %d %q %q", code, out, errOut)
	}
	cl.run("cancel", running)
	cl.waitPhase(running, api.JobCancelled, 20*time.Second)
	// The GPUs are free now; the held job stays put, and its reason (a
	// reason is rewritten at most every 5 s) comes to say it is held.
	cl.wait(15*time.Second, "the held job's reason", func() bool {
		d := cl.detail(waiting)
		if d.Job.Status.Phase != api.JobPending {
			t.Fatalf("held job %s after the GPUs freed: %s", waiting, d.Job.Status.Phase)
		}
		return strings.Contains(d.Job.Status.Reason, "held: nothing places it")
	})
	cl.run("release", waiting)
	cl.waitPhase(waiting, api.JobSucceeded, 20*time.Second)
}
