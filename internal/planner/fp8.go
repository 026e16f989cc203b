package planner

import (
	"fmt"
	"strings"
)

// FP8 training as Transformer Engine runs it (Micikevicius et al. 2022,
// "FP8 Formats for Deep Learning"; NVIDIA Transformer Engine docs): the
// linear layers' GEMMs — forward, dgrad and wgrad — take FP8 inputs (E4M3
// activations and weights, E5M2 gradients) at the GPU's FP8 tensor-core
// peak and write 16-bit outputs; attention's core and the output layer
// stay in BF16 (Megatron-LM's output layer is not a TE linear); master
// weights, gradients and Adam states keep their 16/32-bit formats.
//
// What FP8 costs besides the GEMMs:
//
//   - casts: every GEMM input that is not FP8 yet is cast, fused with the
//     transpose the other backward GEMM needs (TE's cast_transpose): the
//     forward reads each activation input in 16 bits and writes it twice
//     in 8 (2 + 1 + 1 bytes per element); the backward does the same for
//     each output gradient. Weights are cast once per step and their FP8
//     copies cached across micro-batches (not timed per micro-batch).
//   - scaling: delayed (per-tensor) scaling takes the scale from an amax
//     history the cast kernel itself updates — no extra pass; current
//     (per-tensor) scaling needs the tensor's amax before casting it, one
//     more 16-bit read of each cast tensor (2 bytes per element).
//   - memory: the FP8 weight and its transpose, 2 bytes per parameter
//     beside the 16-bit weights; the linear layers' saved inputs are FP8,
//     half their 16-bit size.

// FP8Scaling is how FP8 scales are chosen.
type FP8Scaling string

// The scaling recipes the planner models.
const (
	// FP8Delayed: per-tensor scales from an amax history (TE's
	// DelayedScaling, its default through 2024).
	FP8Delayed FP8Scaling = "delayed"
	// FP8Current: per-tensor scales from the tensor being cast
	// (Float8CurrentScaling).
	FP8Current FP8Scaling = "current"
)

// ParseFP8Scaling reads a recipe name: "" or delayed / tensorwise-delayed
// / DelayedScaling; current / tensorwise / Float8CurrentScaling. Other
// recipes (block-wise, MXFP8) are refused with the accepted forms.
func ParseFP8Scaling(s string) (FP8Scaling, error) {
	n := normaliseName(s)
	switch n {
	case "", "delayed", "delayed-scaling", "delayedscaling", "per-tensor-delayed", "tensorwise-delayed", "hybrid", "hybrid-delayed":
		return FP8Delayed, nil
	case "current", "current-scaling", "float8currentscaling", "per-tensor-current", "tensorwise", "tensorwise-current", "dynamic":
		return FP8Current, nil
	}
	return "", fmt.Errorf("unknown fp8 scaling %q; accepted: delayed (per-tensor delayed, tensorwise-delayed, DelayedScaling), "+
		"current (per-tensor current, tensorwise, Float8CurrentScaling); block-wise and MXFP8 are not modelled", s)
}

// fp8 reports whether the job's linear layers run in FP8 on FP8 tensor
// cores.
func (j Job) fp8() bool { return j.Precision == FP8 && j.Cluster.GPU.FP8FLOPS > 0 }

// fp8CastBytesPerElement is the HBM traffic of casting one 16-bit element
// to FP8 with its transpose, plus the amax pass of current scaling.
func (j Job) fp8CastBytesPerElement() float64 {
	b := 2.0 + 1 + 1
	if j.FP8Scaling == FP8Current {
		b += 2
	}
	return b
}

// fp8CastTime is the forward and backward cast time of a layer's GEMMs:
// each forward input A (m×k) and each backward output gradient (m×n).
func fp8CastTime(j Job, gs []gemm, hbm float64) (fwd, bwd float64) {
	per := j.fp8CastBytesPerElement()
	for _, g := range gs {
		fwd += g.m * g.k * g.batch * per / hbm
		bwd += g.m * g.n * g.batch * per / hbm
	}
	return fwd, bwd
}

// precisionFamily is for messages: "fp8 (delayed scaling)".
func (j Job) precisionLabel() string {
	if j.Precision == FP8 {
		return fmt.Sprintf("fp8 (%s scaling)", strings.ToLower(string(j.fp8Scaling())))
	}
	return string(j.Precision)
}

func (j Job) fp8Scaling() FP8Scaling {
	if j.FP8Scaling == "" {
		return FP8Delayed
	}
	return j.FP8Scaling
}
