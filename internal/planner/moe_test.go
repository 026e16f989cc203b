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
