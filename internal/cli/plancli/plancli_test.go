package plancli

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/gangway/gangway/internal/base/testenv"
	"github.com/gangway/gangway/internal/planner"
	"github.com/goccy/go-yaml"
)

var update = flag.Bool("update", false, "rewrite the dev-vector table in ../../planner/README.md")

func run(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = Main(context.Background(), args, &out, &errb)
	return code, out.String(), errb.String()
}

// devVectorsPath finds shared/data/planner/dev-vectors.json above the
// working directory, or skips.
func devVectorsPath(t *testing.T) string {
	return testenv.SharedData(t, filepath.Join("planner", "dev-vectors.json"))
}

var search = []string{"--model", "llama3-70b", "--gpus", "1024", "--gpu", "H100", "--seq", "8192", "--global-batch", "1024"}

func TestUsageErrors(t *testing.T) {
	for _, tt := range []struct {
		name string
		args []string
		want string
	}{
		{"nothing", nil, "missing --model, --gpu, --gpus, --seq, --global-batch"},
		{"unknown flag", append([]string{"--bogus"}, search...), "flag provided but not defined: -bogus"},
		{"bad number", []string{"--gpus", "many"}, `invalid value "many" for flag -gpus`},
		{"zero gpus", []string{"--model", "llama3-70b", "--gpus", "0", "--gpu", "H100", "--seq", "8192", "--global-batch", "8"}, "missing --gpus"},
		{"negative seq", []string{"--model", "llama3-70b", "--gpus", "8", "--gpu", "H100", "--seq", "-1", "--global-batch", "8"}, "--seq must be positive"},
		{"bad output", append([]string{"-o", "xml"}, search...), `invalid value "xml" for flag -o: want table, json or yaml`},
		{"unknown model", []string{"--model", "gpt-9", "--gpus", "8", "--gpu", "H100", "--seq", "8", "--global-batch", "8"}, `model "gpt-9"`},
		{"unknown gpu", []string{"--model", "llama3-8b", "--gpus", "8", "--gpu", "TPU", "--seq", "8", "--global-batch", "8"}, `gpu "TPU"`},
		{"unknown stack", append([]string{"--stack", "jax"}, search...), `unknown stack "jax"`},
		{"stray argument", append(search, "extra"), `unexpected argument "extra"`},
		{"pp without tp", append([]string{"--pp", "4"}, search...), "--pp and --dp need --tp"},
		{"evaluate and fit", []string{"--evaluate", "a.json", "--fit", "b.json"}, "exclusive"},
		{"serve without model", []string{"serve", "--gpu", "H100"}, "needs --model and --gpu"},
		{"serve bad precision", []string{"serve", "--model", "llama3-70b", "--gpu", "H100", "--precision", "fp4"}, `unknown precision "fp4"`},
		{"serve bad kv precision", []string{"serve", "--model", "llama3-70b", "--gpu", "H100", "--kv-precision", "int4"}, "--kv-precision must be"},
		{"serve bad utilization", []string{"serve", "--model", "llama3-70b", "--gpu", "H100", "--memory-utilization", "1.5"}, "--memory-utilization"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			code, stdout, stderr := run(t, tt.args...)
			if code != 2 {
				t.Errorf("exit %d, want 2 (stdout %q)", code, stdout)
			}
			if !strings.Contains(stderr, tt.want) {
				t.Errorf("stderr %q does not contain %q", stderr, tt.want)
			}
			if stdout != "" {
				t.Errorf("usage error printed to stdout: %q", stdout)
			}
			if strings.Contains(stderr, "usage:") {
				t.Errorf("a usage error should name the problem, not print the manual: %q", stderr)
			}
		})
	}
}

func TestHelp(t *testing.T) {
	code, _, stderr := run(t, "--help")
	if code != 0 || !strings.Contains(stderr, "gangway plan --evaluate") {
		t.Errorf("--help: exit %d, stderr %q", code, stderr)
	}
}

