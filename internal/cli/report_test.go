package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gangway/gangway/internal/api"
	"github.com/google/go-cmp/cmp"
)

// TestReportUsageRefusesBadFlags: a bad --by or --since is named before
// any server is asked.
func TestReportUsageRefusesBadFlags(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"report"}, "Usage: gangway report usage"},
		{[]string{"report", "cost"}, "Usage: gangway report usage"},
		{[]string{"report", "usage", "--by", "team"}, `--by: "team" is not one of queue, user, job`},
		{[]string{"report", "usage", "--since", "7x"}, `--since: "7x" is not a time: want how long ago (30m, 12h, 7d), an RFC 3339 time (2026-12-01T09:00:00Z) or a date (2026-12-01)`},
		{[]string{"report", "usage", "extra"}, `unexpected argument "extra"`},
	} {
		var out, errb bytes.Buffer
		code := Main(context.Background(), tt.args, &Env{Stdout: &out, Stderr: &errb, Getenv: func(string) string { return "" }})
		if code != 2 || !strings.Contains(errb.String(), tt.want) {
			t.Errorf("%v: exit %d, stderr %q; want 2 and %q", tt.args, code, errb.String(), tt.want)
		}
	}
}

// TestPrintUsage: a column per cause some row lost work to, in a fixed
// order, running and backoff only when there are any, and a TOTAL row.
func TestPrintUsage(t *testing.T) {
	since := time.Date(2026, 12, 1, 9, 0, 0, 0, time.Local)
	rep := api.UsageReport{Since: since, Until: since.Add(7 * 24 * time.Hour), By: api.UsageByQueue,
		Rows: []api.UsageRow{
			{Key: "research", Jobs: 41, GPUHours: 12416, UsefulGPUHours: 11630.2, Goodput: 11630.2 / 12416, RestartBackoffGangHours: 96, Restarts: 9, PendingHours: 14.2,
				LostGPUHours: map[api.Cause]float64{api.CauseUserError: 59.8, api.CausePreempted: 22.4, api.CauseGPUFault: 301.5, api.CauseNodeLost: 402.1}},
			{Key: "prod", Jobs: 17, GPUHours: 3072, UsefulGPUHours: 3072, Goodput: 1, PendingHours: 1.5},
		},
		Total: api.UsageRow{Key: "TOTAL", Jobs: 58, GPUHours: 15488, UsefulGPUHours: 14702.2, Goodput: 14702.2 / 15488, RestartBackoffGangHours: 96, Restarts: 9, PendingHours: 15.7,
			LostGPUHours: map[api.Cause]float64{api.CauseUserError: 59.8, api.CausePreempted: 22.4, api.CauseGPUFault: 301.5, api.CauseNodeLost: 402.1}},
	}
	var b bytes.Buffer
	if err := printUsage(&b, rep); err != nil {
		t.Fatal(err)
	}
	want := `GPU-hours from 2026-12-01 09:00 to 2026-12-08 09:00, by queue
QUEUE     JOBS  GPU-HOURS   USEFUL  GOODPUT  NODE-LOST  GPU-FAULT  PREEMPTION  USER-ERROR  RESTARTS  RESTART-BACKOFF*  PENDING-H
research    41    12416.0  11630.2    93.7%      402.1      301.5        22.4        59.8         9              96.0       14.2
prod        17     3072.0   3072.0   100.0%          -          -           -           -         -                 -        1.5
TOTAL       58    15488.0  14702.2    94.9%      402.1      301.5        22.4        59.8         9              96.0       15.7
* gang-hours, not GPU-hours: the wait between an attempt's end and the next one's start, times the GPUs asked for
`
	if got := b.String(); got != want {
		t.Errorf("table:\n%s\nwant:\n%s", got, want)
	}
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(readme), strings.Join(strings.Split(want, "\n")[:5], "\n")) {
		t.Error("the README's example table is not what printUsage writes for its figures")
	}

	b.Reset()
	if err := printUsage(&b, api.UsageReport{By: api.UsageByUser, Until: since, Rows: []api.UsageRow{}, Total: api.UsageRow{Key: "TOTAL"}}); err != nil {
		t.Fatal(err)
	}
	if got := b.String(); !strings.Contains(got, "from the first attempt") || !strings.Contains(got, "TOTAL     0          -       -        -         -          -\n") {
		t.Errorf("an empty report:\n%s", got)
	}
}

