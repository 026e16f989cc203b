package jobarchive

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gangway/gangway/internal/api"
	"github.com/google/go-cmp/cmp"
)

func detail(id string, phase api.JobPhase) api.JobDetail {
	d := api.JobDetail{Job: api.Job{ID: id}}
	d.Job.Status.Phase = phase
	return d
}

func line(t testing.TB, d api.JobDetail) string {
	t.Helper()
	b, err := json.Marshal(&d)
	if err != nil {
		t.Fatal(err)
	}
	return string(b) + "\n"
}

// phaseOf looks id up and returns its phase, "" when the archive does not
// hold it.
func phaseOf(t *testing.T, a *Archive, id string) api.JobPhase {
	t.Helper()
	d, err := a.Lookup(id)
	if err != nil {
		t.Fatalf("Lookup(%s): %v", id, err)
	}
	if d == nil {
		return ""
	}
	if d.Job.ID != id {
		t.Fatalf("Lookup(%s) = job %s", id, d.Job.ID)
	}
	return d.Job.Status.Phase
}

func TestLookupFindsTheLastRecordOfTheJob(t *testing.T) {
	path := filepath.Join(t.TempDir(), "jobs.jsonl")
	if d, err := New(Config{Path: path}).Lookup("7"); d != nil || err != nil {
		t.Fatalf("no archive yet: %v, %v; want nothing, no error", d, err)
	}
	big := detail("9", api.JobSucceeded)
	big.Job.Spec.Command = []string{strings.Repeat("x", 3<<20)} // longer than the reader's buffer
	again := detail("7", api.JobSucceeded)
	again.Ranks = []api.RankStatus{{JobID: "7", Rank: 0}}
	task := api.JobDetail{Job: api.Job{ID: "8", Array: &api.ArrayTask{ID: "7", Index: 1, Count: 2}}}
	text := line(t, detail("7", api.JobFailed)) + line(t, big) + line(t, again) + line(t, task) +
		`{"job":{"id":"7","spec":{"ran` // torn: an append a crash cut short
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	a := New(Config{Path: path})
	d, err := a.Lookup("7")
	if err != nil || d == nil || d.Job.Status.Phase != api.JobSucceeded || len(d.Ranks) != 1 {
		t.Fatalf("Lookup(7) = %+v, %v; want the second, Succeeded record with its rank", d, err)
	}
	if d, err := a.Lookup("9"); err != nil || d == nil || len(d.Job.Spec.Command[0]) != 3<<20 {
		t.Fatalf("Lookup(9), a 3 MB line: %v", err)
	}
	if got := phaseOf(t, a, "70"); got != "" {
		t.Fatalf("Lookup(70) found a job in phase %s; want nothing (7 is not 70)", got)
	}
}

func TestAppendWritesOverATornLine(t *testing.T) {
	path := filepath.Join(t.TempDir(), "jobs.jsonl")
	torn := line(t, detail("1", api.JobSucceeded)) + `{"job":{"id":"2","sta`
	if err := os.WriteFile(path, []byte(torn), 0o644); err != nil {
		t.Fatal(err)
	}
	a := New(Config{Path: path})
	if err := a.Append([]api.JobDetail{detail("2", api.JobFailed), detail("3", api.JobCancelled)}); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	want := line(t, detail("1", api.JobSucceeded)) + line(t, detail("2", api.JobFailed)) + line(t, detail("3", api.JobCancelled))
	if diff := cmp.Diff(want, string(b)); diff != "" {
		t.Errorf("archive after the append (-want +got):\n%s", diff)
	}
	for _, a := range []*Archive{a, New(Config{Path: path})} { // this one, and after a restart
		for id, want := range map[string]api.JobPhase{"1": api.JobSucceeded, "2": api.JobFailed, "3": api.JobCancelled} {
			if got := phaseOf(t, a, id); got != want {
				t.Errorf("job %s: phase %q, want %q", id, got, want)
			}
		}
	}
}

