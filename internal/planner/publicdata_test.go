package planner

import (
	"os"
	"strings"
	"testing"
)

// The public vectors (testdata/public-vectors.json) are published runs
// kept beside the dev vectors for cross-validation. Every one cites its
// source, and every one is either evaluated or reported as not evaluated
// with a reason: MXFP8 (P7) is refused on purpose, and P18's EP 32 over
// TP 2 × DP 16 (Megatron-Core's MoE parallel folding) is outside the
// layouts the planner models.
func TestPublicVectors(t *testing.T) {
	vs := publicVectors(t)
	for _, v := range vs {
		if !strings.Contains(v.Source, "http") {
			t.Errorf("%s: source %q does not cite a URL", v.ID, v.Source)
		}
		if v.Invalid != "" {
			t.Errorf("%s breaks the schema: %s", v.ID, v.Invalid)
		}
	}
	rep := Evaluate(vs, DefaultCatalog(), DefaultStacks())
	if got := len(rep.Vectors) + len(rep.NotEvaluated); got != len(vs) {
		t.Errorf("%d results and %d not evaluated for %d vectors", len(rep.Vectors), len(rep.NotEvaluated), len(vs))
	}
	want := map[string]string{
		"P7":  "MXFP8 are not modelled",
		"P18": "ep=32 does not divide dp×cp=16",
	}
	for _, ne := range rep.NotEvaluated {
		if w, ok := want[ne.ID]; !ok || !strings.Contains(ne.Reason, w) {
			t.Errorf("%s not evaluated: %q, want it to say %q", ne.ID, ne.Reason, want[ne.ID])
		}
		delete(want, ne.ID)
	}
	if len(want) != 0 {
		t.Errorf("evaluated, want not evaluated: %v", want)
	}
}

// publicVectors loads testdata/public-vectors.json.
func publicVectors(t testing.TB) []Vector {
	t.Helper()
	b, err := os.ReadFile("testdata/public-vectors.json")
	if err != nil {
		t.Fatal(err)
	}
	vs, err := ParseVectors(b)
	if err != nil {
		t.Fatal(err)
	}
	return vs
}
