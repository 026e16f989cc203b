package planner

// FLOP counts follow Narayanan et al. (SC'21) eq. 3: a matmul of an
// (m×k) by a (k×n) matrix is 2mkn FLOPs, the backward pass is twice the
// forward, and attention is counted without causal masking (the convention
// MFU uses, PaLM Appendix B).

// LayerFLOPs is the forward FLOPs of one transformer layer over a
// micro-batch, summed over its tensor-parallel ranks.
type LayerFLOPs struct {
	// Matmul: the QKV, output and MLP projections, 2·tokens·LayerMatmulParams.
	Matmul float64
	// Attention: QKᵀ and attention·V, 4·tokens·keys·q, where q is the
	// query width Heads·HeadDim (Hidden unless the head size says
	// otherwise: Qwen3-30B-A3B's 32 heads of 128 are 4,096 wide on a
	// 2,048 hidden) and keys is seq for full attention (attentionKeys).
	Attention float64
}

// Total is Matmul + Attention.
func (f LayerFLOPs) Total() float64 { return f.Matmul + f.Attention }

// LayerForwardFLOPs counts one layer's forward pass over b sequences of s
// tokens.
func LayerForwardFLOPs(m Model, b, s int) LayerFLOPs {
	t := float64(b) * float64(s)
	return LayerFLOPs{
		Matmul:    2 * t * float64(m.LayerMatmulParams()),
		Attention: 4 * t * attentionKeys(m, s) * float64(m.QHidden()),
	}
}

// attentionKeys is the keys one query is counted against, averaged over
// the layers, in the full-attention convention above (s keys per query,
// twice the causal work). A windowed layer's query at position x attends
// to min(window, x) keys; over a sequence that is ∫₀ˢ min(w, x) dx =
// s·w − w²/2 (w < s), doubled to the same convention: 2w − w²/s keys per
// query, s again when the window covers the sequence. Megatron's
// unfused attention computes the whole s×s scores and masks them, so
// only fused kernels (flash, cuDNN), which skip masked blocks, get the
// saving in time (estimate.go).
func attentionKeys(m Model, s int) float64 {
	full := float64(s)
	w := float64(m.SlidingWindow)
	if m.WindowedLayers <= 0 || w <= 0 || w >= full || m.Layers <= 0 {
		return full
	}
	windowed := 2*w - w*w/full
	frac := float64(m.WindowedLayers) / float64(m.Layers)
	return (1-frac)*full + frac*windowed
}

// LogitsForwardFLOPs counts the output projection over b sequences of s
// tokens: 2·tokens·hidden·vocab.
func LogitsForwardFLOPs(m Model, b, s int) float64 {
	return 2 * float64(b) * float64(s) * float64(m.Hidden) * float64(m.Vocab)
}

// ModelFLOPs is the work one step does on the given number of sequences:
// forward and backward (3× forward) of every layer and the logits, with no
// recomputation. It is the numerator of MFU.
func ModelFLOPs(m Model, seq, sequences int) float64 {
	l := LayerForwardFLOPs(m, sequences, seq)
	return 3 * (float64(m.Layers)*l.Total() + LogitsForwardFLOPs(m, sequences, seq))
}

// HardwareFLOPs is ModelFLOPs plus what recomputation redoes: a whole
// forward pass of every layer (full) or of the attention core (selective).
// The logits are never recomputed. It is the numerator of HFU and of
// Megatron's "TFLOP/s per GPU" (Narayanan et al. 2021, Table 1).
func HardwareFLOPs(m Model, seq, sequences int, r Recompute) float64 {
	f := ModelFLOPs(m, seq, sequences)
	l := LayerForwardFLOPs(m, sequences, seq)
	switch r {
	case RecomputeFull:
		f += float64(m.Layers) * l.Total()
	case RecomputeSelective:
		f += float64(m.Layers) * l.Attention
	}
	return f
}