// usageCSVHeader is the header of report usage -o csv by queue: fixed,
// whatever the figures.
var usageCSVHeader = []string{"queue", "jobs", "gpu_hours", "useful_gpu_hours", "goodput",
	"lost_node_lost_gpu_hours", "lost_fenced_gpu_hours", "lost_gpu_fault_gpu_hours", "lost_node_fault_gpu_hours", "lost_hang_gpu_hours",
	"lost_straggler_gpu_hours", "lost_preflight_gpu_hours", "lost_preemption_gpu_hours", "lost_drain_gpu_hours", "lost_requeued_gpu_hours", "lost_time_limit_gpu_hours",
	"lost_user_error_gpu_hours", "lost_cancelled_gpu_hours", "lost_other_gpu_hours",
	"running_gpu_hours", "restarts", "restart_backoff_gang_hours", "pending_hours"}

// TestUsageCSV: a header that does not depend on the figures, a row per
// key with figures in full, no TOTAL; a cause this CLI does not know gets
// a column after the rest.
func TestUsageCSV(t *testing.T) {
	rep := api.UsageReport{By: api.UsageByQueue, Rows: []api.UsageRow{
		{Key: "research, big", Jobs: 3, GPUHours: 10.25, UsefulGPUHours: 8, Goodput: 0.8, Restarts: 2, PendingHours: 0.125,
			LostGPUHours: map[api.Cause]float64{api.CauseNodeLost: 2, "cosmic-ray": 0.25}},
		{Key: "prod", Jobs: 1, GPUHours: 1, UsefulGPUHours: 1, Goodput: 1},
	}, Total: api.UsageRow{Key: "TOTAL", Jobs: 4}}
	var b bytes.Buffer
	if err := usageCSV(&b, rep); err != nil {
		t.Fatal(err)
	}
	got, err := csv.NewReader(&b).ReadAll()
	if err != nil {
		t.Fatalf("the CSV does not parse: %v", err)
	}
	head := append(slices.Clone(usageCSVHeader), "lost_cosmic_ray_gpu_hours")
	zeros := func(n int) []string { return slices.Repeat([]string{"0"}, n) }
	// key, jobs, GPU-hours, useful, goodput, 14 known causes, running,
	// restarts, backoff, pending, then cosmic-ray
	research := append(append([]string{"research, big", "3", "10.25", "8", "0.8", "2"}, zeros(13)...), "0", "2", "0", "0.125", "0.25")
	prod := append(append([]string{"prod", "1", "1", "1", "1"}, zeros(14)...), "0", "0", "0", "0", "0")
	if d := cmp.Diff([][]string{head, research, prod}, got); d != "" {
		t.Errorf("CSV (-want +got):\n%s", d)
	}
}

// readmeLines are the README's command lines that start with prefix, its
// comments cut off, split into arguments.
func readmeLines(t *testing.T, prefix string) [][]string {
	t.Helper()
	f, err := os.Open("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out [][]string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if !strings.HasPrefix(line, prefix) {
			continue
		}
		if i := strings.Index(line, "#"); i >= 0 {
			line = line[:i]
		}
		out = append(out, strings.Fields(line))
	}
	if len(out) == 0 {
		t.Fatalf("the README shows no %q line", prefix)
	}
	return out
}