func TestSearchTable(t *testing.T) {
	code, out, stderr := run(t, search...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, want := range []string{
		"llama3-70b (70.6B params) on 1024 × H100-SXM",
		"stack: megatron-lm (compute_efficiency=",
		"TOK/s/GPU", "MFU", "BOTTLENECK", "WEIGHTS", "ACTIV",
		"out-of-memory:", "tp-exceeds-nvlink-domain:", "bubble-too-large:",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	// Five numbered rows.
	for _, row := range []string{"\n1 ", "\n5 "} {
		if !strings.Contains(out, row) {
			t.Errorf("table lacks row %q:\n%s", row, out)
		}
	}
}

func TestSearchJSON(t *testing.T) {
	code, out, stderr := run(t, append([]string{"-o", "json", "--top", "3"}, search...)...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var got struct {
		Request planner.Request
		Stack   string `json:"stack"`
		Best    []struct {
			Config             planner.Config          `json:"config"`
			Memory             planner.MemoryBreakdown `json:"memory"`
			StepS              float64                 `json:"step_s"`
			TokensPerSecPerGPU float64                 `json:"tokens_per_s_per_gpu"`
			MFU                float64                 `json:"mfu"`
			Bottleneck         string                  `json:"bottleneck"`
		} `json:"best"`
		Rejected []planner.Rejection `json:"rejected"`
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("output is not JSON: %v\n%s", err, out)
	}
	if len(got.Best) != 3 || got.Request.GPUs != 1024 || !strings.Contains(got.Stack, "fitted on") {
		t.Fatalf("unexpected result: %+v", got)
	}
	for _, b := range got.Best {
		c := b.Config
		if c.TP*c.PP*c.DP != 1024 || b.TokensPerSecPerGPU <= 0 || b.MFU <= 0 || b.Memory.TotalBytes <= 0 || b.Bottleneck == "" {
			t.Errorf("implausible entry %+v", b)
		}
	}
	if len(got.Rejected) == 0 {
		t.Error("no rejections reported")
	}
}

func TestCheck(t *testing.T) {
	code, out, _ := run(t, append([]string{"--tp", "16", "--pp", "8"}, search...)...)
	if code != 0 || !strings.Contains(out, "cannot run") || !strings.Contains(out, "NVLink domain of 8") {
		t.Errorf("tp=16: exit %d\n%s", code, out)
	}
	code, out, _ = run(t, append([]string{"--tp", "8", "--pp", "4"}, search...)...)
	if code != 0 || !strings.Contains(out, "fits: best with micro-batch") {
		t.Errorf("tp=8 pp=4: exit %d\n%s", code, out)
	}
	code, out, _ = run(t, append([]string{"--tp", "8", "--pp", "4", "-o", "json"}, search...)...)
	var v planner.Verdict
	if err := json.Unmarshal([]byte(out), &v); err != nil || code != 0 || !v.OK || v.Plan.DP != 32 {
		t.Errorf("json check: exit %d, err %v, %+v", code, err, v)
	}
}

// evaluation is the JSON shape `gangway plan --evaluate -o json` promises.
type evaluation struct {
	Vectors []struct {
		ID              string   `json:"id"`
		Case            string   `json:"case"`
		Metric          string   `json:"metric"`
		Predicted       *float64 `json:"predicted"`
		Measured        *float64 `json:"measured"`
		Error           *float64 `json:"error"`
		WithinTolerance *bool    `json:"within_tolerance"`
		Stack           string   `json:"stack"`
	} `json:"vectors"`
	MeanAbsError       *float64 `json:"mean_abs_error"`
	AllWithinTolerance bool     `json:"all_within_tolerance"`
	Stacks             []string `json:"stacks"`
}

func TestEvaluateJSON(t *testing.T) {
	path := devVectorsPath(t)
	code, out, stderr := run(t, "--evaluate", path, "-o", "json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var ev evaluation
	if err := json.Unmarshal([]byte(out), &ev); err != nil {
		t.Fatalf("not JSON: %v", err)
	}
	if ev.MeanAbsError == nil || *ev.MeanAbsError > 0.05 || !ev.AllWithinTolerance {
		t.Errorf("mean_abs_error %v, all_within_tolerance %v", ev.MeanAbsError, ev.AllWithinTolerance)
	}
	ids := map[string]bool{}
	for _, v := range ev.Vectors {
		if v.ID == "" || v.Predicted == nil || v.Measured == nil || v.Error == nil || v.WithinTolerance == nil {
			t.Errorf("incomplete row %+v", v)
			continue
		}
		ids[v.ID] = true
		if v.Metric == "tokens_per_s_per_gpu" && !strings.Contains(v.Stack, "compute_efficiency=") {
			t.Errorf("%s: row does not name the stack's fitted efficiency: %q", v.ID, v.Stack)
		}
		if want := (*v.Predicted - *v.Measured) / *v.Measured; *v.Error != want {
			t.Errorf("%s: error %v, want (predicted−measured)/measured = %v", v.ID, *v.Error, want)
		}
	}
	for _, id := range []string{"D1", "D2", "D3", "D4", "D5", "D6", "D7", "D8", "D9", "D10"} {
		if !ids[id] {
			t.Errorf("no row for %s", id)
		}
	}
	if len(ev.Stacks) != 3 {
		t.Errorf("stacks %v: each prediction must name the fitted efficiencies", ev.Stacks)
	}
}

func TestEvaluateStrict(t *testing.T) {
	data, err := os.ReadFile(devVectorsPath(t))
	if err != nil {
		t.Fatal(err)
	}
	var raw []map[string]any
	if err := json.Unmarshal(data, &raw); err != nil {
		t.Fatal(err)
	}
	d1 := raw[0]
	d1["derived"].(map[string]any)["tokens_per_s_per_gpu"] = 5000.0 // far from any prediction
	path := filepath.Join(t.TempDir(), "v.json")
	b, _ := json.Marshal([]any{d1})
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if code, out, _ := run(t, "--evaluate", path); code != 0 || !strings.Contains(out, "all within tolerance: false") {
		t.Errorf("non-strict: exit %d\n%s", code, out)
	}
	if code, _, stderr := run(t, "--evaluate", path, "--strict"); code != 1 || !strings.Contains(stderr, "outside their tolerance") {
		t.Errorf("strict: exit %d, stderr %q", code, stderr)
	}
	if code, _, stderr := run(t, "--evaluate", filepath.Join(t.TempDir(), "missing.json")); code != 1 || !strings.Contains(stderr, "read vectors") {
		t.Errorf("missing file: exit %d, stderr %q", code, stderr)
	}
}

// TestFit: --fit on every vector (dev and public, concatenated) gives the
// built-in constants, which are fitted once across all of them.
func TestFit(t *testing.T) {
	var all []json.RawMessage
	for _, path := range []string{devVectorsPath(t), filepath.Join("..", "..", "planner", "testdata", "public-vectors.json")} {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		var vs []json.RawMessage
		if err := json.Unmarshal(b, &vs); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		all = append(all, vs...)
	}
	path := filepath.Join(t.TempDir(), "all.json")
	b, _ := json.Marshal(all)
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, stderr := run(t, "--fit", path, "-o", "json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var res []planner.FitResult
	if err := json.Unmarshal([]byte(out), &res); err != nil || len(res) != 1 {
		t.Fatalf("fit output %v: %s", err, out)
	}
	for kind, want := range planner.DefaultStacks() {
		if res[0].ComputeEfficiency != want.ComputeEfficiency || res[0].NetworkEfficiency != want.NetworkEfficiency ||
			res[0].MoEHostOpSeconds != want.MoEHostOpSeconds {
			t.Errorf("%s: fit %v/%v/%v, built-in %v/%v/%v", kind, res[0].ComputeEfficiency, res[0].NetworkEfficiency, res[0].MoEHostOpSeconds,
				want.ComputeEfficiency, want.NetworkEfficiency, want.MoEHostOpSeconds)
		}
	}
}

func TestCatalogFlag(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "extra.yaml")
	if err := os.WriteFile(good, []byte(`models:
  - name: tiny-1b
    layers: 16
    hidden: 2048
    heads: 16
    kv_heads: 4
    ffn: 8192
    vocab: 32000
    mlp: swiglu
gpus:
  - name: MI300X
    memory_gib: 192
    hbm_tb_per_s: 5.3
    bf16_tflops: 1307
    fp8_tflops: 2615
    nvlink_gb_per_s: 896
    nvlink_domain: 8
    gpus_per_node: 8
    nic_gbit_per_s: 400
`), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, stderr := run(t, "--catalog", good, "--model", "tiny-1b", "--gpu", "MI300X", "--gpus", "16", "--seq", "4096", "--global-batch", "64")
	if code != 0 || !strings.Contains(out, "tiny-1b") || !strings.Contains(out, "MI300X") {
		t.Errorf("exit %d, stderr %q\n%s", code, stderr, out)
	}
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("models:\n  - name: x\n    layer: 2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, stderr = run(t, "--catalog", bad, "--model", "x", "--gpu", "H100", "--gpus", "8", "--seq", "8", "--global-batch", "8")
	if code != 1 || !strings.Contains(stderr, "[3:5]") || !strings.Contains(stderr, `unknown field "layer"`) {
		t.Errorf("bad catalog: exit %d, stderr %q", code, stderr)
	}
}

func TestServe(t *testing.T) {
	code, out, stderr := run(t, "serve", "--model", "llama3-70b", "--gpu", "H100", "--precision", "fp8", "-o", "json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var est planner.ServeEstimate
	if err := json.Unmarshal([]byte(out), &est); err != nil {
		t.Fatal(err)
	}
	if est.MinTP != 2 || est.KVBytesPerToken != 327680 || est.WeightsBytes <= 0 || len(est.Options) != 4 {
		t.Errorf("serve estimate %+v", est)
	}
	code, out, _ = run(t, "serve", "--model", "llama3-405b", "--gpu", "A100", "--precision", "bf16")
	if code != 0 || !strings.Contains(out, "does not fit") {
		t.Errorf("405B on A100: exit %d\n%s", code, out)
	}
	code, out, _ = run(t, "serve", "--model", "llama3-8b", "--gpu", "H100", "--precision", "int4")
	if code != 0 || !strings.Contains(out, "minimum TP: 1") || !strings.Contains(out, "KV CAPACITY") {
		t.Errorf("8B int4: exit %d\n%s", code, out)
	}
}

// TestReadmeTable keeps the table of dev vectors in ../../planner/README.md equal to
// what `gangway plan --evaluate` prints; -update rewrites it.
func TestReadmeTable(t *testing.T) {
	vs, err := readVectors(devVectorsPath(t))
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := WriteEvaluationMarkdown(&b, planner.Evaluate(vs, planner.DefaultCatalog(), planner.DefaultStacks())); err != nil {
		t.Fatal(err)
	}
	const begin, end = "<!-- BEGIN dev-vectors -->\n", "<!-- END dev-vectors -->"
	readme, err := os.ReadFile("../../planner/README.md")
	if err != nil {
		t.Fatal(err)
	}
	s := string(readme)
	i, j := strings.Index(s, begin), strings.Index(s, end)
	if i < 0 || j < i {
		t.Fatalf("../../planner/README.md lacks the %q … %q markers", begin, end)
	}
	want := s[:i+len(begin)] + b.String() + s[j:]
	if want == s {
		return
	}
	if *update {
		if err := os.WriteFile("../../planner/README.md", []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Errorf("../../planner/README.md's dev-vector table is stale; run go test ./internal/cli/plancli -run TestReadmeTable -update")
}

// TestSearchYAML: -o yaml is the JSON answer re-spelled, integers kept
// integers (tp: 8, not 8.0).
func TestSearchYAML(t *testing.T) {
	code, out, stderr := run(t, append([]string{"-o", "yaml", "--top", "1"}, search...)...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var got map[string]any
	if err := yaml.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("not YAML: %v\n%s", err, out)
	}
	if _, ok := got["best"]; !ok {
		t.Errorf("no best plans:\n%s", out)
	}
	if !regexp.MustCompile(`(?m)^\s+tp: [0-9]+$`).MatchString(out) {
		t.Errorf("tp is not written as an integer:\n%s", out)
	}
}

func TestCrossValidate(t *testing.T) {
	if testing.Short() {
		t.Skip("refits once per vector")
	}
	code, out, stderr := run(t, "--evaluate", devVectorsPath(t), "--cross-validate")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, want := range []string{"LEAVE-ONE-OUT", "in-sample", "leave-one-out", "not evaluated: D6: memory-only"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if code, _, _ := run(t, "--cross-validate"); code != 2 {
		t.Errorf("--cross-validate alone: exit %d, want 2", code)
	}
}

// --evaluate given twice evaluates both files as one set (the dev and the
// public vectors together), and refuses an ID the two share.
func TestEvaluateSeveralFiles(t *testing.T) {
	pub := filepath.Join("..", "..", "planner", "testdata", "public-vectors.json")
	code, out, stderr := run(t, "--evaluate", devVectorsPath(t), "--evaluate", pub, "-o", "json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var rep struct {
		Vectors []struct {
			ID string `json:"id"`
		} `json:"vectors"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	ids := map[string]bool{}
	for _, v := range rep.Vectors {
		ids[v.ID] = true
	}
	if !ids["D1"] || !ids["P1"] {
		t.Errorf("evaluated %v; want the dev (D1) and the public (P1) vectors together", ids)
	}
	code, _, stderr = run(t, "--evaluate", pub, "--evaluate", pub)
	if code == 0 || !strings.Contains(stderr, "vector P1 is also in") {
		t.Errorf("the same file twice: exit %d, %q; want a refusal naming the shared ID", code, stderr)
	}
}
