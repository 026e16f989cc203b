package cli

import (
	"os"
	"path/filepath"
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
		{[]string{"get", "deployments", "-o", "wide"}, "-o wide shows more columns of jobs, nodes and queues"},
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

// TestLabelSelectors: jobs carry spec.labels; get jobs, get nodes and
// cancel take -l, which the server applies; a bad label or selector is
// refused naming it.
func TestLabelSelectors(t *testing.T) {
	cl := startCluster(t, 1, 8)
	nlp := cl.submitYAML("name: a\nranks: 1\nlabels: {team: nlp, tier: high}\ncommand: [sleep, '30']\n")
	cv := cl.submitYAML("name: b\nranks: 1\nlabels: {team: cv}\ncommand: [sleep, '30']\n")
	bare := cl.submitYAML("name: c\nranks: 1\ncommand: [sleep, '30']\n")
	for _, tc := range []struct {
		sel  string
		want string
	}{
		{"team=nlp", nlp},
		{"team!=nlp", cv + " " + bare},
		{"team", nlp + " " + cv},
		{"!team", bare},
		{"team=nlp,tier=low", ""},
	} {
		out, errOut, code := cl.run("get", "jobs", "-l", tc.sel, "-o", "jsonpath={.items[*].id}")
		if code != 0 || out != tc.want {
			t.Errorf("get jobs -l %s = %q (code %d, %s); want %q", tc.sel, out, code, errOut, tc.want)
		}
	}
	if out, _, _ := cl.run("get", "jobs", "-o", "wide"); !strings.Contains(out, "team=nlp,tier=high") {
		t.Errorf("get jobs -o wide lacks the labels:\n%s", out)
	}
	if out, _, _ := cl.run("describe", "job", nlp); !strings.Contains(out, "Labels:    team=nlp,tier=high") {
		t.Errorf("describe job lacks the labels:\n%s", out)
	}
	if out, errOut, code := cl.run("get", "nodes", "-l", "!no-such-label", "-o", "jsonpath={.items[*].name}"); code != 0 || out != "n1" {
		t.Errorf("get nodes -l '!no-such-label' = %q (code %d, %s); want n1", out, code, errOut)
	}
	if out, errOut, code := cl.run("get", "nodes", "-l", "no-such-label", "-o", "jsonpath={.items[*].name}"); code != 0 || out != "" {
		t.Errorf("get nodes -l no-such-label = %q (code %d, %s); want none", out, code, errOut)
	}
	if _, errOut, code := cl.run("cancel", "-l", "team"); code != 0 {
		t.Fatalf("cancel -l team: %s", errOut)
	}
	cl.waitPhase(nlp, api.JobCancelled, 20*time.Second)
	cl.waitPhase(cv, api.JobCancelled, 20*time.Second)
	if d := cl.detail(bare); d.Job.Status.Phase.Final() {
		t.Errorf("cancel -l team cancelled the unlabelled job %s too", bare)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"get", "jobs", "-l", "team in (a,b)"}, "set-based terms"},
		{[]string{"get", "nodes", "-l", "a=b,,c"}, `term ""`},
		{[]string{"cancel", "-l", "-x"}, `term "-x"`},
		{[]string{"get", "queues", "-l", "a"}, "-l selects among jobs or nodes"},
	} {
		if _, errOut, code := cl.run(tc.args...); code != 2 || !strings.Contains(errOut, tc.want) {
			t.Errorf("%v: code %d, %q; want 2 naming %q", tc.args, code, errOut, tc.want)
		}
	}
	spec := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(spec, []byte("ranks: 1\nlabels: {\"bad key\": x, ok: \"-v\"}\ncommand: [true]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, errOut, code := cl.run("submit", spec); code == 0 || !strings.Contains(errOut, `spec.labels: key "bad key"`) || !strings.Contains(errOut, `spec.labels.ok: value "-v"`) {
		t.Errorf("submit with bad labels: code %d, %q; want both named", code, errOut)
	}
}
