package planner

import (
	"fmt"
	"math"
	"strings"
	"testing"
)

// TestDevVectors is the acceptance test: every development vector
// within its tolerance, mean absolute error on tokens/s per GPU (or step
// time) at most 5%, and the D6 memory cases within 3% (activations) and 5%
// (model states).
func TestDevVectors(t *testing.T) {
	vs := devVectors(t)
	rep := Evaluate(vs, DefaultCatalog(), DefaultStacks())
	if len(rep.NotEvaluated) > 0 {
		t.Errorf("not evaluated: %v", rep.NotEvaluated)
	}
	var b strings.Builder
	for _, r := range rep.Vectors {
		fmt.Fprintf(&b, "%-4s %-26s %-30s predicted %10.4g measured %10.4g error %+6.2f%% (%s)\n",
			r.ID, r.Case, r.Metric, r.Predicted, r.Measured, 100*r.Error, r.Tolerance)
		if !r.WithinTolerance {
			t.Errorf("%s %s %s: predicted %.4g, measured %.4g, error %+.2f%% outside %s",
				r.ID, r.Case, r.Metric, r.Predicted, r.Measured, 100*r.Error, r.Tolerance)
		}
	}
	t.Logf("\n%smean abs error %.2f%%, max %.2f%%", b.String(), 100*rep.MeanAbsError, 100*rep.MaxAbsError)
	if rep.MeanAbsError > 0.05 {
		t.Errorf("mean absolute error %.2f%% > 5%%", 100*rep.MeanAbsError)
	}
	// Every vector that is not memory-only contributes a throughput figure.
	ids := map[string]bool{}
	var mem int
	for _, r := range rep.Vectors {
		if throughputMetric(r.Metric) {
			ids[r.ID] = true
		}
		switch r.Metric {
		case MetricActNone, MetricActSeqSel:
			mem++
			if math.Abs(r.Error) > 0.03 {
				t.Errorf("%s %s %s: %+.2f%% outside 3%%", r.ID, r.Case, r.Metric, 100*r.Error)
			}
		case MetricStates:
			mem++
			if math.Abs(r.Error) > 0.05 {
				t.Errorf("%s %s %s: %+.2f%% outside 5%%", r.ID, r.Case, r.Metric, 100*r.Error)
			}
		}
	}
	for _, v := range vs {
		if len(v.Cases) > 0 && v.Cases[0].Cfg != nil {
			continue
		}
		if !ids[v.ID] {
			t.Errorf("%s produced no throughput figure", v.ID)
		}
	}
	if mem != 12 {
		t.Errorf("got %d D6 memory figures, want 12 (4 cases × 3)", mem)
	}
	if !rep.AllWithinTolerance {
		t.Error("AllWithinTolerance = false")
	}
}

// TestFittedConstants re-runs the fit on every vector (dev and public: one
// fit across all, as issue 21 asks) and fails when the constants in
// stack.go are not its output (so nobody tunes them by hand, and a model
// change forces a refit).
func TestFittedConstants(t *testing.T) {
	if testing.Short() {
		t.Skip("fit is slow-ish; skipped in -short")
	}
	fitted, res := Fit(append(devVectors(t), publicVectors(t)...), DefaultCatalog(), DefaultStacks())
	for kind, want := range DefaultStacks() {
		got := fitted[kind]
		if math.Abs(got.ComputeEfficiency-want.ComputeEfficiency) > 0.0015 ||
			math.Abs(got.NetworkEfficiency-want.NetworkEfficiency) > 0.0015 ||
			math.Abs(got.MoEHostOpSeconds-want.MoEHostOpSeconds) > 1.5e-6 {
			t.Errorf("%s: constants compute=%.3f network=%.3f moe host %.0f µs, fit gives compute=%.3f network=%.3f moe host %.0f µs; update stack.go",
				kind, want.ComputeEfficiency, want.NetworkEfficiency, want.MoEHostOpSeconds*1e6,
				got.ComputeEfficiency, got.NetworkEfficiency, got.MoEHostOpSeconds*1e6)
		}
		if strings.Join(got.FittedOn, ",") != strings.Join(want.FittedOn, ",") {
			t.Errorf("%s: FittedOn %v, fit used %v", kind, want.FittedOn, got.FittedOn)
		}
	}
	for _, r := range res {
		t.Logf("%+v", r)
	}
}