func TestADamagedRecordIsAnErrorNotAMiss(t *testing.T) {
	tests := []struct {
		name, text string
	}{
		{"its ID readable", `{"job":{"id":"7", oops}` + "\n"},
		{"its ID unreadable", `{"job":{oops, "id":"7"}` + "\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "jobs.jsonl")
			if err := os.WriteFile(path, []byte(tt.text+line(t, detail("8", api.JobSucceeded))), 0o644); err != nil {
				t.Fatal(err)
			}
			a := New(Config{Path: path})
			if _, err := a.Lookup("7"); err == nil || !strings.Contains(err.Error(), "at byte 0") {
				t.Errorf("damaged record: err = %v; want one naming byte 0", err)
			}
			if got := phaseOf(t, a, "8"); got != api.JobSucceeded {
				t.Errorf("job 8 after a damaged line: phase %q", got)
			}
		})
	}
}

// TestRotation appends one record at a time to an archive that rotates
// every two records and keeps two rotated files: the files hold what they
// should, and look-ups, now and after a restart, find the jobs the kept
// files hold and not the ones deleted.
func TestRotation(t *testing.T) {
	path := filepath.Join(t.TempDir(), "jobs.jsonl")
	rec := int64(len(line(t, detail("1", api.JobSucceeded))))
	a := New(Config{Path: path, MaxBytes: 2 * rec, Keep: 2})
	for i := 1; i <= 7; i++ {
		if err := a.Append([]api.JobDetail{detail(fmt.Sprint(i), api.JobSucceeded)}); err != nil {
			t.Fatal(err)
		}
	}
	// Job 1 archived again, after its first record's file was deleted.
	if err := a.Append([]api.JobDetail{detail("1", api.JobFailed)}); err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{path: {"7", "1"}, path + ".1": {"5", "6"}, path + ".2": {"3", "4"}}
	got := map[string][]string{}
	names, _ := filepath.Glob(path + "*")
	for _, name := range names {
		b, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		if int64(len(b)) > 2*rec {
			t.Errorf("%s has %d bytes, above the bound of %d", name, len(b), 2*rec)
		}
		for _, l := range strings.SplitAfter(string(b), "\n") {
			if id, ok := recordID([]byte(l)); ok {
				got[name] = append(got[name], id)
			}
		}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("files (-want +got):\n%s", diff)
	}
	for _, a := range []*Archive{a, New(Config{Path: path, MaxBytes: 2 * rec, Keep: 2})} {
		for id, want := range map[string]api.JobPhase{"1": api.JobFailed, "2": "", "3": api.JobSucceeded, "6": api.JobSucceeded, "7": api.JobSucceeded} {
			if got := phaseOf(t, a, id); got != want {
				t.Errorf("job %s: phase %q, want %q", id, got, want)
			}
		}
		jobs, err := a.Jobs()
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, j := range jobs {
			ids = append(ids, j.ID+":"+string(j.Status.Phase))
		}
		if diff := cmp.Diff([]string{"3:Succeeded", "4:Succeeded", "5:Succeeded", "6:Succeeded", "7:Succeeded", "1:Failed"}, ids); diff != "" {
			t.Errorf("Jobs (-want +got):\n%s", diff)
		}
	}
}

// TestJobsSinceSkipsOldFiles: a file last written before the time asked
// for is not read; the files written since are, whole.
func TestJobsSinceSkipsOldFiles(t *testing.T) {
	path := filepath.Join(t.TempDir(), "jobs.jsonl")
	rec := int64(len(line(t, detail("1", api.JobSucceeded))))
	a := New(Config{Path: path, MaxBytes: 2 * rec})
	for i := 1; i <= 5; i++ {
		if err := a.Append([]api.JobDetail{detail(fmt.Sprint(i), api.JobSucceeded)}); err != nil {
			t.Fatal(err)
		}
	}
	// jobs.jsonl.2 holds 1 and 2, .1 3 and 4, jobs.jsonl 5.
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	for name, at := range map[string]time.Time{path + ".2": t0, path + ".1": t0.Add(time.Hour), path: t0.Add(2 * time.Hour)} {
		if err := os.Chtimes(name, at, at); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		since time.Time
		want  []string
	}{
		{time.Time{}, []string{"1", "2", "3", "4", "5"}},
		{t0.Add(30 * time.Minute), []string{"3", "4", "5"}},
		{t0.Add(time.Hour), []string{"3", "4", "5"}},
		{t0.Add(3 * time.Hour), nil},
	} {
		jobs, err := a.JobsSince(tc.since)
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, j := range jobs {
			ids = append(ids, j.ID)
		}
		if diff := cmp.Diff(tc.want, ids); diff != "" {
			t.Errorf("JobsSince(%s) (-want +got):\n%s", tc.since, diff)
		}
	}
}

