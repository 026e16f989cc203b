package server

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gangway/gangway/internal/api"
)

func archiveLine(t *testing.T, d api.JobDetail) string {
	t.Helper()
	b, err := json.Marshal(&d)
	if err != nil {
		t.Fatal(err)
	}
	return string(b) + "\n"
}

func TestReadArchivedFindsTheLastRecordOfTheJob(t *testing.T) {
	path := filepath.Join(t.TempDir(), "jobs.jsonl")
	if d, err := readArchived(path, "7"); d != nil || err != nil {
		t.Fatalf("no archive yet: %v, %v; want nothing, no error", d, err)
	}
	big := api.JobDetail{Job: api.Job{ID: "9"}}
	big.Job.Spec.Command = []string{strings.Repeat("x", 3<<20)} // longer than the reader's buffer
	first := api.JobDetail{Job: api.Job{ID: "7"}}
	first.Job.Status.Phase = api.JobFailed
	again := api.JobDetail{Job: api.Job{ID: "7"}, Ranks: []api.RankStatus{{JobID: "7", Rank: 0}}}
	again.Job.Status.Phase = api.JobSucceeded
	task := api.JobDetail{Job: api.Job{ID: "8", Array: &api.ArrayTask{ID: "7", Index: 1, Count: 2}}}
	text := archiveLine(t, first) + archiveLine(t, big) + archiveLine(t, again) + archiveLine(t, task) +
		`{"job":{"id":"7","spec":{"ran` // torn: the leader is writing it
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	d, err := readArchived(path, "7")
	if err != nil || d == nil || d.Job.Status.Phase != api.JobSucceeded || len(d.Ranks) != 1 {
		t.Fatalf("readArchived(7) = %+v, %v; want the second, Succeeded record with its rank", d, err)
	}
	if d, err := readArchived(path, "9"); err != nil || d == nil || len(d.Job.Spec.Command[0]) != 3<<20 {
		t.Fatalf("readArchived(9), a 3 MB line: %v", err)
	}
	if d, err := readArchived(path, "70"); d != nil || err != nil {
		t.Fatalf("readArchived(70) = %+v, %v; want nothing (7 is not 70)", d, err)
	}
	// A damaged record of the job is an error naming the line, not a miss.
	if err := os.WriteFile(path, []byte(`{"job":{"id":"7", oops}`+"\n"+archiveLine(t, task)), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := readArchived(path, "7"); err == nil || !strings.Contains(err.Error(), "line 1") {
		t.Fatalf("damaged record: err = %v; want one naming line 1", err)
	}
}

// FuzzReadArchived: any archive content either yields the asked job or
// nothing or an error, and never another job.
func FuzzReadArchived(f *testing.F) {
	f.Add([]byte(`{"job":{"id":"7","status":{"phase":"Succeeded"}}}` + "\n"))
	f.Add([]byte(`{"job":{"id":"8","array":{"id":"7"}}}` + "\n" + `{"job":{"id":"7"`))
	f.Add([]byte("\n\n{}\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		path := filepath.Join(t.TempDir(), "jobs.jsonl")
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
		d, err := readArchived(path, "7")
		if err == nil && d != nil && d.Job.ID != "7" {
			t.Fatalf("asked for job 7, got job %q", d.Job.ID)
		}
	})
}