// The fit must move toward the data: starting from poor values, a stack
// fitted on one vector predicts that vector closely.
func TestFitRecoversEfficiency(t *testing.T) {
	vs := devVectors(t)
	var d8 []Vector
	for _, v := range vs {
		if v.ID == "D8" {
			d8 = append(d8, v)
		}
	}
	start := DefaultStacks()
	ds := start[DeepSpeed]
	ds.ComputeEfficiency = 0.3
	start[DeepSpeed] = ds
	before := Evaluate(d8, DefaultCatalog(), start)
	fitted, _ := Fit(d8, DefaultCatalog(), start)
	after := Evaluate(d8, DefaultCatalog(), fitted)
	if !(after.MeanAbsError < 0.01 && before.MeanAbsError > 0.2) {
		t.Errorf("mean abs error before fit %.3f, after %.3f", before.MeanAbsError, after.MeanAbsError)
	}
}

func TestEvaluateReportsOutsideTolerance(t *testing.T) {
	vs := devVectors(t)
	var d1 Vector
	for _, v := range vs {
		if v.ID == "D1" {
			d1 = v
		}
	}
	d1.Derived = Figures{MetricTokensPerGPU: 2 * d1.Derived[MetricTokensPerGPU]}
	rep := Evaluate([]Vector{d1}, DefaultCatalog(), DefaultStacks())
	if len(rep.Vectors) != 1 || rep.Vectors[0].WithinTolerance || rep.AllWithinTolerance {
		t.Fatalf("doubling the measurement must put D1 outside tolerance: %+v", rep)
	}
	if got := rep.Vectors[0].Error; math.Abs(got-(-0.5)) > 0.05 {
		t.Errorf("error %.3f, want about −0.5", got)
	}
}

// A vector that checks one throughput figure but reports another is
// converted with its batch, sequence and GPU count.
func TestEvaluateConvertsMeasuredFigures(t *testing.T) {
	var d9 Vector
	for _, v := range devVectors(t) {
		if v.ID == "D9" {
			d9 = v
		}
	}
	want := Evaluate([]Vector{d9}, DefaultCatalog(), DefaultStacks()).Vectors[0]
	for _, tt := range []struct {
		name   string
		metric string
		figs   Figures
	}{
		// 2048 sequences × 2048 tokens over 64 GPUs at 1039 tokens/s/GPU.
		{"step from tokens per GPU", MetricStep, Figures{MetricTokensPerGPU: 1039}},
		{"tokens per GPU from total", MetricTokensPerGPU, Figures{MetricTokensTotal: 1039 * 64}},
		{"tokens per GPU from samples", MetricTokensPerGPU, Figures{MetricSamples: 1039 * 64 / 2048.0}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			v := d9
			v.Measured, v.Derived = tt.figs, nil
			v.Tolerance.Metric = tt.metric
			rep := Evaluate([]Vector{v}, DefaultCatalog(), DefaultStacks())
			if len(rep.Vectors) != 1 {
				t.Fatalf("rows %+v, not evaluated %v", rep.Vectors, rep.NotEvaluated)
			}
			// Same prediction, same relative error up to the inversion of
			// step time.
			got := rep.Vectors[0].Error
			w := want.Error
			if tt.metric == MetricStep {
				w = 1/(1+want.Error) - 1
			}
			if math.Abs(got-w) > 1e-9 {
				t.Errorf("error %.6f, want %.6f", got, w)
			}
		})
	}
}

func TestFusedAttentionByVector(t *testing.T) {
	a100 := mustGPU(t, "A100")
	h100 := mustGPU(t, "H100")
	for _, tt := range []struct {
		name string
		v    Vector
		kind StackKind
		gpu  GPU
		want bool
	}{
		{"2021 Megatron on A100", Vector{Source: "Narayanan et al. SC'21"}, Megatron, a100, false},
		{"says flash", Vector{Source: "Megatron with FlashAttention-2"}, Megatron, a100, true},
		{"NeMo", Vector{Source: "NVIDIA NeMo benchmark"}, Megatron, a100, true},
		{"Megatron on H100", Vector{Source: "Megatron-LM"}, Megatron, h100, true},
		{"LLM Foundry", Vector{}, FSDP, a100, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.v.fusedAttention(tt.kind, tt.gpu); got != tt.want {
				t.Errorf("fusedAttention = %v, want %v", got, tt.want)
			}
		})
	}
}