func TestRotationKeepsEveryFileByDefault(t *testing.T) {
	path := filepath.Join(t.TempDir(), "jobs.jsonl")
	a := New(Config{Path: path, MaxBytes: 1}) // every append rotates
	for i := 1; i <= 12; i++ {
		if err := a.Append([]api.JobDetail{detail(fmt.Sprint(i), api.JobSucceeded)}); err != nil {
			t.Fatal(err)
		}
	}
	b := New(Config{Path: path, MaxBytes: 1})
	for i := 1; i <= 12; i++ {
		if got := phaseOf(t, b, fmt.Sprint(i)); got != api.JobSucceeded {
			t.Errorf("job %d after a restart: phase %q", i, got)
		}
	}
	if d, err := os.ReadFile(path + ".11"); err != nil || !strings.HasPrefix(string(d), `{"job":{"id":"1"`) {
		t.Errorf("%s.11 = %q, %v; want job 1, the oldest", path, d, err)
	}
}

// FuzzLookup: any archive content either yields the asked job or nothing
// or an error, and never another job.
func FuzzLookup(f *testing.F) {
	f.Add([]byte(`{"job":{"id":"7","status":{"phase":"Succeeded"}}}` + "\n"))
	f.Add([]byte(`{"job":{"id":"8","array":{"id":"7"}}}` + "\n" + `{"job":{"id":"7"`))
	f.Add([]byte(`{"job":{"id":"7\"}}` + "\n" + `{"job":{"id":"\u0037"}}` + "\n"))
	f.Add([]byte("\n\n{}\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		path := filepath.Join(t.TempDir(), "jobs.jsonl")
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
		d, err := New(Config{Path: path}).Lookup("7")
		if err == nil && d != nil && d.Job.ID != "7" {
			t.Fatalf("asked for job 7, got job %q", d.Job.ID)
		}
	})
}

// BenchmarkLookup looks up jobs in an archive of 100,000 records (about
// 100 MB) spread over rotated files; the index is built before timing.
func BenchmarkLookup(b *testing.B) {
	path := filepath.Join(b.TempDir(), "jobs.jsonl")
	a := New(Config{Path: path, MaxBytes: 16 << 20})
	const n = 100_000
	batch := make([]api.JobDetail, 0, 1000)
	for i := range n {
		d := detail(fmt.Sprint(i), api.JobSucceeded)
		d.Job.Spec.Command = []string{"python3", "train.py", strings.Repeat("x", 900)}
		batch = append(batch, d)
		if len(batch) == cap(batch) {
			if err := a.Append(batch); err != nil {
				b.Fatal(err)
			}
			batch = batch[:0]
		}
	}
	a = New(Config{Path: path, MaxBytes: 16 << 20}) // a restart: the index is built by the first look-up
	if d, err := a.Lookup("0"); err != nil || d == nil {
		b.Fatal(d, err)
	}
	b.ResetTimer()
	for i := range b.N {
		if d, err := a.Lookup(fmt.Sprint(i * 7919 % n)); err != nil || d == nil {
			b.Fatal(d, err)
		}
	}
}

// An archive someone else cut or moved is read again, not trusted.
func TestArchiveChangedBehindItsBack(t *testing.T) {
	path := filepath.Join(t.TempDir(), "jobs.jsonl")
	a := New(Config{Path: path})
	if err := a.Append([]api.JobDetail{detail("1", api.JobSucceeded), detail("2", api.JobFailed)}); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(line(t, detail("2", api.JobCancelled))), 0o644); err != nil {
		t.Fatal(err)
	}
	for id, want := range map[string]api.JobPhase{"1": "", "2": api.JobCancelled} {
		if got := phaseOf(t, a, id); got != want {
			t.Errorf("job %s after the file was rewritten: phase %q, want %q", id, got, want)
		}
	}
	if err := os.Rename(path, path+".old"); err != nil {
		t.Fatal(err)
	}
	if err := a.Append([]api.JobDetail{detail("3", api.JobSucceeded)}); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(path); err != nil || string(b) != line(t, detail("3", api.JobSucceeded)) {
		t.Errorf("archive after it was moved away and appended to = %q, %v; want job 3's line alone", b, err)
	}
	if got := phaseOf(t, a, "2"); got != "" {
		t.Errorf("job 2, moved away with the file: phase %q, want none", got)
	}
}
