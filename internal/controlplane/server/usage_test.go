package server

import (
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gangway/gangway/internal/api"
	"github.com/gangway/gangway/internal/api/client"
)

// TestUsageReport: GET /v1/reports/usage adds up the stored jobs'
// attempts (and, asked, the archived ones'); an admin or a viewer sees
// everyone's, a user only their own, and bad parameters are named.
func TestUsageReport(t *testing.T) {
	archive := filepath.Join(t.TempDir(), "jobs.jsonl")
	e := startAgentEnvWith(t, func(c *Config) { c.JobArchive.Path = archive })
	alice, bob := e.user("alice", api.RoleUser), e.user("bob", api.RoleUser)
	carol := e.user("carol", api.RoleViewer)
	// Finished jobs as the controller leaves them: alice's ran an hour
	// on 8 GPUs and succeeded; bob's lost a node after 30 minutes, having
	// checkpointed at 20, and its second attempt finished the work.
	start := time.Now().Add(-3 * time.Hour).Truncate(time.Second)
	m := func(n int) time.Time { return start.Add(time.Duration(n) * time.Minute) }
	store := func(user, queue string, as ...api.Attempt) string {
		t.Helper()
		j, err := e.s.st.NewJob(e.ctx, api.JobSpec{Ranks: 2, GPUsPerRank: 4, Queue: queue, User: user, Command: []string{"train"}}, start)
		if err != nil {
			t.Fatal(err)
		}
		j.Status = api.JobStatus{Phase: api.JobSucceeded, Attempts: as, FinishedAt: as[len(as)-1].EndedAt}
		if err := e.s.st.CreateJobAs(e.ctx, j, nil); err != nil {
			t.Fatal(err)
		}
		return j.ID
	}
	attempt := func(n, from, to int, outcome api.Outcome, cause api.Cause, resume *api.Checkpoint) api.Attempt {
		return api.Attempt{Number: n, Phase: api.AttemptEnded, Outcome: outcome, Cause: cause, ResumeFrom: resume,
			CreatedAt: m(from), RunningAt: m(from), StoppingAt: m(to), EndedAt: m(to)}
	}
	aliceJob := store("alice", "research", attempt(1, 0, 60, api.OutcomeSucceeded, api.CauseSucceeded, nil))
	store("bob", "research",
		attempt(1, 0, 30, api.OutcomeFailed, api.CauseNodeLost, nil),
		attempt(2, 40, 80, api.OutcomeSucceeded, api.CauseSucceeded, &api.Checkpoint{Step: 20, Attempt: 1, Time: m(20)}))
	old := api.JobDetail{Job: api.Job{ID: "9000", Spec: api.JobSpec{Ranks: 1, GPUsPerRank: 1, Queue: "archive", User: "alice"},
		Status: api.JobStatus{Phase: api.JobFailed, Attempts: []api.Attempt{attempt(1, 0, 60, api.OutcomeFailed, api.CauseUserError, nil)}}}}
	line, err := json.Marshal(&old)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(archive, append(line, '\n'), 0o644); err != nil {
		t.Fatal(err)
	}

	keys := func(r api.UsageReport) string {
		var ks []string
		for _, row := range r.Rows {
			ks = append(ks, row.Key)
		}
		return strings.Join(ks, ",")
	}
	rep, err := e.admin.Usage(e.ctx, client.UsageQuery{By: api.UsageByUser, Since: "1d"})
	if err != nil {
		t.Fatal(err)
	}
	if keys(rep) != "bob,alice" || rep.By != api.UsageByUser {
		t.Fatalf("admin by user: rows %s by %s; want bob, alice", keys(rep), rep.By)
	}
	bobRow := rep.Rows[0]
	wantLost := map[api.Cause]float64{api.CauseNodeLost: 10 * 8 / 60.0}
	if !near(bobRow.GPUHours, 70*8/60.0) || !near(bobRow.UsefulGPUHours, 60*8/60.0) || !equalHours(bobRow.LostGPUHours, wantLost) ||
		!near(bobRow.RestartBackoffGangHours, 10*8/60.0) {
		t.Errorf("bob's row: %+v; want 9.33 GPU-hours, 8 useful, 1.33 lost to node-lost, 1.33 gang-hours of backoff", bobRow)
	}
	if rep.Total.Jobs != 2 || !near(rep.Total.GPUHours, 130*8/60.0) {
		t.Errorf("total: %+v; want 2 jobs, 17.33 GPU-hours", rep.Total)
	}

	// A viewer sees everyone's; a user sees their own, by default too.
	for _, c := range []struct {
		name string
		c    *client.Client
		q    client.UsageQuery
		want string
	}{
		{"a viewer", carol, client.UsageQuery{By: api.UsageByUser}, "bob,alice"},
		{"alice", alice, client.UsageQuery{By: api.UsageByUser}, "alice"},
		{"bob", bob, client.UsageQuery{By: api.UsageByUser}, "bob"},
		{"alice, by queue", alice, client.UsageQuery{}, "research"},
		{"alice names herself", alice, client.UsageQuery{By: api.UsageByUser, User: "alice"}, "alice"},
		{"archived", e.admin, client.UsageQuery{Archived: true}, "research,archive"},
		{"alice, archived", alice, client.UsageQuery{Archived: true, By: api.UsageByJob}, aliceJob + ",9000"},
	} {
		r, err := c.c.Usage(e.ctx, c.q)
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if keys(r) != c.want {
			t.Errorf("%s: rows %s; want %s", c.name, keys(r), c.want)
		}
	}
	bobs, err := e.admin.Usage(e.ctx, client.UsageQuery{By: api.UsageByUser, User: "bob"})
	if err != nil || keys(bobs) != "bob" {
		t.Errorf("admin asks for bob's: %s, %v", keys(bobs), err)
	}

	refused := []struct {
		name   string
		c      *client.Client
		q      client.UsageQuery
		status int
		says   string
	}{
		{"alice asks for bob's", alice, client.UsageQuery{User: "bob"}, http.StatusForbidden, "alice may see only their own usage"},
		{"bad by", e.admin, client.UsageQuery{By: "team"}, http.StatusBadRequest, `by: "team" is not one of queue, user, job`},
		{"bad since", e.admin, client.UsageQuery{Since: "7x"}, http.StatusBadRequest, `since: "7x" is not a duration (e.g. 30m, 24h, 7d), a date (2026-12-01) or an RFC 3339 time (2026-12-01T10:00:00Z)`},
		{"anonymous", e.anon(), client.UsageQuery{}, http.StatusUnauthorized, "no credentials"},
	}
	for _, c := range refused {
		_, err := c.c.Usage(e.ctx, c.q)
		var ae *client.APIError
		if !errors.As(err, &ae) || ae.Status != c.status || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%s: %v; want %d saying %q", c.name, err, c.status, c.says)
		}
	}
}

// equalHours compares GPU-hours to a millionth (the report's rounding).
func equalHours(a, b map[api.Cause]float64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if !near(v, b[k]) {
			return false
		}
	}
	return true
}

func near(a, b float64) bool { return a-b <= 1e-6 && b-a <= 1e-6 }
