package simcli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/goccy/go-yaml"
	"github.com/google/go-cmp/cmp"
)

const tinyTrace = `id,submit,duration,gpus
a,0,100,8
b,10,50,4
c,20,10,1
d,30,1000,16
`

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func run(args ...string) (int, string, string) {
	var out, errb bytes.Buffer
	code := Main(context.Background(), args, &out, &errb)
	return code, out.String(), errb.String()
}

func TestJSONOutput(t *testing.T) {
	tr := writeFile(t, "t.csv", tinyTrace)
	code, out, stderr := run("-trace", tr, "-nodes", "2", "-policy", "fifo,sjf,gangway", "-o", "json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 {
		t.Fatalf("%d lines, want one per policy:\n%s", len(lines), out)
	}
	var policies []string
	for _, l := range lines {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("line %q: %v", l, err)
		}
		for _, k := range []string{"policy", "jobs", "avg_jct_s", "p50_jct_s", "p95_jct_s", "p99_jct_s", "avg_queue_s",
			"max_queue_s", "makespan_s", "gpu_utilization", "preemptions", "goodput"} {
			if _, ok := m[k]; !ok {
				t.Errorf("%s: key %q missing", l, k)
			}
		}
		if m["jobs"].(float64) != 4 {
			t.Errorf("%s: jobs = %v, want 4", m["policy"], m["jobs"])
		}
		policies = append(policies, m["policy"].(string))
	}
	if d := cmp.Diff([]string{"fifo", "sjf", "gangway"}, policies); d != "" {
		t.Errorf("policies (-want +got):\n%s", d)
	}
}

func TestTableAndFiles(t *testing.T) {
	tr := writeFile(t, "t.csv", tinyTrace)
	dir := filepath.Join(t.TempDir(), "out")
	code, out, stderr := run("-trace", tr, "-nodes", "2", "-policy", "all", "-out", dir)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if !strings.Contains(out, "avg JCT s") || !strings.Contains(out, "fifo-backfill") {
		t.Errorf("table:\n%s", out)
	}
	if !strings.Contains(stderr, "done in") {
		t.Errorf("no progress on stderr: %q", stderr)
	}
	for _, f := range []string{"results.json", "results.csv", "jobs-gangway.csv", "series-srtf.csv", "jct-cdf.svg", "queue.svg", "utilization.svg"} {
		st, err := os.Stat(filepath.Join(dir, f))
		if err != nil || st.Size() == 0 {
			t.Errorf("%s: %v", f, err)
		}
	}
	svg, _ := os.ReadFile(filepath.Join(dir, "jct-cdf.svg"))
	if !strings.HasPrefix(string(svg), "<svg") || !strings.Contains(string(svg), "polyline") {
		t.Errorf("jct-cdf.svg is not a chart")
	}
}

func TestUsageErrors(t *testing.T) {
	tr := writeFile(t, "t.csv", tinyTrace)
	bad := writeFile(t, "bad.csv", "id,submit,duration,gpus\na,0,ten,1\n")
	tests := []struct {
		name string
		args []string
		code int
		msg  string
	}{
		{"no trace", []string{"-nodes", "2"}, 2, "-trace is required"},
		{"no cluster", []string{"-trace", tr}, 2, "the cluster has no nodes"},
		{"bad policy", []string{"-trace", tr, "-nodes", "2", "-policy", "lifo"}, 2, `unknown policy "lifo"`},
		{"bad output", []string{"-trace", tr, "-nodes", "2", "-o", "xml"}, 2, `invalid value "xml" for flag -o: want table, json or yaml`},
		{"bad duration", []string{"-trace", tr, "-nodes", "2", "-horizon", "soon"}, 2, "-horizon"},
		{"bad row", []string{"-trace", bad, "-nodes", "2"}, 1, `bad.csv:2:5: duration: "ten" is neither seconds nor a duration`},
		{"too wide", []string{"-trace", tr, "-nodes", "1"}, 1, "asks for 16 GPUs, the cluster has 8"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, _, stderr := run(tt.args...)
			if code != tt.code || !strings.Contains(stderr, tt.msg) {
				t.Errorf("exit %d, stderr %q; want %d and %q", code, stderr, tt.code, tt.msg)
			}
		})
	}
}

func TestParseDuration(t *testing.T) {
	for in, want := range map[string]float64{"90s": 90, "2h30m": 9000, "54d": 54 * 86400, "1d12h": 36 * 3600, "0.5d": 43200} {
		d, err := parseDuration(in)
		if err != nil || d.Seconds() != want {
			t.Errorf("parseDuration(%q) = %v, %v; want %v s", in, d, err, want)
		}
	}
	if _, err := parseDuration("3x"); err == nil {
		t.Error("parseDuration(3x): no error")
	}
}

