package planner

import (
	"errors"
	"strings"
	"testing"
)

// FP8 runs the linear layers' GEMMs at the FP8 peak with half-size
// inputs, pays for the casts (more under current scaling), keeps the
// optimizer states as they were, adds the FP8 weight copies and halves
// the linear layers' saved inputs.
func TestFP8(t *testing.T) {
	j := testJob(t, "llama3-70b", "H100", 64, Megatron)
	j.Seq, j.GlobalBatch = 8192, 64
	c := Config{TP: 8, PP: 4, VP: 5, DP: 2, MicroBatch: 1, Recompute: RecomputeSelective, SP: true, ZeRO: 1}
	bf := Predict(j, c)
	j8 := j
	j8.Precision = FP8
	f8 := Predict(j8, c)
	jc := j8
	jc.FP8Scaling = FP8Current
	cur := Predict(jc, c)
	if !(f8.StepSeconds < bf.StepSeconds && f8.StepSeconds > bf.StepSeconds/2) {
		t.Errorf("fp8 step %.2f s, bf16 %.2f s: want faster, not twice", f8.StepSeconds, bf.StepSeconds)
	}
	if !(f8.Time.MemoryBound > bf.Time.MemoryBound) {
		t.Errorf("casts add memory-bound time: fp8 %.3f s, bf16 %.3f s", f8.Time.MemoryBound, bf.Time.MemoryBound)
	}
	if !(cur.Time.MemoryBound > f8.Time.MemoryBound) {
		t.Errorf("current scaling's amax pass: %.3f s, delayed %.3f s", cur.Time.MemoryBound, f8.Time.MemoryBound)
	}
	if f8.Memory.OptimizerBytes != bf.Memory.OptimizerBytes || f8.Memory.GradsBytes != bf.Memory.GradsBytes {
		t.Error("fp8 must leave gradients and optimizer states as they are")
	}
	if !(f8.Memory.WeightsBytes > bf.Memory.WeightsBytes && f8.Memory.ActivationBytes < bf.Memory.ActivationBytes) {
		t.Errorf("fp8 weights %d vs %d, activations %d vs %d", f8.Memory.WeightsBytes, bf.Memory.WeightsBytes,
			f8.Memory.ActivationBytes, bf.Memory.ActivationBytes)
	}
	// MFU is against the FP8 peak.
	if r := f8.MFU / (f8.ModelFLOPs / (1979e12 * 64 * f8.StepSeconds)); r < 0.999 || r > 1.001 {
		t.Errorf("fp8 MFU not against the FP8 peak: ratio %.4f", r)
	}
}

func TestFP8Requests(t *testing.T) {
	cat := DefaultCatalog()
	base := Request{Model: "llama3-8b", GPU: "H100", GPUs: 8, Seq: 4096, GlobalBatch: 64, Precision: "fp8"}
	for _, tt := range []struct {
		name string
		edit func(*Request)
		want string
	}{
		{"A100 has no FP8", func(r *Request) { r.GPU = "A100" }, "needs FP8 tensor cores"},
		{"unknown recipe", func(r *Request) { r.FP8Scaling = "mxfp8" }, "unknown fp8 scaling \"mxfp8\"; accepted: delayed"},
		{"scaling without fp8", func(r *Request) { r.Precision, r.FP8Scaling = "bf16", "current" }, "needs precision fp8"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := base
			tt.edit(&r)
			_, _, err := cat.BestPlan(r)
			if !errors.Is(err, ErrBadRequest) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err %v, want ErrBadRequest saying %q", err, tt.want)
			}
		})
	}
	r := base
	r.FP8Scaling = "current"
	if p, reason, err := cat.BestPlan(r); err != nil || p == nil {
		t.Errorf("fp8 with current scaling: %v %s", err, reason)
	}
}
