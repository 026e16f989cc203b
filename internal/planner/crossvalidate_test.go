package planner

import (
	"math"
	"strings"
	"testing"
)

// TestCrossValidate: every vector with a throughput figure gets a held-out
// row, the memory-only one is listed with its reason, and the held-out
// error is the honest (larger) figure.
func TestCrossValidate(t *testing.T) {
	if testing.Short() {
		t.Skip("refits once per vector")
	}
	vs := devVectors(t)
	cv := CrossValidate(vs, DefaultCatalog(), DefaultStacks())
	ids := map[string]bool{}
	for _, r := range cv.Rows {
		ids[r.ID] = true
		if want := (r.HeldOut - r.Measured) / r.Measured; math.Abs(r.HeldError-want) > 1e-12 {
			t.Errorf("%s: loo error %v, want %v", r.ID, r.HeldError, want)
		}
	}
	for _, v := range vs {
		if !memoryOnly(v) && !ids[v.ID] {
			t.Errorf("%s has no leave-one-out row", v.ID)
		}
	}
	if len(cv.NotEvaluated) != 1 || cv.NotEvaluated[0].ID != "D6" || !strings.Contains(cv.NotEvaluated[0].Reason, "memory-only") {
		t.Errorf("not evaluated %v, want D6 as memory-only", cv.NotEvaluated)
	}
	if cv.LOOMeanAbsError < cv.InSampleMeanAbsError {
		t.Errorf("leave-one-out %.4f below in-sample %.4f", cv.LOOMeanAbsError, cv.InSampleMeanAbsError)
	}
	t.Logf("in-sample %.2f%%, leave-one-out %.2f%% (max %.2f%%)", 100*cv.InSampleMeanAbsError, 100*cv.LOOMeanAbsError, 100*cv.LOOMaxAbsError)
}

// A vector that cannot run is reported with its reason and counted, never
// dropped.
func TestEvaluateListsWhatItCannotRun(t *testing.T) {
	vs := devVectors(t)
	bad := vs[0]
	bad.ID = "X1"
	bad.Hardware.GPU = "TPU-v9"
	bad.Hardware.BF16TFLOPs = 0
	rep := Evaluate([]Vector{vs[0], bad}, DefaultCatalog(), DefaultStacks())
	if rep.Evaluated != 1 {
		t.Errorf("evaluated %d, want 1", rep.Evaluated)
	}
	if len(rep.NotEvaluated) != 1 || rep.NotEvaluated[0].ID != "X1" || !strings.Contains(rep.NotEvaluated[0].Reason, "TPU-v9") {
		t.Errorf("not evaluated %v, want X1 naming its GPU", rep.NotEvaluated)
	}
}
