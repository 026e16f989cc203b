package planner

// Host-bound MoE layers. Dropless routing makes the host wait for the GPU
// once per MoE layer: Megatron-Core's all-to-all token dispatcher
// (megatron/core/transformer/moe/token_dispatcher.py,
// MoEAlltoAllTokenDispatcher.preprocess) copies the tokens-per-expert
// counts to the host before the expert-parallel all-to-all
// (cuda_sync_point "before_ep_alltoall"; "before_finish" without EP) to
// size the variable all-to-all splits and Transformer Engine's grouped
// GEMM (GroupedLinear's m_splits are host integers). Only padding to a
// capacity (drop_and_pad) skips it. After the synchronisation the GPU's
// queue is empty, and it runs each of the layer's kernels as the host
// issues it: the layer's time is the GPU's plus the host's issue time of
// the kernels, which a CUDA stream normally hides behind the kernels
// before it.
//
// The kernels are counted from the code (moeHostOps); the host's time per
// kernel — PyTorch's dispatcher, autograd bookkeeping, Transformer
// Engine's Python and the CUDA launch, about 5–25 µs per eager operator
// (https://jiahuanglin.xyz/all_lessons/gpu_kernel_serving/18_pytorch_to_kernel.html)
// — is Stack.MoEHostOpSeconds, the third fitted number. It is not
// modelled for CUDA-graphed runs, which the vector format cannot state
// yet: Megatron-Bridge's Blackwell MoE recipes capture the router and
// dispatcher preprocessing in CUDA graphs, its H100 FP8 Qwen3 recipe does
// not.

const (
	// moeFixedOps is the kernels of one MoE layer's forward pass besides
	// the experts: the router (its GEMM, softmax/top-k, the auxiliary
	// load-balancing loss and Megatron's forced balancing, about 10), the
	// dispatcher's preprocessing (tokens per expert, the split sums and
	// their device→host copy, the EP all-gather of the counts, about 8),
	// permute and unpermute (Transformer Engine's fused moe_permute, 2–3
	// each), the sort by local expert and back (2 each), the two
	// all-to-alls and the activation: about 30. The backward pass mirrors
	// it with the same count.
	moeFixedOps = 30
)

// moeHostOps is the host-issued kernels of one MoE layer for one
// micro-batch, forward and backward, on a GPU holding experts/ep experts.
// Transformer Engine's GroupedLinear runs one GEMM per local expert for
// each of the two expert projections (fc1, fc2), forward; dgrad and
// wgrad backward. Under FP8 each expert's GEMM input is quantized on its
// own first: one cast kernel with delayed scaling (the amax is updated
// inside it), three with current scaling (amax, scale, cast); backward,
// each expert's output gradient likewise.
func moeHostOps(j Job, c Config) (fwd, bwd float64) {
	local := float64(j.Model.Experts) / float64(c.ep())
	var q float64
	if j.fp8() {
		q = 1
		if j.FP8Scaling == FP8Current {
			q = 3
		}
	}
	fwd = moeFixedOps + 2*local*(1+q)
	bwd = moeFixedOps + 2*local*(2+q)
	return fwd, bwd
}