// TestReadmeReportUsage runs the README's `gangway report usage` lines on
// a cluster that ran a job that succeeded after waiting for another's
// GPUs (cancelled), one that failed once and then succeeded, and one that
// failed: each format shows the GPU-hours lost to user error, the restart
// and the wait.
func TestReadmeReportUsage(t *testing.T) {
	lines := readmeLines(t, "gangway report usage")
	cl := startCluster(t, 1, 2)
	blocker := cl.submitYAML("ranks: 2\ncommand: [sleep, \"300\"]\n")
	cl.waitPhase(blocker, api.JobRunning, time.Minute)
	waiter := cl.submitYAML("ranks: 2\ncommand: [\"true\"]\n")
	if _, errOut, code := cl.run("cancel", blocker); code != 0 {
		t.Fatalf("cancel: %s", errOut)
	}
	cl.waitPhase(waiter, api.JobSucceeded, time.Minute)
	mark := filepath.Join(t.TempDir(), "failed-once")
	flaky := cl.submitYAML("ranks: 1\nmaxRestarts: 1\ncommand: [sh, -c, 'test -e " + mark + " || { touch " + mark + "; exit 1; }']\n")
	bad := cl.submitYAML("ranks: 1\nmaxRestarts: 0\ncommand: [\"false\"]\n")
	cl.waitPhase(flaky, api.JobSucceeded, time.Minute)
	cl.waitPhase(bad, api.JobFailed, time.Minute)
	for _, args := range lines {
		cmdline := strings.Join(args, " ")
		out, errOut, code := cl.run(args[1:]...)
		t.Logf("%s\n%s", cmdline, out)
		if code != 0 {
			t.Errorf("%s: exit %d: %s", cmdline, code, errOut)
			continue
		}
		switch {
		case slices.Contains(args, "json"):
			var rep api.UsageReport
			if err := json.Unmarshal([]byte(out), &rep); err != nil {
				t.Errorf("%s: %v", cmdline, err)
				continue
			}
			if tot := rep.Total; tot.Jobs != 4 || tot.LostGPUHours[api.CauseUserError] <= 0 || tot.UsefulGPUHours <= 0 || tot.Restarts != 1 || tot.PendingHours <= 0 {
				t.Errorf("%s: total %+v; want 4 jobs, useful hours, hours lost to user-error, 1 restart and some pending time", cmdline, tot)
			}
		case slices.Contains(args, "csv"):
			recs, err := csv.NewReader(strings.NewReader(out)).ReadAll()
			if err != nil || len(recs) < 2 {
				t.Errorf("%s: %d records, %v; want a header and rows", cmdline, len(recs), err)
				continue
			}
			head := recs[0]
			if by := args[slices.Index(args, "--by")+1]; head[0] != by || !slices.Equal(head[1:], usageCSVHeader[1:]) {
				t.Errorf("%s: header %q; want %s then %q", cmdline, head, by, usageCSVHeader[1:])
			}
			col := func(name string) int { return slices.Index(head, name) }
			jobs, restarts, pending, userErr := 0, 0, 0.0, 0.0
			for _, r := range recs[1:] {
				n, _ := strconv.Atoi(r[col("jobs")])
				k, _ := strconv.Atoi(r[col("restarts")])
				p, _ := strconv.ParseFloat(r[col("pending_hours")], 64)
				u, _ := strconv.ParseFloat(r[col("lost_user_error_gpu_hours")], 64)
				jobs, restarts, pending, userErr = jobs+n, restarts+k, pending+p, userErr+u
			}
			if jobs != 4 || restarts != 1 || pending <= 0 || userErr <= 0 {
				t.Errorf("%s: rows add up to %d jobs, %d restarts, %g pending hours, %g lost to user error; want 4, 1, some, some", cmdline, jobs, restarts, pending, userErr)
			}
		default:
			for _, col := range []string{"TOTAL", "USER-ERROR", "RESTARTS", "PENDING-H"} {
				if !strings.Contains(out, col) {
					t.Errorf("%s: no %s:\n%s", cmdline, col, out)
				}
			}
		}
	}
}
