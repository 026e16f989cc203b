package planner

// The memory-bound (elementwise) kernels of one transformer layer. They
// do almost no arithmetic, so each takes bytes / (HBM bandwidth ·
// hbmEfficiency); they run on the compute stream between the GEMMs and
// are added to the layer's time, not overlapped with it. Their share
// grows where FLOPs grew faster than HBM bandwidth (FP8, Blackwell) and
// for small hidden sizes.
//
// Activations stay in 16 bits (FP8 runs under Transformer Engine keep
// norms, residuals, RoPE and the activation function in BF16; the FP8
// casts are fp8.go's). The output layer's cross-entropy is logitsCost's
// and the optimizer step optimizerTime's; both are per micro-batch /
// per step, not per layer.

// actBytes is one 16-bit activation element.
const actBytes = 2

// ewWidth is what an elementwise kernel's per-token element count scales
// with.
type ewWidth int

const (
	// ewHidden: h per token, on every rank of the TP group (on s/t of
	// the tokens under sequence parallelism).
	ewHidden ewWidth = iota
	// ewQK: the rotated query and key heads, (q + kv)/t.
	ewQK
	// ewFFN: the MLP's intermediate width f/t (a token's activated
	// experts for MoE).
	ewFFN
	// ewScores: the attention scores a·s/t, only when attention is not
	// fused (flash attention keeps them on chip).
	ewScores
	// ewPermute: one MoE permutation pass, k·h per token, on the MoE
	// fraction of the layers.
	ewPermute
)

// ewKernel is one elementwise kernel: bytes per element of its width,
// forward and backward. Byte counts are accesses of 16-bit elements
// (actBytes) plus 1-byte dropout masks.
type ewKernel struct {
	name     string
	width    ewWidth
	count    float64 // instances per layer
	fwd, bwd float64 // bytes per element
	// when: which models and stacks run it.
	when ewCondition
}

type ewCondition int

const (
	ewAlways ewCondition = iota
	ewDropout
	ewRoPE
	ewSwiGLU
	ewGELU
	ewUnfused
	ewUnfusedDropout
)

// layerKernels is the table. Sources:
//
//   - norms: Apex FusedLayerNorm / Transformer Engine's layernorm and
//     rmsnorm kernels: forward reads x and writes y; backward reads x and
//     dy and writes dx, the γ (β) gradient reduced from the same reads
//     (its per-CTA partials are O(h), not per token). Korthikanti et al.
//     2022, Table 2: each norm saves its 2sbh-byte input.
//   - residual adds: forward reads both operands and writes the sum;
//     backward, autograd sums the branch's and the skip path's gradients
//     where the residual stream forks (read two, write one).
//   - bias-dropout-add (Megatron-LM's bias_dropout_add_fused_train, GPT
//     with dropout): fused with the residual add, so on top of it only the
//     1-byte mask is written forward; backward reads dy and the mask and
//     writes dx (Korthikanti Table 2: an sbh-byte mask per dropout).
//   - RoPE (Megatron-Core's apply_rope_fusion → Transformer Engine's
//     fused_rope): reads and writes q and k once forward, their gradients
//     once backward; the cos/sin table is s·d, negligible.
//   - SwiGLU (Megatron-Core bias_swiglu / TE swiglu, dswiglu): forward
//     reads gate and up and writes their product, 3 accesses per element
//     of f; backward reads gate, up and dy and writes dgate and dup, 5.
//   - GeLU (Megatron-LM bias_gelu fusion): reads x, writes y; backward
//     reads x and dy, writes dx.
//   - softmax (unfused attention; Megatron-LM's fused
//     scale_mask_softmax): reads scores, writes probabilities; backward
//     reads probabilities and dy, writes dx (Korthikanti: 2as²b saved).
//   - attention dropout (unfused, with dropout): reads, writes and writes
//     a 1-byte mask; backward reads dy and the mask, writes dx.
//   - MoE permutation (Megatron-Core's all-to-all dispatcher): each pass
//     reads and writes k·h elements per token; backward, permute's
//     gradient is the inverse permutation (read, write) and unpermute's
//     also reads the saved permuted tokens for the router probabilities'
//     gradient (3 accesses): 2.5 on average.
var layerKernels = [...]ewKernel{
	{"norm", ewHidden, 2, 2 * actBytes, 3 * actBytes, ewAlways},
	{"residual add", ewHidden, 2, 3 * actBytes, 3 * actBytes, ewAlways},
	{"bias-dropout-add mask", ewHidden, 2, 1, actBytes + 1 + actBytes, ewDropout},
	{"rotary embedding", ewQK, 1, 2 * actBytes, 2 * actBytes, ewRoPE},
	{"swiglu", ewFFN, 1, 3 * actBytes, 5 * actBytes, ewSwiGLU},
	{"gelu", ewFFN, 1, 2 * actBytes, 3 * actBytes, ewGELU},
	{"softmax", ewScores, 1, 2 * actBytes, 3 * actBytes, ewUnfused},
	{"attention dropout", ewScores, 1, 2*actBytes + 1, actBytes + 1 + actBytes, ewUnfusedDropout},
	{"moe permutation", ewPermute, 1, 2 * actBytes, 2.5 * actBytes, ewAlways},
}

// elementwiseBytes is one layer's elementwise HBM traffic per token on one
// GPU, forward and backward, and the part of the forward that belongs to
// the attention core (what selective recomputation re-runs).
func elementwiseBytes(j Job, c Config) (fwd, bwd, coreFwd float64) {
	m := j.Model
	tf := float64(c.TP)
	dropout, flash := j.dropout(), j.flash()
	hidden := float64(m.Hidden)
	if c.SP {
		hidden /= tf
	}
	var permute float64
	if fr := j.moeFraction(); fr > 0 {
		// Permute and unpermute; with experts split over ep ranks and more
		// than one expert per rank, also the sort by local expert after
		// the dispatch and back before the combine (sort_chunks_by_idxs).
		passes := 2.0
		if c.ep() > 1 && m.Experts/c.ep() > 1 {
			passes = 4
		}
		permute = fr * passes * float64(m.ExpertsPerToken) * float64(m.Hidden)
	}
	for i := range layerKernels {
		k := &layerKernels[i]
		var on bool
		switch k.when {
		case ewAlways:
			on = true
		case ewDropout:
			on = dropout
		case ewRoPE:
			on = m.RoPE
		case ewSwiGLU:
			on = m.MLP == MLPSwiGLU
		case ewGELU:
			on = m.MLP != MLPSwiGLU
		case ewUnfused:
			on = !flash
		case ewUnfusedDropout:
			on = !flash && dropout
		}
		if !on {
			continue
		}
		var n float64
		switch k.width {
		case ewHidden:
			n = hidden
		case ewQK:
			n = float64(m.QHidden()+m.KVHidden()) / tf
		case ewFFN:
			n = j.activeFFN() / tf
		case ewScores:
			n = float64(m.Heads) * float64(j.Seq) / tf
		case ewPermute:
			n = permute
		}
		n *= k.count
		fwd += n * k.fwd
		bwd += n * k.bwd
		if k.width == ewScores {
			coreFwd += n * k.fwd
		}
	}
	return fwd, bwd, coreFwd
}
