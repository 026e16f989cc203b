package cli

import (
	"bytes"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/gangway/gangway/internal/api"
)

// requeue as Slurm's scontrol requeue: a running trainer gets its
// checkpoint signal, stops once it has checkpointed, and waits again under
// its ID, its attempt ended for "requeued" without using up a restart; it
// resumes from that checkpoint. A finished job is refused, saying to
// resubmit it; scontrol requeue (the stand-in a Slurm job's ranks find)
// is the same command.
func TestRequeue(t *testing.T) {
	cl := startCluster(t, 1, 4)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	id := cl.submitYAML(fmt.Sprintf(`
name: trainer
ranks: 2
checkpointSignal: SIGUSR1
preemptionGracePeriod: 20s
command: [%s, train-example, --steps, "150", --checkpoint-every, "0", --step-delay, 20ms]
`, exe))
	cl.wait(30*time.Second, "the trainer making progress", func() bool {
		d := cl.detail(id)
		return d.Progress != nil && d.Progress.Latest.Step >= 20
	})
	out, errOut, code := cl.run("requeue", "job/"+id)
	if code != 0 || !strings.Contains(out, "job "+id+": requeue requested") {
		t.Fatalf("requeue %s: %d %q %q", id, code, out, errOut)
	}
	d := cl.waitPhase(id, api.JobSucceeded, 90*time.Second)
	atts := d.Job.Status.Attempts
	if len(atts) != 2 || atts[0].Outcome != api.OutcomeRequeued || atts[0].Cause != api.CauseRequeued || atts[0].RequeuedAt.IsZero() {
		t.Fatalf("attempts after a requeue: %+v", atts)
	}
	if !strings.Contains(atts[0].Reason, "requeued by user after checkpointing") {
		t.Errorf("attempt 1 was not stopped by its checkpoint: %q", atts[0].Reason)
	}
	if atts[1].ResumeFrom == nil || atts[1].ResumeFrom.Step < 20 {
		t.Errorf("attempt 2 resumed from %+v; want the SIGUSR1 checkpoint", atts[1].ResumeFrom)
	}
	if d.Job.Status.Restarts != 0 || d.Job.Status.RequeueRequested {
		t.Errorf("after a requeue: %d restarts, requeueRequested %v", d.Job.Status.Restarts, d.Job.Status.RequeueRequested)
	}
	want := []string{api.ReasonStarted, api.ReasonRequeuing, api.ReasonCheckpoint, api.ReasonRequeued, api.ReasonRestarted, api.ReasonSucceeded}
	cl.wait(10*time.Second, "the trainer's events: requeued after its checkpoint", func() bool { return inOrder(cl.reasonsOf(id), want) })

	if _, errOut, code := cl.run("requeue", id); code != 1 || !strings.Contains(errOut, "job "+id+" has finished (Succeeded); resubmit it") {
		t.Errorf("requeue of a finished job: %d %q", code, errOut)
	}
	waiting := cl.submitYAML("ranks: 1\nhold: true\ncommand: [sh, -c, 'true']\n")
	var o, e bytes.Buffer
	if code := Shim("scontrol", []string{"requeue", waiting + "," + id}, cl.env(&o, &e)); code != 1 ||
		!strings.Contains(e.String(), "job "+waiting+" is Pending, waiting to be placed: only a running job can be requeued") ||
		!strings.Contains(e.String(), "resubmit it") {
		t.Errorf("scontrol requeue %s,%s: %d %q %q", waiting, id, code, o.String(), e.String())
	}
}

// cancel --signal as scancel --signal: every rank of a running job gets
// the signal, by name or number, and the job runs on; a signal gangway
// does not deliver is refused, listing those it does.
func TestCancelSignal(t *testing.T) {
	cl := startCluster(t, 1, 4)
	id := cl.submitYAML(`ranks: 2
command: [sh, -c, 'trap "echo got USR2 $RANK" USR2; trap "echo got TERM $RANK" TERM; echo ready; while :; do sleep 0.05; done']
`)
	cl.wait(20*time.Second, "both ranks running", func() bool { return !cl.detail(id).Job.Status.Current().RunningAt.IsZero() })
	if out, errOut, code := cl.run("cancel", "--signal", "usr2", id); code != 0 || !strings.Contains(out, "job "+id+": SIGUSR2 requested for every rank") {
		t.Fatalf("cancel --signal usr2: %d %q %q", code, out, errOut)
	}
	logs := func(rank string) string { out, _, _ := cl.run("logs", id, "--rank", rank); return out }
	cl.wait(20*time.Second, "both ranks to get SIGUSR2", func() bool {
		return strings.Contains(logs("0"), "got USR2 0") && strings.Contains(logs("1"), "got USR2 1")
	})
	if _, errOut, code := cl.run("cancel", "-s", "15", id); code != 0 {
		t.Fatalf("cancel -s 15: %d %q", code, errOut)
	}
	cl.wait(20*time.Second, "both ranks to get SIGTERM", func() bool {
		return strings.Contains(logs("0"), "got TERM 0") && strings.Contains(logs("1"), "got TERM 1")
	})
	if d := cl.detail(id); d.Job.Status.Phase != api.JobRunning || len(d.Job.Status.Attempts) != 1 {
		t.Fatalf("after two signals: %s, %d attempts (%s)", d.Job.Status.Phase, len(d.Job.Status.Attempts), d.Job.Status.Reason)
	}
	if n := strings.Count(logs("0"), "got USR2"); n != 1 {
		t.Errorf("rank 0 got SIGUSR2 %d times; want once", n)
	}
	if _, errOut, code := cl.run("cancel", "--signal", "KILL", id); code != 2 || !strings.Contains(errOut, "--signal") || !strings.Contains(errOut, "want one of HUP, INT, USR1, USR2, TERM") {
		t.Errorf("cancel --signal KILL: %d %q", code, errOut)
	}
	cl.run("cancel", id)
	cl.waitPhase(id, api.JobCancelled, 20*time.Second)
	if _, errOut, code := cl.run("cancel", "--signal", "USR1", id); code != 1 || !strings.Contains(errOut, "has finished (Cancelled); nothing to signal") {
		t.Errorf("cancel --signal of a finished job: %d %q", code, errOut)
	}
}
