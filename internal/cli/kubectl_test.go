package cli

import (
	"strings"
	"testing"
	"time"

	"github.com/gangway/gangway/internal/api"
)

// TestGetWideAndJSONPath: -o wide adds columns to get jobs and get nodes,
// -o jsonpath prints what the template picks (a list as .items), and
// the wrong forms are refused naming what is wrong.
func TestGetWideAndJSONPath(t *testing.T) {
	cl := startCluster(t, 1, 8)
	id := cl.submitYAML("name: wide\nranks: 1\npriority: 3\ncommand: [true]\n")
	cl.waitPhase(id, api.JobSucceeded, 20*time.Second)
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"get", "jobs", "-o", "wide"}, []string{"ELAPSED", "RESTARTS", "EXIT", "PRIORITY", "LAUNCH"}},
		{[]string{"get", "job", id, "-o", "wide"}, []string{"PRIORITY", "wide"}},
		{[]string{"get", "nodes", "-o", "wide"}, []string{"CPUS", "MEMORY", "GPU SOURCE", "AGENT", "https://"}},
		{[]string{"get", "jobs", "-o", `jsonpath={range .items[*]}{.id}:{.spec.name}:{.spec.priority}{"\n"}{end}`}, []string{id + ":wide:3\n"}},
		{[]string{"get", "nodes", "-o", "jsonpath={.items[*].name}"}, []string{"n1"}},
		{[]string{"get", "job", id, "-o", "jsonpath={.status.phase}"}, []string{"Succeeded"}},
	} {
		out, errOut, code := cl.run(tc.args...)
		if code != 0 {
			t.Errorf("%v: code %d, %s", tc.args, code, errOut)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(out, w) {
				t.Errorf("%v lacks %q:\n%s", tc.args, w, out)
			}
		}
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"get", "queues", "-o", "wide"}, "-o wide shows more columns of jobs and nodes"},
		{[]string{"get", "jobs", "-o", "jsonpath={.items[?(@.id)]}"}, "index [?(@.id)]"},
		{[]string{"get", "jobs", "-o", "jsonpath={range .items[*]}"}, "{range} without an {end}"},
		{[]string{"get", "jobs", "-w", "-o", "wide"}, "-o wide is for a list"},
	} {
		if _, errOut, code := cl.run(tc.args...); code != 2 || !strings.Contains(errOut, tc.want) {
			t.Errorf("%v: code %d, %q; want 2 naming %q", tc.args, code, errOut, tc.want)
		}
	}
}

func TestSplitKindNames(t *testing.T) {
	got := splitKindNames([]string{"job/7", "--server", "https://x/y", "node/n1", "queue/q", "job/", "7"})
	want := []string{"job", "7", "--server", "https://x/y", "node", "n1", "queue/q", "job/", "7"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("splitKindNames = %q; want %q", got, want)
	}
}

// TestKindNameAndDeleteJob: describe, get and logs take job/ID, and
// delete job (or job/ID) cancels as cancel does.
func TestKindNameAndDeleteJob(t *testing.T) {
	cl := startCluster(t, 1, 8)
	id := cl.submitYAML("name: kn\nranks: 1\ncommand: [sleep, '30']\n")
	cl.waitPhase(id, api.JobRunning, 20*time.Second)
	if out, errOut, code := cl.run("describe", "job/"+id); code != 0 || !strings.Contains(out, "kn") {
		t.Errorf("describe job/%s: code %d, %s%s", id, code, out, errOut)
	}
	if out, errOut, code := cl.run("get", "job/"+id, "-o", "jsonpath={.id}"); code != 0 || out != id {
		t.Errorf("get job/%s: code %d, %q %s", id, code, out, errOut)
	}
	if out, errOut, code := cl.run("get", "node/n1", "-o", "jsonpath={.items[0].name}"); code != 0 || out != "n1" {
		t.Errorf("get node/n1: code %d, %q %s", code, out, errOut)
	}
	if _, errOut, code := cl.run("delete", "job/"+id); code != 0 {
		t.Fatalf("delete job/%s: %s", id, errOut)
	}
	cl.waitPhase(id, api.JobCancelled, 20*time.Second)
	id2 := cl.submitYAML("name: kn2\nranks: 1\ncommand: [sleep, '30']\n")
	if _, errOut, code := cl.run("delete", "job", id2); code != 0 {
		t.Fatalf("delete job %s: %s", id2, errOut)
	}
	cl.waitPhase(id2, api.JobCancelled, 20*time.Second)
	if _, errOut, code := cl.run("delete", "queue/q"); code != 2 || !strings.Contains(errOut, "deployment NAME | job ID") {
		t.Errorf("delete queue/q: code %d, %q", code, errOut)
	}
}
