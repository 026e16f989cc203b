package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gangway/gangway/internal/api"
)

// seqLines is what `seq 1 n` prints.
func seqLines(n int) string {
	var b strings.Builder
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&b, "%d\n", i)
	}
	return b.String()
}

// taskLogs lists rank 0's stdout files of job id on the cluster's one
// node, without their line-time indexes (.times).
func (cl *cluster) taskLogs(id string) []string {
	names, _ := filepath.Glob(filepath.Join(cl.agentDir("n1"), "tasks", "*", id+".1.0", "stdout.log*"))
	return slices.DeleteFunc(names, func(n string) bool { return strings.HasSuffix(n, ".times") })
}

// TestClusterBoundsRankLogsPerJob floods a rank's stdout far past the job's
// spec.logs: the node keeps at most maxFiles × maxFileBytes, the newest
// output, and gangway logs prints all of it in order.
func TestClusterBoundsRankLogsPerJob(t *testing.T) {
	cl := startCluster(t, 1, 8)
	const n = 100000 // 588,895 bytes
	id := cl.submitYAML(fmt.Sprintf(`
name: flood
ranks: 1
logs: {maxFileBytes: 1024, maxFiles: 3}
command: [seq, 1, "%d"]
`, n))
	cl.waitPhase(id, api.JobSucceeded, 20*time.Second)
	names := cl.taskLogs(id)
	var total int64
	for _, name := range names {
		fi, err := os.Stat(name)
		if err != nil {
			t.Fatal(err)
		}
		total += fi.Size()
	}
	// No slack: the supervisor splits the output at the bound.
	if len(names) != 3 || total > 3*1024 || total <= 2*1024 {
		t.Errorf("%d files of %d bytes in all: %v; want 3 files, (2048, 3072] bytes", len(names), total, names)
	}
	out, errOut, code := cl.run("logs", id, "--rank", "0")
	if code != 0 {
		t.Fatalf("logs: %s", errOut)
	}
	if int64(len(out)) != total || !strings.HasSuffix(seqLines(n), out) {
		t.Errorf("gangway logs printed %d bytes ending %q; want the newest %d bytes of the output", len(out), out[max(0, len(out)-20):], total)
	}
}

// TestClusterFollowsLogsAcrossRotations follows a rank's stdout while it
// writes many rotations' worth (all of it retained): the follower prints
// every line once, in order.
func TestClusterFollowsLogsAcrossRotations(t *testing.T) {
	cl := startCluster(t, 1, 8)
	gate := t.TempDir()
	// 28,893 bytes in three bursts: 29 files of 1 KiB, all kept.
	id := cl.submitYAML(fmt.Sprintf(`
name: chatty
ranks: 1
logs: {maxFileBytes: 1024, maxFiles: 40}
command: [sh, -c, 'seq 1 2000; while [ ! -e %[1]s/1 ]; do sleep 0.01; done; seq 2001 4000; while [ ! -e %[1]s/2 ]; do sleep 0.01; done; seq 4001 6000']
`, gate))
	cl.wait(20*time.Second, "the first burst's rotations", func() bool { return len(cl.taskLogs(id)) >= 5 })
	followed := cl.runAsync("logs", id, "--rank", "0", "-f")
	for i, files := range []int{10, 20} {
		if err := os.WriteFile(filepath.Join(gate, fmt.Sprint(i+1)), nil, 0o644); err != nil {
			t.Fatal(err)
		}
		cl.wait(20*time.Second, "the next burst's rotations", func() bool { return len(cl.taskLogs(id)) >= files })
	}
	var r runResult
	select {
	case r = <-followed:
	case <-time.After(30 * time.Second):
		t.Fatal("gangway logs -f did not end with the rank")
	}
	if r.code != 0 {
		t.Fatalf("logs -f: %s", r.errOut)
	}
	if want := seqLines(6000); r.out != want {
		t.Errorf("logs -f printed %d bytes; want %d (every line once, in order)", len(r.out), len(want))
	}
}

// TestLogsKubectlFlags: --all-ranks prefixes every rank's lines, --tail
// keeps each rank's last lines (with -f too), --previous shows the attempt
// before the newest, and job/ID is taken for ID.
func TestLogsKubectlFlags(t *testing.T) {
	cl := startCluster(t, 1, 8)
	id := cl.submitYAML(`
name: kubectl
ranks: 2
restartBackoff: 100ms
command: [sh, -c, 'seq 1 5 | sed "s/^/r$RANK a$GANGWAY_ATTEMPT /"; echo oops >&2; [ "$GANGWAY_ATTEMPT" = 2 ]']
`)
	cl.waitPhase(id, api.JobSucceeded, 30*time.Second)
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"all ranks", []string{"--all-ranks", "--stdout", "--tail", "2"}, "[rank 0] r0 a2 4\n[rank 0] r0 a2 5\n[rank 1] r1 a2 4\n[rank 1] r1 a2 5\n"},
		{"tail of both streams", []string{"--rank", "1", "--tail", "2"}, "r1 a2 5\n[stderr] oops\n"},
		{"tail of stderr", []string{"--stderr", "--tail", "1"}, "oops\n"},
		{"previous", []string{"--previous", "--stdout", "--tail", "1"}, "r0 a1 5\n"},
		{"kind/name", []string{"--rank", "1", "--stdout", "--tail", "1", "-f"}, "r1 a2 5\n"},
		{"all ranks followed", []string{"--all-ranks", "--stdout", "--tail", "1", "-f", "--attempt", "1"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			job := id
			if tc.name == "kind/name" {
				job = "job/" + id
			}
			out, errOut, code := cl.run(append([]string{"logs", job}, tc.args...)...)
			if code != 0 {
				t.Fatalf("logs %v: %s", tc.args, errOut)
			}
			if tc.name == "all ranks followed" {
				// Interleaved as they come: each rank's line, in either order.
				if lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n"); len(lines) != 2 ||
					!strings.Contains(out, "[rank 0] r0 a1 5\n") || !strings.Contains(out, "[rank 1] r1 a1 5\n") {
					t.Errorf("logs %v = %q; want each rank's last line of attempt 1", tc.args, out)
				}
				return
			}
			if out != tc.want {
				t.Errorf("logs %v = %q; want %q", tc.args, out, tc.want)
			}
		})
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--previous", "--attempt", "1"}, "--previous and --attempt"},
		{[]string{"--all-ranks", "--rank", "1"}, "--all-ranks and --rank"},
		{[]string{"--tail", "-1"}, "--tail"},
	} {
		if _, errOut, code := cl.run(append([]string{"logs", id}, tc.args...)...); code != 2 || !strings.Contains(errOut, tc.want) {
			t.Errorf("logs %v: code %d, %q; want 2 naming %q", tc.args, code, errOut, tc.want)
		}
	}
	one := cl.submitYAML("ranks: 1\ncommand: [true]\n")
	cl.waitPhase(one, api.JobSucceeded, 20*time.Second)
	if _, errOut, code := cl.run("logs", one, "--previous"); code != 1 || !strings.Contains(errOut, "no previous attempt") {
		t.Errorf("logs --previous of a job with one attempt: code %d, %q", code, errOut)
	}
}
