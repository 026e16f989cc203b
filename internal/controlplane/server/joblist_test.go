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
	"github.com/google/go-cmp/cmp"
)

// TestListFinishedJobs: GET /v1/jobs?all=1 merges the store's jobs with
// the archive's (the store's copy of a job in both wins), newest first;
// since keeps the jobs not finished or finished since then; bad and
// unknown parameters are named.
func TestListFinishedJobs(t *testing.T) {
	archive := filepath.Join(t.TempDir(), "jobs.jsonl")
	e := startAgentEnvWith(t, func(c *Config) { c.JobArchive.Path = archive })
	now := time.Now()
	ago := func(d time.Duration) time.Time { return now.Add(-d) }
	store := func(user string, phase api.JobPhase, finished time.Time) string {
		t.Helper()
		j, err := e.s.st.NewJob(e.ctx, api.JobSpec{Ranks: 1, GPUsPerRank: 1, User: user, Command: []string{"train"}}, ago(30*24*time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		j.Status = api.JobStatus{Phase: phase, FinishedAt: finished}
		if err := e.s.st.CreateJobAs(e.ctx, j, nil); err != nil {
			t.Fatal(err)
		}
		return j.ID
	}
	old := store("alice", api.JobSucceeded, ago(48*time.Hour))
	waiting := store("bob", api.JobPending, time.Time{})
	recent := store("alice", api.JobSucceeded, ago(time.Hour))
	var lines []byte
	for _, d := range []api.JobDetail{
		{Job: api.Job{ID: "9000", Spec: api.JobSpec{User: "alice"}, Status: api.JobStatus{Phase: api.JobFailed, FinishedAt: ago(10 * 24 * time.Hour)}}},
		{Job: api.Job{ID: "9001", Spec: api.JobSpec{User: "bob"}, Status: api.JobStatus{Phase: api.JobCancelled, FinishedAt: ago(2 * time.Hour)}}},
		// An older record of a job the store holds again.
		{Job: api.Job{ID: recent, Spec: api.JobSpec{User: "alice"}, Status: api.JobStatus{Phase: api.JobFailed, FinishedAt: ago(3 * time.Hour)}}},
	} {
		b, err := json.Marshal(&d)
		if err != nil {
			t.Fatal(err)
		}
		lines = append(append(lines, b...), '\n')
	}
	if err := os.WriteFile(archive, lines, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		q    client.JobQuery
		want []string
	}{
		{"the store's, oldest first", client.JobQuery{}, []string{old, waiting, recent}},
		{"since a day, from the store", client.JobQuery{Since: "1d"}, []string{waiting, recent}},
		{"all, newest first", client.JobQuery{All: true}, []string{"9001", "9000", recent, waiting, old}},
		{"all since a week", client.JobQuery{All: true, Since: "7d"}, []string{"9001", recent, waiting, old}},
		{"all since a day", client.JobQuery{All: true, Since: "24h"}, []string{"9001", recent, waiting}},
		{"all, the newest two", client.JobQuery{All: true, Limit: 2}, []string{"9001", "9000"}},
		{"all of alice's", client.JobQuery{All: true, User: "alice"}, []string{"9000", recent, old}},
		{"all since an RFC 3339 time", client.JobQuery{All: true, Since: ago(90 * time.Minute).UTC().Format(time.RFC3339)}, []string{recent, waiting}},
	} {
		l, err := e.admin.Jobs(e.ctx, tc.q)
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		var ids []string
		for _, j := range l.Jobs {
			ids = append(ids, j.ID)
			if j.ID == recent && j.Status.Phase != api.JobSucceeded {
				t.Errorf("%s: job %s %s; want the store's copy, Succeeded, over the archive's", tc.name, j.ID, j.Status.Phase)
			}
		}
		if d := cmp.Diff(tc.want, ids); d != "" {
			t.Errorf("%s: jobs (-want +got):\n%s", tc.name, d)
		}
		if len(l.Warnings) > 0 {
			t.Errorf("%s: warnings %q from a server with an archive", tc.name, l.Warnings)
		}
	}

	for _, tc := range []struct {
		path, field, says string
	}{
		{"/v1/jobs?sinse=7d", "sinse", "unknown query parameter: GET /v1/jobs takes live, all, since, limit, user, selector, index, wait"},
		{"/v1/jobs?selector=a%3Db,,c", "selector", `label selector: term "": empty`},
		{"/v1/nodes?selector=team+in+(a)", "selector", "set-based terms"},
		{"/v1/nodes?labels=a", "labels", "unknown query parameter: GET /v1/nodes takes selector, index, wait"},
		{"/v1/jobs?all=1&since=7x", "since", `"7x" is not a time: want how long ago (30m, 12h, 7d), an RFC 3339 time (2026-12-01T09:00:00Z) or a date (2026-12-01)`},
		{"/v1/jobs?all=yes", "all", `"yes": want true or false`},
		{"/v1/jobs?all=1&live=1", "all", "which live leaves out"},
	} {
		err := e.admin.Get(e.ctx, tc.path, &api.JobList{})
		var ae *client.APIError
		if !errors.As(err, &ae) || ae.Status != http.StatusBadRequest || ae.Field != tc.field || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%s: %v; want a 400 on %s saying %q", tc.path, err, tc.field, tc.says)
		}
	}
}

// TestListAllWithoutArchive: on a server that keeps no job archive,
// all=1 lists what the store holds and says what it may lack.
func TestListAllWithoutArchive(t *testing.T) {
	e := startAgentEnv(t)
	l, err := e.admin.Jobs(e.ctx, client.JobQuery{All: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(l.Warnings) != 1 || !strings.Contains(l.Warnings[0], "keeps no job archive (--job-archive)") {
		t.Errorf("warnings %q; want one saying the server keeps no job archive", l.Warnings)
	}
}
