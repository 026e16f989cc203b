package planner

import (
	"math"
	"testing"
)

// Mixtral 8x7B: 46.7B parameters, 12.9B active per token (Jiang et al.
// 2024, "Mixtral of Experts", Sec. 2).
func TestMoEParamsAndFLOPs(t *testing.T) {
	m, err := DefaultCatalog().Model("mixtral-8x7b")
	if err != nil {
		t.Fatal(err)
	}
	if got := float64(m.Params()) / 1e9; math.Abs(got-46.7) > 0.1 {
		t.Errorf("params %.2fB, want 46.7B", got)
	}
	active := float64(int64(m.Layers)*m.LayerMatmulParams()+m.EmbeddingParams()+m.OutputParams()) / 1e9
	if math.Abs(active-12.9) > 0.1 {
		t.Errorf("active params %.2fB, want 12.9B", active)
	}
	// Model FLOPs count only the activated experts: 6 × active matmul
	// weights per token plus attention.
	perTok := ModelFLOPs(m, 4096, 1) / 4096
	if r := perTok / (6 * active * 1e9); r < 1 || r > 1.3 {
		t.Errorf("model FLOPs per token %.3g = %.2f × 6·active", perTok, r)
	}
}

// Expert parallelism shards the experts' states, costs all-to-alls, and
// those are dearer over InfiniBand than inside an NVLink domain.
func TestExpertParallel(t *testing.T) {
	j := testJob(t, "mixtral-8x7b", "H100", 64, Megatron)
	j.Seq, j.GlobalBatch = 4096, 256
	base := Config{TP: 2, PP: 1, DP: 32, MicroBatch: 1, Recompute: RecomputeSelective, SP: true, ZeRO: 1}
	ep4, ep8 := base, base
	ep4.EP, ep8.EP = 4, 8
	for _, c := range []Config{base, ep4, ep8} {
		if err := c.Validate(j); err != nil {
			t.Fatalf("%s: %v", c, err)
		}
	}
	s1, s4 := Memory(j, base).States(), Memory(j, ep4).States()
	if !(s4 < s1/2) {
		t.Errorf("states with ep=4 %.1f GiB, without %.1f GiB: want well under half", float64(s4)/gib, float64(s1)/gib)
	}
	e1, e4, e8 := Predict(j, base), Predict(j, ep4), Predict(j, ep8)
	if e1.Time.EPComm != 0 || e4.Time.EPComm <= 0 {
		t.Errorf("EP time %g (ep=1), %g (ep=4)", e1.Time.EPComm, e4.Time.EPComm)
	}
	// tp=2: ep=4 spans 8 GPUs, one NVLink domain; ep=8 leaves it.
	if !(e8.Time.EPComm > 2*e4.Time.EPComm) {
		t.Errorf("EP over InfiniBand %.3g s, inside NVLink %.3g s: want IB much dearer", e8.Time.EPComm, e4.Time.EPComm)
	}
	// The same tokens and activated experts: model FLOPs do not change.
	if e1.ModelFLOPs != e4.ModelFLOPs {
		t.Errorf("model FLOPs changed with ep: %g vs %g", e1.ModelFLOPs, e4.ModelFLOPs)
	}
	// Padding to a capacity factor of 2 adds expert compute, not model FLOPs.
	jc := j
	jc.CapacityFactor = 2
	if ec := Predict(jc, ep4); !(ec.Time.Compute > e4.Time.Compute) || ec.ModelFLOPs != e4.ModelFLOPs {
		t.Errorf("capacity factor 2: compute %.3g vs %.3g s", ec.Time.Compute, e4.Time.Compute)
	}
	// Search picks an expert-parallel layout for it.
	res := Search(SearchRequest{Job: j, Top: 3})
	if len(res.Best) == 0 || res.Best[0].Config.ep() < 2 {
		t.Errorf("want an expert-parallel plan, got %+v", res.Best)
	}
}

