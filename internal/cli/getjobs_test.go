package cli

import (
	"bytes"
	"context"
	"encoding/csv"
	"strings"
	"testing"
	"time"

	"github.com/gangway/gangway/internal/api"
	"github.com/google/go-cmp/cmp"
)

// TestGetJobsRefusesBadFlags: what get jobs cannot do is named, with the
// flag, before any server is asked.
func TestGetJobsRefusesBadFlags(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"get", "jobs", "--since", "7x"}, `--since: "7x" is not a time: want how long ago (30m, 12h, 7d), an RFC 3339 time (2026-12-01T09:00:00Z) or a date (2026-12-01)`},
		{[]string{"get", "jobs", "--since", "-3h"}, `--since: "-3h" is negative`},
		{[]string{"get", "jobs", "--live", "--all"}, "give one or the other"},
		{[]string{"get", "jobs", "--watch", "--all"}, "--watch follows the jobs the store holds"},
		{[]string{"get", "jobs", "-w", "-o", "csv"}, "-o csv is for a list"},
		{[]string{"get", "nodes", "--all"}, "apply to the job list"},
		{[]string{"get", "nodes", "--watch"}, "apply to the job list"},
		{[]string{"get", "queues", "-o", "csv"}, "-o csv writes jobs"},
		{[]string{"get", "jobs", "-o", "xml"}, "want table, wide, json, yaml or csv"},
	} {
		var out, errb bytes.Buffer
		code := Main(context.Background(), tt.args, &Env{Stdout: &out, Stderr: &errb, Getenv: func(string) string { return "" }})
		if code != 2 || !strings.Contains(errb.String(), tt.want) {
			t.Errorf("%v: exit %d, stderr %q; want 2 and %q", tt.args, code, errb.String(), tt.want)
		}
	}
}

// TestJobsCSV: sacct's columns, times in RFC 3339 UTC, elapsed in seconds
// (to now for a job still running), nothing as an empty field, the
// reason whole; encoding/csv reads it back.
func TestJobsCSV(t *testing.T) {
	now := time.Date(2026, 12, 8, 12, 0, 0, 0, time.UTC)
	at := func(h float64) time.Time { return now.Add(time.Duration(h * float64(time.Hour))) }
	done := &api.Job{ID: "12", SubmittedAt: at(-30), Spec: api.JobSpec{Name: "train, big", User: "alice", Queue: "research", Ranks: 2, GPUsPerRank: 8},
		Status: api.JobStatus{Phase: api.JobFailed, Reason: `rank 1 exited 1: "oom"`, Restarts: 1, StartedAt: at(-29), FinishedAt: at(-2.5),
			Attempts: []api.Attempt{{Number: 1, Phase: api.AttemptEnded, Cause: api.CauseNodeLost}, {Number: 2, Phase: api.AttemptEnded, Cause: api.CauseUserError}}}}
	running := &api.Job{ID: "13", SubmittedAt: at(-1), Spec: api.JobSpec{Queue: "default", Ranks: 4, GPUMilli: 500},
		Array:  &api.ArrayTask{ID: "13", Index: 0, Count: 2},
		Status: api.JobStatus{Phase: api.JobRunning, StartedAt: at(-0.5), Attempts: []api.Attempt{{Number: 1, Phase: api.AttemptRunning}}}}
	waiting := &api.Job{ID: "14", SubmittedAt: at(-0.25), Spec: api.JobSpec{Queue: "default", Ranks: 1, GPUsPerRank: 1}, Status: api.JobStatus{Phase: api.JobPending, Reason: "waiting for 1 GPU"}}
	var b bytes.Buffer
	if err := jobsCSV(&b, []*api.Job{done, running, waiting}, now); err != nil {
		t.Fatal(err)
	}
	got, err := csv.NewReader(&b).ReadAll()
	if err != nil {
		t.Fatalf("the CSV does not parse: %v\n%s", err, b.String())
	}
	want := [][]string{
		{"id", "name", "user", "queue", "state", "gpus", "submitted", "started", "ended", "elapsed_s", "attempts", "restarts", "exit", "reason"},
		{"12", "train, big", "alice", "research", "Failed", "16", "2026-12-07T06:00:00Z", "2026-12-07T07:00:00Z", "2026-12-08T09:30:00Z", "95400", "2", "1", "user-error", `rank 1 exited 1: "oom"`},
		{"13", "[0]", "", "default", "Running", "2", "2026-12-08T11:00:00Z", "2026-12-08T11:30:00Z", "", "1800", "1", "0", "", ""},
		{"14", "", "", "default", "Pending", "1", "2026-12-08T11:45:00Z", "", "", "", "0", "0", "", "waiting for 1 GPU"},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("CSV (-want +got):\n%s", d)
	}
	rows := historyRows([]*api.Job{done}, now, false)
	if r := rows[0]; r[9] != "1-02:30:00" || r[1] != "train, big" || r[8] != at(-2.5).Local().Format("2006-01-02T15:04:05") {
		t.Errorf("table row %q; want elapsed 1-02:30:00 as sacct writes it and local times", r)
	}
}

func TestSlurmElapsed(t *testing.T) {
	for d, want := range map[time.Duration]string{0: "00:00:00", 90 * time.Second: "00:01:30", 25*time.Hour + 61*time.Second: "1-01:01:01", 10 * 24 * time.Hour: "10-00:00:00"} {
		if got := slurmElapsed(d); got != want {
			t.Errorf("slurmElapsed(%s) = %q; want %q", d, got, want)
		}
	}
}