func TestGoodputCommand(t *testing.T) {
	code, out, stderr := run("goodput", "-gpus", "64", "-spares", "2", "-days", "5", "-scales", "1", "-fixed", "", "-seeds", "1", "-o", "json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var res struct {
		Recommended float64 `json:"recommended_interval_s"`
		Rows        []struct {
			ETTR float64
		} `json:"rows"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil || len(res.Rows) != 1 || res.Recommended <= 0 || res.Rows[0].ETTR <= 0.9 {
		t.Errorf("goodput output %q: %v", out, err)
	}
}

func TestYAMLOutput(t *testing.T) {
	tr := writeFile(t, "t.csv", tinyTrace)
	code, out, stderr := run("-trace", tr, "-nodes", "2", "-policy", "fifo,sjf", "-o", "yaml")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	docs := strings.Split(out, "---\n")[1:]
	if len(docs) != 2 {
		t.Fatalf("%d documents, want one per policy:\n%s", len(docs), out)
	}
	for i, want := range []string{"fifo", "sjf"} {
		var m map[string]any
		if err := yaml.Unmarshal([]byte(docs[i]), &m); err != nil {
			t.Fatalf("document %d: %v", i, err)
		}
		if _, isFloat := m["jobs"].(float64); m["policy"] != want || isFloat || fmt.Sprint(m["jobs"]) != "4" {
			t.Errorf("document %d: policy %v jobs %#v, want %s and the integer 4", i, m["policy"], m["jobs"], want)
		}
		if !strings.HasPrefix(docs[i], "policy: "+want+"\nplacement: gangway\njobs: 4\n") {
			t.Errorf("document %d does not keep the JSON field order (policy, placement, jobs):\n%s", i, docs[i])
		}
	}
}

// TestSeveralPoliciesTellTheWait: comparing policies says on stderr how
// many runs there are, an estimate after the first, and each policy as it
// starts (also when stdout is JSON, where no progress bar is drawn).
func TestSeveralPoliciesTellTheWait(t *testing.T) {
	tr := writeFile(t, "t.csv", tinyTrace)
	code, _, stderr := run("-trace", tr, "-nodes", "2", "-policy", "fifo,sjf,gangway", "-o", "json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, want := range []string{"3 policies, one after another", "policy 1/3: fifo\n", "fifo took ", "the other 2: about ", "policy 3/3: gangway\n"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr)
		}
	}
	if _, _, stderr := run("-trace", tr, "-nodes", "2", "-policy", "fifo", "-o", "json"); strings.Contains(stderr, "policy 1/") {
		t.Errorf("one policy: stderr %q; want no count", stderr)
	}
}

// TestLiveFromQueuesFile: -policy live -queues FILE runs the default
// queue's policy as the controller would: with fifo, fifo's figures.
func TestLiveFromQueuesFile(t *testing.T) {
	tr := writeFile(t, "t.csv", tinyTrace)
	qs := writeFile(t, "q.yaml", "- spec: {name: default, policy: fifo}\n- {name: team-a, guaranteeGPUs: 4, policy: las}\n")
	code, out, stderr := run("-trace", tr, "-nodes", "2", "-policy", "live,fifo", "-queues", qs, "-o", "json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if !strings.Contains(stderr, "queue team-a (policy gangway-4h, guarantee 4 GPUs) is not simulated") {
		t.Errorf("stderr does not say what is left out:\n%s", stderr)
	}
	var live, fifo map[string]any
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 || json.Unmarshal([]byte(lines[0]), &live) != nil || json.Unmarshal([]byte(lines[1]), &fifo) != nil {
		t.Fatalf("want two JSON lines:\n%s", out)
	}
	if live["policy"] != "live" || live["avg_jct_s"] != fifo["avg_jct_s"] || live["makespan_s"] != fifo["makespan_s"] {
		t.Errorf("live with a fifo default queue = %v; want fifo's figures %v", live, fifo)
	}
	bad := writeFile(t, "bad.yaml", "- {name: default, policy: sjf}\n")
	code, _, stderr = run("-trace", tr, "-nodes", "2", "-policy", "live", "-queues", bad)
	if code != 2 || !strings.Contains(stderr, "policy") || !strings.Contains(stderr, `"sjf"`) {
		t.Errorf("a queue file with an unknown policy: exit %d, %q", code, stderr)
	}
}

// TestOverloadBadInput: the overload study names the flag and the value
// it cannot use.
func TestOverloadBadInput(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-loads", "0.9,x"}, `-loads: "x"`},
		{[]string{"-policy", "sjff"}, `-policy: unknown policy "sjff"`},
		{[]string{"-lane-shares", "1.5"}, "-lane-shares: 1.5"},
		{[]string{"-overdue-after", "soon"}, `-overdue-after: "soon"`},
		{[]string{"-slices", "oct,nov", "-trace", "../../../../shared/data/traces/philly/philly-2017-09-10.csv"}, `unknown slice "nov"`},
	} {
		var out, errOut strings.Builder
		code := Main(context.Background(), append([]string{"overload"}, tc.args...), &out, &errOut)
		if tc.want == `unknown slice "nov"` && strings.Contains(errOut.String(), "no such file") {
			t.Skip("the Philly trace belongs at ../shared/data/traces/philly/ (CI has it)")
		}
		if code != 2 || !strings.Contains(errOut.String(), tc.want) {
			t.Errorf("overload %v: code %d, %q; want 2 and %q", tc.args, code, errOut.String(), tc.want)
		}
	}
}
