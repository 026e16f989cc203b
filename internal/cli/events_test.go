package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gangway/gangway/internal/api"
	"github.com/gangway/gangway/internal/api/client"
)

// start runs a gangway command against the cluster until ctx ends; done
// gets its exit status.
func (cl *cluster) start(ctx context.Context, stdout, stderr *lockedBuffer, args ...string) (done <-chan int) {
	ch := make(chan int, 1)
	env := &Env{Stdout: stdout, Stderr: stderr, Getenv: func(k string) string {
		if k == "GANGWAY_CONFIG" {
			return cl.config
		}
		return ""
	}}
	go func() { ch <- Main(ctx, args, env) }()
	return ch
}

// reasonsOf is the reasons of job id's events, oldest first.
func (cl *cluster) reasonsOf(id string) []string {
	cl.t.Helper()
	l, err := cl.c.Events(context.Background(), client.EventQuery{Job: id})
	if err != nil {
		cl.t.Fatal(err)
	}
	var out []string
	for _, e := range l.Events {
		out = append(out, e.Reason)
	}
	return out
}

// inOrder reports whether want appears in got in that order (other
// entries between).
func inOrder(got, want []string) bool {
	k := 0
	for _, g := range got {
		if k < len(want) && g == want[k] {
			k++
		}
	}
	return k == len(want)
}

// TestEventsTellAJobsLifeAndANodesLoss: a trainer's life is told in
// order, checkpoints included, by gangway events and at the end of
// describe job (with its elapsed time); a node killed under a second job
// is told on the node and on the job, which events -f shows as they come
// and which is restarted elsewhere; describe node ends with the node's
// events; a --since it cannot read is refused naming it; and the README's
// events examples run.
func TestEventsTellAJobsLifeAndANodesLoss(t *testing.T) {
	cl := startCluster(t, 3, 2)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	trainer := cl.submitYAML(fmt.Sprintf(`
name: trainer
ranks: 2
ranksPerNode: 1
timeLimit: 1h
command: [%s, train-example, --steps, "60", --checkpoint-every, "20", --step-delay, 10ms]
`, exe))
	cl.waitPhase(trainer, api.JobSucceeded, 60*time.Second)
	want := []string{api.ReasonSubmitted, api.ReasonScheduled, api.ReasonStarted, api.ReasonCheckpoint, api.ReasonSucceeded}
	cl.wait(10*time.Second, "the trainer's events", func() bool { return inOrder(cl.reasonsOf(trainer), want) })
	if got := cl.reasonsOf(trainer); slices.Contains(got, api.ReasonRestarted) || got[len(got)-1] != api.ReasonSucceeded {
		t.Errorf("trainer's events %q: want its life, ending Succeeded, no restart", got)
	}

	out, errOut, code := cl.run("events", "--job", trainer)
	if code != 0 {
		t.Fatalf("events --job: exit %d: %s", code, errOut)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if !strings.HasPrefix(lines[0], "AGE") || !strings.Contains(out, "job/"+trainer) || !strings.Contains(out, "Checkpoint") {
		t.Errorf("events --job %s:\n%s", trainer, out)
	}
	out, _, _ = cl.run("events", "--job", trainer, "-o", "json")
	var evs []api.Event
	if err := json.Unmarshal([]byte(out), &evs); err != nil || len(evs) != len(lines)-1 {
		t.Errorf("events -o json: %d events, %v; want the table's %d:\n%s", len(evs), err, len(lines)-1, out)
	}
	out, _, _ = cl.run("describe", "job", trainer)
	for _, s := range []string{"Elapsed:   ", " from its first placement to its end", "\nEvents:\n  Type    Reason", "Normal  Scheduled", "Normal  Succeeded"} {
		if !strings.Contains(out, s) {
			t.Errorf("describe job lacks %q:\n%s", s, out)
		}
	}

	// A job on one node, followed by events -f; its node dies.
	sleeper := cl.submitYAML("name: sleeper\nranks: 1\ngpusPerRank: 2\ncommand: [sleep, '300']\n")
	d := cl.waitPhase(sleeper, api.JobRunning, 20*time.Second)
	dead := d.Job.Status.Current().Placement[0].Node
	out, _, _ = cl.run("describe", "job", sleeper)
	if !strings.Contains(out, "Elapsed:   ") || !strings.Contains(out, "attempt 1 has run ") {
		t.Errorf("describe of a running job lacks its elapsed time:\n%s", out)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var fout, ferr lockedBuffer
	// The placement is in the log (the Recorder writes within a quarter
	// second, later under load); -f starts after it, printing it first.
	cl.wait(30*time.Second, "the sleeper's placement event", func() bool { return slices.Contains(cl.reasonsOf(sleeper), api.ReasonScheduled) })
	done := cl.start(ctx, &fout, &ferr, "events", "-f", "--job", sleeper)
	cl.wait(10*time.Second, "events -f to print the job's placement", func() bool { return strings.Contains(fout.String(), "Scheduled") })
	cl.stopAgent(dead)
	KillRanks(cl.agentDir(dead))
	cl.wait(30*time.Second, "events -f to print the node's loss and the restart", func() bool {
		o := fout.String()
		return strings.Contains(o, "Warning  NodeLost") && strings.Contains(o, "Restarted")
	})
	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Errorf("events -f ended %d on Ctrl-C; want 0: %s", code, ferr.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("events -f did not end with its context")
	}
	if o := fout.String(); strings.Count(o, "REASON") != 1 || strings.Index(o, "NodeLost") > strings.Index(o, "Restarted") {
		t.Errorf("events -f printed:\n%s", o)
	}
	d = cl.waitPhase(sleeper, api.JobRunning, 20*time.Second)
	if a := d.Job.Status.Current(); a.Number != 2 || a.Placement[0].Node == dead {
		t.Errorf("the sleeper runs attempt %d on %s; want attempt 2 off %s", a.Number, a.Placement[0].Node, dead)
	}
	out, _, _ = cl.run("describe", "node", dead)
	if !strings.Contains(out, "Normal   Registered") || !strings.Contains(out, "Warning  NodeLost") || strings.Contains(out, "Restarted") {
		t.Errorf("describe node %s: want its own events, Registered and NodeLost:\n%s", dead, out)
	}
	out, _, _ = cl.run("events", "--node", dead)
	if !strings.Contains(out, "node/"+dead) || !strings.Contains(out, "job/"+sleeper) {
		t.Errorf("events --node %s: want the node's and its job's:\n%s", dead, out)
	}

	if _, errOut, code := cl.run("events", "--since", "yesterday"); code != 2 || !strings.Contains(errOut, "--since") || !strings.Contains(errOut, "RFC 3339") {
		t.Errorf("events --since yesterday: exit %d, %q; want 2 naming --since and its forms", code, errOut)
	}

	// The README's examples, with this cluster's job and node.
	n := 0
	for _, words := range shellLines(t, "../../README.md") {
		if len(words) < 2 || words[0] != "gangway" || words[1] != "events" {
			continue
		}
		n++
		args := slices.Clone(words[1:])
		for i := 1; i < len(args); i++ {
			switch args[i-1] {
			case "--job":
				args[i] = trainer
			case "--node":
				args[i] = dead
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		var o, e lockedBuffer
		code := <-cl.start(ctx, &o, &e, args...)
		cancel()
		if code != 0 || o.String() == "" {
			t.Errorf("README: gangway %s: exit %d, printed %q: %s", strings.Join(args, " "), code, o.String(), e.String())
		}
	}
	if n < 3 {
		t.Errorf("the README has %d gangway events examples; want a few", n)
	}
}
