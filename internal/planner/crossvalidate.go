package planner

import (
	"fmt"
	"math"
)

// CVRow is one throughput figure of one vector, predicted twice: with the
// efficiencies fitted on every vector (in-sample) and with those fitted on
// every vector but this one (leave-one-out).
type CVRow struct {
	ID        string  `json:"id"`
	Case      string  `json:"case,omitempty"`
	Metric    string  `json:"metric"`
	Measured  float64 `json:"measured"`
	InSample  float64 `json:"in_sample_predicted"`
	InError   float64 `json:"in_sample_error"`
	HeldOut   float64 `json:"loo_predicted"`
	HeldError float64 `json:"loo_error"`
	// Stack is the stack and efficiencies the held-out prediction used.
	Stack string `json:"loo_stack"`
}

// CrossValidation is the leave-one-out evaluation of a vector file.
type CrossValidation struct {
	Rows []CVRow `json:"vectors"`
	// InSampleMeanAbsError and LOOMeanAbsError are mean |error| over the
	// rows; LOOMaxAbsError the largest held-out one.
	InSampleMeanAbsError float64 `json:"in_sample_mean_abs_error"`
	LOOMeanAbsError      float64 `json:"loo_mean_abs_error"`
	LOOMaxAbsError       float64 `json:"loo_max_abs_error"`
	// NotEvaluated lists every vector or figure with no row, and why.
	NotEvaluated []Skip `json:"not_evaluated"`
}

// CrossValidate fits on all vectors but one and predicts the one left
// out, for every vector with a throughput figure (tokens/s per GPU, step
// time and the like); memory-only vectors have nothing fitted and are
// listed as not evaluated. The in-sample prediction beside it uses the fit
// on every vector. base supplies what Fit does not fit.
func CrossValidate(vectors []Vector, cat *Catalog, base map[StackKind]Stack) CrossValidation {
	cache := newFitCache()
	idx := make([]int, len(vectors))
	for i := range idx {
		idx[i] = i
	}
	all, _ := fitCached(vectors, idx, cat, base, cache)
	in := Evaluate(vectors, cat, all)
	var cv CrossValidation
	cv.NotEvaluated = append(cv.NotEvaluated, in.NotEvaluated...)
	key := func(r Result) string { return r.ID + "\x00" + r.Case + "\x00" + r.Metric }
	inRows := map[string]Result{}
	for _, r := range in.Vectors {
		inRows[key(r)] = r
	}
	for i, v := range vectors {
		if memoryOnly(v) {
			cv.NotEvaluated = append(cv.NotEvaluated, Skip{ID: v.ID,
				Reason: "memory-only vector: no throughput figure, nothing fitted to leave out"})
			continue
		}
		rest := make([]int, 0, len(vectors)-1)
		rest = append(rest, idx[:i]...)
		rest = append(rest, idx[i+1:]...)
		fitted, _ := fitCached(vectors, rest, cat, base, cache)
		held := Evaluate([]Vector{v}, cat, fitted)
		for _, r := range held.Vectors {
			if !throughputMetric(r.Metric) {
				continue
			}
			ir, ok := inRows[key(r)]
			if !ok {
				continue
			}
			cv.Rows = append(cv.Rows, CVRow{ID: r.ID, Case: r.Case, Metric: r.Metric, Measured: r.Measured,
				InSample: ir.Predicted, InError: ir.Error, HeldOut: r.Predicted, HeldError: r.Error, Stack: r.Stack})
		}
	}
	for _, r := range cv.Rows {
		cv.InSampleMeanAbsError += math.Abs(r.InError)
		cv.LOOMeanAbsError += math.Abs(r.HeldError)
		cv.LOOMaxAbsError = math.Max(cv.LOOMaxAbsError, math.Abs(r.HeldError))
	}
	if n := float64(len(cv.Rows)); n > 0 {
		cv.InSampleMeanAbsError /= n
		cv.LOOMeanAbsError /= n
	}
	return cv
}

// memoryOnly reports whether a vector holds only memory cases (D6).
func memoryOnly(v Vector) bool { return len(v.Cases) > 0 && v.Cases[0].Cfg != nil }

// Skip is a vector, or one figure of it, that was not evaluated.
type Skip struct {
	ID     string `json:"id"`
	Case   string `json:"case,omitempty"`
	Reason string `json:"reason"`
}

func (s Skip) String() string {
	if s.Case != "" {
		return fmt.Sprintf("%s %s: %s", s.ID, s.Case, s.Reason)
	}
	return fmt.Sprintf("%s: %s", s.ID, s.Reason)
}
