package planner

import "testing"

// NeMo and Megatron-Bridge runs overlap the data-parallel gradient
// reduction with the backward pass and the weight all-gather with the
// next forward (their recipes' DistributedDataParallelConfig); a vector
// that says otherwise keeps its word, and older Megatron-LM runs are not
// assumed to.
func TestBridgeRunsOverlapDP(t *testing.T) {
	var p2, d1 Vector
	for _, v := range publicVectors(t) {
		if v.ID == "P2" {
			p2 = v
		}
	}
	for _, v := range devVectors(t) {
		if v.ID == "D1" {
			d1 = v
		}
	}
	overlap := func(v Vector) bool {
		r, err := v.run(DefaultCatalog(), DefaultStacks())
		if err != nil {
			t.Fatalf("%s: %v", v.ID, err)
		}
		return r.job.overlapDP()
	}
	if !overlap(p2) {
		t.Error("Megatron-Bridge run P2: DP overlap off, want on")
	}
	off := false
	p2.Training.DPOverlap = &off
	if overlap(p2) {
		t.Error("training.dp_overlap false: DP overlap on, want off")
	}
	if overlap(d1) {
		t.Error("Megatron-LM 2021 run D1: DP overlap on, want off")
	}

	// With overlap the exposed reduction shrinks but never below a tenth
	// (the last buckets).
	j := testJob(t, "llama3-70b", "H100", 64, Megatron)
	j.Seq, j.GlobalBatch = 8192, 128
	c := Config{TP: 4, PP: 4, VP: 5, DP: 4, MicroBatch: 1, SP: true, ZeRO: 1}
	on, offv := true, false
	j.OverlapDP = &offv
	exposed := Predict(j, c).Time.DPComm
	j.OverlapDP = &on
	hidden := Predict(j, c).Time.DPComm
	if !(hidden < exposed && hidden >= 0.1*exposed-1e-12) {
		t.Errorf("DP comm %.3g s overlapped, %.3g s not: want less, but at least a tenth", hidden, exposed)
	}
}
