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
