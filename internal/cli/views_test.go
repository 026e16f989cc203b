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
	"github.com/gangway/gangway/internal/node/agent"
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
		// A line per change: the reason it waits may change too, so a
		// phase may have several lines, but in order and none twice.
		if p := slices.Compact(phasesOf(got, id)); !slices.Equal(p, []string{"Pending", "Running", "Succeeded"}) {
			t.Errorf("job %s's phases, line by line: %q; want Pending, Running, Succeeded", id, p)
		}
		// The blocker ended before the job ran: the wakes since did not
		// print its unchanged line again.
		if p := phasesOf(got, blocker); p[len(p)-1] != "Cancelled" || slices.Index(p, "Cancelled") != len(p)-1 {
			t.Errorf("the blocker's lines: %q; want one Cancelled, last", p)
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

// topNodes and topJobs are `gangway top nodes|jobs -o json`.
func (cl *cluster) topNodes() map[string]nodeTop {
	cl.t.Helper()
	out, errOut, code := cl.run("top", "nodes", "-o", "json")
	var rows []nodeTop
	if code != 0 || json.Unmarshal([]byte(out), &rows) != nil {
		cl.t.Fatalf("top nodes -o json: exit %d: %s%s", code, out, errOut)
	}
	m := map[string]nodeTop{}
	for _, r := range rows {
		m[r.Name] = r
	}
	return m
}

func (cl *cluster) topJobs() map[string]api.JobTop {
	cl.t.Helper()
	out, errOut, code := cl.run("top", "jobs", "-o", "json")
	var rows []api.JobTop
	if code != 0 || json.Unmarshal([]byte(out), &rows) != nil {
		cl.t.Fatalf("top jobs -o json: exit %d: %s%s", code, out, errOut)
	}
	m := map[string]api.JobTop{}
	for _, r := range rows {
		m[r.ID] = r
	}
	return m
}

// cells are the fields of the line of a table that begins with first.
func cells(table, first string) []string {
	for _, line := range strings.Split(table, "\n") {
		if f := strings.Fields(line); len(f) > 0 && f[0] == first {
			return f
		}
	}
	return nil
}

// TestReadmeGetNodesAndTop runs the README's `gangway get nodes` and
// `gangway top nodes|jobs` on a node of two fake GPUs, whose readings
// follow load: idle, then one GPU held by a rank that reports progress,
// then idle again once it is cancelled. The used and free counts, the
// utilisation and the job's step, loss and token rate follow.
func TestReadmeGetNodesAndTop(t *testing.T) {
	readme := map[string][]string{}
	for _, l := range [][]string{readmeLines(t, "gangway get nodes")[0], readmeLines(t, "gangway top nodes")[0], readmeLines(t, "gangway top jobs")[0]} {
		readme[strings.Join(l[:3], " ")] = l[1:]
	}
	cl := startCluster(t, 0, 0)
	cl.adjustAgent = func(c *agent.Config) { c.GPUMetricsInterval = 50 * time.Millisecond }
	cl.startAgent("n1", 2)
	cl.waitNodes(1)
	run := func(name string) string {
		t.Helper()
		out, errOut, code := cl.run(readme[name]...)
		if code != 0 {
			t.Fatalf("%s: exit %d: %s", name, code, errOut)
		}
		t.Logf("%s\n%s", name, out)
		return out
	}

	cl.wait(30*time.Second, "readings of both idle GPUs", func() bool { n := cl.topNodes()["n1"]; return n.Sampled == 2 })
	idle := cl.topNodes()["n1"]
	if idle.UsedGPUs != 0 || idle.UtilPercent != 0 || idle.GPUs != 2 || idle.MemUsedMiB != 1024 || idle.PowerW <= 0 {
		t.Errorf("idle node: %+v; want 0 of 2 GPUs used, 0%% utilisation, 512 MiB used on each, some power", idle)
	}
	if c := cells(run("gangway get nodes"), "n1"); len(c) < 5 || c[2] != "2" || c[3] != "0" || c[4] != "2" {
		t.Errorf("get nodes, idle: n1's cells %q; want 2 GPUs, 0 used, 2 free", c)
	}
	if c := cells(run("gangway top nodes"), "n1"); len(c) < 4 || c[2] != "0/2" || c[3] != "0%" {
		t.Errorf("top nodes, idle: n1's cells %q; want 0/2 GPUs used, 0%%", c)
	}

	// Two progress lines a second apart, 2,000 tokens between them.
	id := cl.submitYAML(`name: busy
ranks: 1
gpusPerRank: 1
command: ["sh", "-c", "echo '{\"step\":1,\"loss\":0.75,\"tokens\":1000,\"time\":\"2026-12-01T09:00:00Z\"}' >> $GANGWAY_PROGRESS_FILE; echo '{\"step\":2,\"loss\":0.5,\"tokens\":3000,\"time\":\"2026-12-01T09:00:01Z\"}' >> $GANGWAY_PROGRESS_FILE; exec sleep 300"]
`)
	cl.waitPhase(id, api.JobRunning, 30*time.Second)
	cl.wait(30*time.Second, "the job's GPU to read busy and its progress to come", func() bool {
		j, ok := cl.topJobs()[id]
		return ok && j.Sampled == 1 && j.UtilPercent > 0 && j.Step == 2
	})
	job := cl.topJobs()[id]
	if job.UtilPercent < 90 || job.MemUsedMiB < 40000 || job.Loss == nil || *job.Loss != 0.5 || job.TokensPerSec != 2000 || job.GPUs != 1 || job.Name != "busy" {
		t.Errorf("top jobs: %+v; want the busy fake GPU (over 90%%, three quarters of 80 GB), step 2, loss 0.5, 2000 tokens/s", job)
	}
	busy := cl.topNodes()["n1"]
	if busy.UsedGPUs != 1 || busy.UtilPercent <= idle.UtilPercent || busy.MemUsedMiB <= idle.MemUsedMiB || busy.PowerW <= idle.PowerW || busy.MaxTempC <= idle.MaxTempC {
		t.Errorf("busy node: %+v; want 1 GPU used and more utilisation, memory, power and heat than idle (%+v)", busy, idle)
	}
	if c := cells(run("gangway get nodes"), "n1"); len(c) < 5 || c[3] != "1" || c[4] != "1" {
		t.Errorf("get nodes, busy: n1's cells %q; want 1 used, 1 free", c)
	}
	if c := cells(run("gangway top nodes"), "n1"); len(c) < 4 || c[2] != "1/2" || c[3] == "0%" {
		t.Errorf("top nodes, busy: n1's cells %q; want 1/2 GPUs used, some utilisation", c)
	}
	if c := cells(run("gangway top jobs"), id); len(c) < 11 || c[1] != "busy" || c[4] != "1" || c[5] != "n1" || c[9] != "2" || c[10] != "0.5" || c[11] != "2000" {
		t.Errorf("top jobs: %s's cells %q; want busy on 1 GPU of n1, step 2, loss 0.5, 2000 tokens/s", id, c)
	}

	if _, errOut, code := cl.run("cancel", id); code != 0 {
		t.Fatalf("cancel: %s", errOut)
	}
	cl.waitPhase(id, api.JobCancelled, 30*time.Second)
	cl.wait(30*time.Second, "the GPU to read idle again", func() bool { return cl.topNodes()["n1"].UtilPercent == 0 })
	if n := cl.topNodes()["n1"]; n.UsedGPUs != 0 {
		t.Errorf("after the job: %+v; want no GPU used", n)
	}
	if jobs := cl.topJobs(); len(jobs) != 0 {
		t.Errorf("top jobs after the job: %+v; want none running", jobs)
	}
}
