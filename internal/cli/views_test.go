package cli

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gangway/gangway/internal/api"
	"github.com/gangway/gangway/internal/controlplane/server"
)

// runUntil runs a gangway command against the cluster until ctx ends,
// its output in out; the channel gets its exit status.
func (cl *cluster) runUntil(ctx context.Context, out *lockedBuffer, args ...string) <-chan int {
	var errOut lockedBuffer
	env := cl.env(out, &errOut)
	done := make(chan int, 1)
	go func() {
		code := Main(ctx, args, env)
		if code != 0 {
			cl.t.Logf("gangway %s: exit %d: %s", strings.Join(args, " "), code, errOut.String())
		}
		done <- code
	}()
	return done
}

// phasesOf are the PHASE cells of job id's lines in a get jobs table, in
// the order printed.
func phasesOf(table, id string) []string {
	var out []string
	for _, line := range strings.Split(table, "\n") {
		f := strings.Fields(line)
		if len(f) > 4 && f[0] == id {
			out = append(out, f[4])
		}
	}
	return out
}

// TestReadmeGetJobsWatch runs the README's `gangway get jobs --watch`: it
// prints the list, then a line each time the job changes: Pending while
// another job holds the only GPU, Running once that one is cancelled,
// Succeeded once it is let finish; and exits 0 when its context ends
// (Ctrl-C).
func TestReadmeGetJobsWatch(t *testing.T) {
	lines := readmeLines(t, "gangway get jobs --watch")
	cl := startCluster(t, 1, 1)
	for _, args := range lines {
		blocker := cl.submitYAML("ranks: 1\ncommand: [sleep, \"300\"]\n")
		cl.waitPhase(blocker, api.JobRunning, time.Minute)
		ctx, cancel := context.WithCancel(context.Background())
		var out lockedBuffer
		done := cl.runUntil(ctx, &out, args[1:]...)
		cl.wait(30*time.Second, "the watch to list the blocker", func() bool { return slices.Contains(phasesOf(out.String(), blocker), "Running") })
		mark := filepath.Join(t.TempDir(), "finish")
		id := cl.submitYAML("name: watched\nranks: 1\ncommand: [sh, -c, 'while [ ! -e " + mark + " ]; do sleep 0.05; done']\n")
		cl.wait(30*time.Second, "a Pending line", func() bool { return slices.Contains(phasesOf(out.String(), id), "Pending") })
		if _, errOut, code := cl.run("cancel", blocker); code != 0 {
			t.Fatalf("cancel: %s", errOut)
		}
		cl.wait(30*time.Second, "a Running line", func() bool { return slices.Contains(phasesOf(out.String(), id), "Running") })
		if err := os.WriteFile(mark, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		cl.wait(30*time.Second, "a Succeeded line", func() bool { return slices.Contains(phasesOf(out.String(), id), "Succeeded") })
		cancel()
		if code := <-done; code != 0 {
			t.Errorf("%s ended by its context: exit %d; want 0", strings.Join(args, " "), code)
		}
		got := out.String()
		t.Logf("%s\n%s", strings.Join(args, " "), got)
		if !strings.HasPrefix(got, "ID ") || strings.Count(got, "ID ") != 1 {
			t.Errorf("want one header, first:\n%s", got)
		}
		if p := phasesOf(got, id); !slices.Equal(p, []string{"Pending", "Running", "Succeeded"}) {
			t.Errorf("job %s's lines: %q; want one each, Pending, Running, Succeeded", id, p)
		}
		if p := phasesOf(got, blocker); p[len(p)-1] != "Cancelled" {
			t.Errorf("the blocker's lines: %q; want it Cancelled last", p)
		}
	}
}

// TestReadmeGetJobsAll runs the README's `gangway get jobs --all --since`
// lines, as a table, CSV and JSON, on a server whose retention has moved
// a finished job to its job archive: each lists it (sacct finds a job
// Slurm's controller forgot), with the jobs the store holds, newest first.
func TestReadmeGetJobsAll(t *testing.T) {
	lines := readmeLines(t, "gangway get jobs --all")
	archive := filepath.Join(t.TempDir(), "jobs.jsonl")
	cl := startClusterWith(t, 1, 2, func(c *server.Config) {
		c.MaxFinishedJobs, c.RetentionTick, c.JobArchive.Path = 1, 50*time.Millisecond, archive
	})
	old := cl.submitYAML("name: old\nranks: 2\ncommand: [\"true\"]\n")
	cl.waitPhase(old, api.JobSucceeded, time.Minute)
	newer := cl.submitYAML("name: newer\nranks: 1\nmaxRestarts: 0\ncommand: [\"false\"]\n")
	cl.waitPhase(newer, api.JobFailed, time.Minute)
	cl.wait(30*time.Second, "the old job to move to the archive", func() bool { return cl.detail(old).Archived })
	if out, _, _ := cl.run("get", "jobs"); len(phasesOf(out, old)) != 0 {
		t.Fatalf("get jobs (the store's) still lists archived job %s:\n%s", old, out)
	}
	for _, args := range lines {
		cmdline := strings.Join(args, " ")
		out, errOut, code := cl.run(args[1:]...)
		t.Logf("%s\n%s", cmdline, out)
		if code != 0 {
			t.Fatalf("%s: exit %d: %s", cmdline, code, errOut)
		}
		head := strings.Fields(strings.SplitN(out, "\n", 2)[0])
		if !slices.Equal(head, historyHead) {
			t.Errorf("%s: header %q; want sacct's columns %q", cmdline, head, historyHead)
		}
		if p, q := phasesOf(out, newer), phasesOf(out, old); !slices.Equal(p, []string{"Failed"}) || !slices.Equal(q, []string{"Succeeded"}) ||
			strings.Index(out, "\n"+newer+" ") > strings.Index(out, "\n"+old+" ") {
			t.Errorf("%s: want %s Failed, then the archived %s Succeeded", cmdline, newer, old)
		}

		out, errOut, code = cl.run(append(args[1:], "-o", "csv")...)
		if code != 0 {
			t.Fatalf("%s -o csv: exit %d: %s", cmdline, code, errOut)
		}
		recs, err := csv.NewReader(strings.NewReader(out)).ReadAll()
		if err != nil {
			t.Fatalf("%s -o csv: %v\n%s", cmdline, err, out)
		}
		if !slices.Equal(recs[0], jobsCSVHead) {
			t.Errorf("%s -o csv: header %q; want %q", cmdline, recs[0], jobsCSVHead)
		}
		var got [][]string
		for _, r := range recs[1:] {
			got = append(got, []string{r[0], r[1], r[4], r[5], r[12]}) // id, name, state, gpus, exit
			if _, err := time.Parse(time.RFC3339, r[8]); err != nil {
				t.Errorf("%s -o csv: job %s ended %q: %v", cmdline, r[0], r[8], err)
			}
		}
		want := [][]string{{newer, "newer", "Failed", "1", "user-error"}, {old, "old", "Succeeded", "2", "succeeded"}}
		if !slices.EqualFunc(want, got, slices.Equal) {
			t.Errorf("%s -o csv: rows %q; want %q", cmdline, got, want)
		}

		out, errOut, code = cl.run(append(args[1:], "-o", "json")...)
		var jobs []*api.Job
		if code != 0 || json.Unmarshal([]byte(out), &jobs) != nil || len(jobs) != 2 || jobs[1].ID != old || jobs[1].Spec.Name != "old" {
			t.Errorf("%s -o json: exit %d, %s%s; want the two jobs, the archived last", cmdline, code, out, errOut)
		}
	}
}