// Dropless routing synchronises host and GPU once per MoE layer, and the
// layer's kernels are then issued one by one: time that grows with the
// GPU's local experts (one grouped-GEMM member each, forward, dgrad and
// wgrad, and their FP8 casts), that padding to a capacity removes (no
// synchronisation), and that a dense model never pays.
func TestMoEHostBound(t *testing.T) {
	j := testJob(t, "mixtral-8x7b", "H100", 64, Megatron)
	j.Seq, j.GlobalBatch = 4096, 256
	j.Stack.MoEHostOpSeconds = 50e-6
	c := Config{TP: 2, PP: 1, DP: 32, MicroBatch: 1, Recompute: RecomputeSelective, SP: true, ZeRO: 1}
	ep1, ep8 := c, c
	ep8.EP = 8
	h1, h8 := Predict(j, ep1).Time.MoEHost, Predict(j, ep8).Time.MoEHost
	if !(h1 > h8 && h8 > 0) {
		t.Errorf("host time ep=1 (8 local experts) %.3g s, ep=8 (1) %.3g s: want both positive, ep=1 dearer", h1, h8)
	}
	// Counted: forward 30 + 2 projections × 8 experts × 1 GEMM, backward
	// 30 + 2 × 8 × (dgrad + wgrad), per layer and micro-batch.
	n := Predict(j, ep1).MicroBatches
	want := float64(n*j.Model.Layers) * (30 + 16 + 30 + 32) * 50e-6
	if !near(h1, want, 1e-9) {
		t.Errorf("host time %.6g s, want %.6g s", h1, want)
	}
	fo, bo := moeHostOps(j, ep1)
	j8 := j
	j8.Precision, j8.FP8Scaling = FP8, FP8Delayed
	fd, bd := moeHostOps(j8, ep1)
	j8.FP8Scaling = FP8Current
	fc, bc := moeHostOps(j8, ep1)
	if !(fo+bo < fd+bd && fd+bd < fc+bc) {
		t.Errorf("kernels bf16 %v, fp8 delayed %v, fp8 current %v: want each cast recipe to add", fo+bo, fd+bd, fc+bc)
	}
	// Full recomputation issues the forward again.
	full := ep1
	full.Recompute = RecomputeFull
	if hf, want := Predict(j, full).Time.MoEHost, h1*(30+16+30+16+30+32)/(30+16+30+32); !near(hf, want, 1e-9) {
		t.Errorf("full recomputation host time %.6g s, want the forward once more (%.6g s)", hf, want)
	}
	jc := j
	jc.CapacityFactor = 1.25
	if got := Predict(jc, ep8).Time.MoEHost; got != 0 {
		t.Errorf("padded to capacity: host time %g, want 0 (no device→host synchronisation)", got)
	}
	dense := testJob(t, "llama3-8b", "H100", 8, Megatron)
	dense.Seq, dense.GlobalBatch = 4096, 64
	dense.Stack.MoEHostOpSeconds = 50e-6
	if got := Predict(dense, Config{TP: 1, PP: 1, DP: 8, MicroBatch: 1}).Time.MoEHost; got != 0 {
		t.Errorf("dense model: host time %g, want 0", got)
	}
}

// The host time per MoE kernel is fitted with the efficiencies, and only
// where an MoE vector depends on it: a fit on dense vectors leaves it at
// 0, whatever was passed in (nothing was fitted to it); beside them, with the efficiencies pinned by the dense
// runs, an MoE vector's misses move it and not the efficiencies.
func TestFitMoEHostTime(t *testing.T) {
	var d2 []Vector
	for _, v := range devVectors(t) {
		if v.ID == "D2" {
			d2 = append(d2, v)
		}
	}
	base := DefaultStacks()
	for k, s := range base {
		s.MoEHostOpSeconds = 7e-6
		base[k] = s
	}
	fitted, _ := Fit(d2, DefaultCatalog(), base)
	if got := fitted[Megatron].MoEHostOpSeconds; got != 0 {
		t.Errorf("dense-only fit set the MoE host time to %g, want 0", got)
	}
	var p4 []Vector
	for _, v := range publicVectors(t) {
		if v.ID == "P4" {
			p4 = append(p4, v)
		}
	}
	zero := DefaultStacks()
	for k, s := range zero {
		s.MoEHostOpSeconds = 0
		zero[k] = s
	}
	before := Evaluate(p4, DefaultCatalog(), zero)
	fitted, res := Fit(append(devVectors(t), p4...), DefaultCatalog(), zero)
	after := Evaluate(p4, DefaultCatalog(), fitted)
	if !(before.MeanAbsError > 0.5 && after.MeanAbsError < 0.05 && res[0].MoEHostOpSeconds > 0) {
		t.Errorf("P4 error %.3f with no host time, %.3f after fitting %g s", before.MeanAbsError, after.MeanAbsError, res[0].MoEHostOpSeconds)
	}
	if dense, _ := Fit(devVectors(t), DefaultCatalog(), zero); math.Abs(dense[Megatron].NetworkEfficiency-res[0].NetworkEfficiency) > 0.01 {
		t.Errorf("network efficiency %.3f with P4, %.3f without: the MoE vector must not move it", res[0].NetworkEfficiency, dense[Megatron].NetworkEfficiency)
	}
}
