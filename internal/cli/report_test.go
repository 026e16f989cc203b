package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/gangway/gangway/internal/api"
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
		{[]string{"report", "usage", "--since", "7x"}, `--since: "7x" is not a duration (e.g. 30m, 24h, 7d), a date (2026-12-01) or an RFC 3339 time (2026-12-01T10:00:00Z)`},
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
			{Key: "research", Jobs: 41, GPUHours: 12416, UsefulGPUHours: 11630.2, Goodput: 11630.2 / 12416, RestartBackoffGangHours: 96,
				LostGPUHours: map[api.Cause]float64{api.CauseUserError: 59.8, api.CausePreempted: 22.4, api.CauseGPUFault: 301.5, api.CauseNodeLost: 402.1}},
			{Key: "prod", Jobs: 17, GPUHours: 3072, UsefulGPUHours: 3072, Goodput: 1},
		},
		Total: api.UsageRow{Key: "TOTAL", Jobs: 58, GPUHours: 15488, UsefulGPUHours: 14702.2, Goodput: 14702.2 / 15488, RestartBackoffGangHours: 96,
			LostGPUHours: map[api.Cause]float64{api.CauseUserError: 59.8, api.CausePreempted: 22.4, api.CauseGPUFault: 301.5, api.CauseNodeLost: 402.1}},
	}
	var b bytes.Buffer
	if err := printUsage(&b, rep); err != nil {
		t.Fatal(err)
	}
	want := `GPU-hours from 2026-12-01 09:00 to 2026-12-08 09:00, by queue
QUEUE     JOBS  GPU-HOURS   USEFUL  GOODPUT  NODE-LOST  GPU-FAULT  PREEMPTION  USER-ERROR  RESTART-BACKOFF*
research    41    12416.0  11630.2    93.7%      402.1      301.5        22.4        59.8              96.0
prod        17     3072.0   3072.0   100.0%          -          -           -           -                 -
TOTAL       58    15488.0  14702.2    94.9%      402.1      301.5        22.4        59.8              96.0
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
	if got := b.String(); !strings.Contains(got, "from the first attempt") || !strings.Contains(got, "TOTAL     0          -       -        -\n") {
		t.Errorf("an empty report:\n%s", got)
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
// a cluster that ran a job that succeeded and one that failed.
func TestReadmeReportUsage(t *testing.T) {
	lines := readmeLines(t, "gangway report usage")
	cl := startCluster(t, 1, 2)
	ok := cl.submitYAML("ranks: 2\ncommand: [\"true\"]\n")
	bad := cl.submitYAML("ranks: 1\nmaxRestarts: 0\ncommand: [\"false\"]\n")
	cl.waitPhase(ok, api.JobSucceeded, time.Minute)
	cl.waitPhase(bad, api.JobFailed, time.Minute)
	for _, args := range lines {
		out, errOut, code := cl.run(args[1:]...)
		t.Logf("%s\n%s", strings.Join(args, " "), out)
		if code != 0 {
			t.Errorf("%s: exit %d: %s", strings.Join(args, " "), code, errOut)
			continue
		}
		var rep api.UsageReport
		if json.Unmarshal([]byte(out), &rep) == nil {
			if rep.Total.Jobs != 2 || rep.Total.LostGPUHours[api.CauseUserError] <= 0 || rep.Total.UsefulGPUHours <= 0 {
				t.Errorf("%s: total %+v; want 2 jobs, useful hours and hours lost to user-error", strings.Join(args, " "), rep.Total)
			}
			continue
		}
		if !strings.Contains(out, "TOTAL") || !strings.Contains(out, "USER-ERROR") {
			t.Errorf("%s: no TOTAL row or USER-ERROR column:\n%s", strings.Join(args, " "), out)
		}
	}
}
