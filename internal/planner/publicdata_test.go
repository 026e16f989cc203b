package planner

import (
	"os"
	"strings"
	"testing"
)

// The public vectors (testdata/public-vectors.json) are published runs
// kept beside the dev vectors for cross-validation. Every one cites its
// source, and every one is either evaluated or reported as not evaluated
// with a reason; MXFP8 is the one refused on purpose.
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
	for _, ne := range rep.NotEvaluated {
		if ne.Reason == "" || (ne.ID == "P7") != strings.Contains(ne.Reason, "MXFP8") {
			t.Errorf("%s not evaluated: %q", ne.ID, ne.Reason)
		}
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
