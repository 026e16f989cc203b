package cli

import (
	"fmt"
	"os"
	"path/filepath"
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

// taskLogs lists rank 0's stdout files of job id on the cluster's one node.
func (cl *cluster) taskLogs(id string) []string {
	names, _ := filepath.Glob(filepath.Join(cl.agentDir("n1"), "tasks", "*", id+".1.0", "stdout.log*"))
	return names
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
