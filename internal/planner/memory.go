package planner

import "math"

const gib = 1 << 30

// Memory headroom: what a training process cannot use for the model.
// CUDA context, cuBLAS workspaces and NCCL buffers take about 2 GiB; the
// caching allocator loses about 5% to fragmentation.
const (
	reservedBytes        = 2 * gib
	fragmentationReserve = 0.05
)

// UsableBytes is the memory a training process can fill on one GPU.
func UsableBytes(g GPU) int64 {
	return int64(float64(g.MemoryBytes)*(1-fragmentationReserve)) - reservedBytes
}

// MemoryBreakdown is one GPU's memory at its peak, in bytes.
type MemoryBreakdown struct {
	// Stage is which pipeline stage this is: "first", "last" or "only".
	Stage          string `json:"stage"`
	WeightsBytes   int64  `json:"weights_bytes"`
	GradsBytes     int64  `json:"grads_bytes"`
	OptimizerBytes int64  `json:"optimizer_bytes"`
	// ActivationBytes is what the stage keeps for backward at the
	// pipeline's peak, plus the working set of a recomputed layer.
	ActivationBytes int64 `json:"activation_bytes"`
	// OtherBytes: logits and loss buffers on the last stage, gathered
	// parameters under FSDP.
	OtherBytes int64 `json:"other_bytes"`
	TotalBytes int64 `json:"total_bytes"`
}

// States is weights + gradients + optimizer states.
func (m MemoryBreakdown) States() int64 { return m.WeightsBytes + m.GradsBytes + m.OptimizerBytes }

func (m *MemoryBreakdown) sum() {
	m.TotalBytes = m.WeightsBytes + m.GradsBytes + m.OptimizerBytes + m.ActivationBytes + m.OtherBytes
}

// ActivationBytesPerLayer is the memory one transformer layer keeps for its
// backward pass for one micro-batch of b sequences of s tokens on one GPU
// of a TP group of t, generalising Korthikanti et al. 2022 (Table 2, eq. 1–5)
// to GQA, any FFN width, SwiGLU, optional dropout and fused attention.
//
// With 16-bit activations and sbh = s·b·hidden:
//
//	replicated in the TP group (split by t under sequence parallelism):
//	  two norm inputs 4sbh, QKV input 2sbh, MLP input 2sbh,
//	  dropout masks 2sbh (1 byte each, when training with dropout)
//	split by t:
//	  Q 2sbh, K and V 4sb·kv, attention-output projection input 2sbh,
//	  MLP: GELU input and output 4sbf; SwiGLU gate, up and product 6sbf
//	attention core, split by t, unless fused or recomputed:
//	  softmax output 2as²b, and with dropout its mask as²b and output 2as²b
//
// For GPT (f=4h, MHA, dropout) this is eq. 2: sbh(10 + 24/t + 5as/(ht)).
// Full recomputation keeps only the layer input, 2sbh (split by t under
// sequence parallelism). A fused (flash) attention core keeps its fp32
// log-sum-exp per row, 4asb, instead of the s×s scores.
func ActivationBytesPerLayer(m Model, b, s, t int, sp, dropout, flash bool, r Recompute) float64 {
	sb := float64(s) * float64(b)
	h, kv, f := float64(m.Hidden), float64(m.KVHidden()), float64(m.FFN)
	tf := float64(t)
	if r == RecomputeFull {
		in := 2 * sb * h
		if sp {
			in /= tf
		}
		return in
	}
	repl := 8 * sb * h
	if dropout {
		repl += 2 * sb * h
	}
	if sp {
		repl /= tf
	}
	split := 2*sb*h + 4*sb*kv + 2*sb*h
	if m.MLP == MLPSwiGLU {
		split += 6 * sb * f
	} else {
		split += 4 * sb * f
	}
	split /= tf
	a := float64(m.Heads)
	var core float64
	switch {
	case flash:
		core = 4 * a * sb / tf
	case r == RecomputeSelective:
		core = 0
	case dropout:
		core = 5 * a * float64(s) * sb / tf
	default:
		core = 2 * a * float64(s) * sb / tf
	}
	return repl + split + core
}

// inFlightChunks is how many model chunks' activations pipeline rank r of
// p holds at its peak with v chunks per rank and m micro-batches (m = 0:
// as many as the schedule wants). Plain 1F1B holds p−r micro-batches of
// one chunk; Megatron's interleaved schedule warms up with 2(p−r−1) +
// (v−1)p chunks before its first backward. On the first rank that is
// L·(1 + (p−1)/(pv)) layers' worth (Korthikanti et al. 2022, Sec. 4.2.3).
func inFlightChunks(r, p, v, m int) int {
	var n int
	if v <= 1 {
		n = p - r
		if m > 0 && m < n {
			n = m
		}
		return n
	}
	n = 2*(p-r-1) + (v-1)*p + 1
	if m > 0 && v*m < n {
		n = v * m
	}
	return n
}

// stageLayout is how many transformer layers each pipeline rank holds.
type stageLayout struct {
	first, last int // layers on rank 0 and rank p−1
	most        int // the largest number on any rank
	middle      int // layers on a rank other than first and last (0 if p ≤ 2)
}

// layout partitions the model's layers over p ranks. Megatron splits them
// evenly when p divides the layers; otherwise, and for a balanced
// partitioner (DeepSpeed), layers move off the last rank to make room for
// the output layer, whose cost in layers is logitsInLayers (Megatron-Core's
// uneven first/last stages do the same).
// stageLayers is the job's split: the explicit first/last stage counts
// and Megatron's embedding/loss accounting when the layout sets them (the
// other stages share the remaining layers, rounded up: the fullest one
// sets the pace), else layout's.
func stageLayers(j Job, c Config) stageLayout {
	L, p := j.Model.Layers, c.PP
	if p <= 1 || !c.uneven() {
		return layout(L, p, j.Stack.BalancedPipeline, logitsInLayers(j, c))
	}
	first, last := c.FirstStageLayers, c.LastStageLayers
	if c.EmbeddingInSplit || c.LossInSplit {
		units := L
		if c.EmbeddingInSplit {
			units++
		}
		if c.LossInSplit {
			units++
		}
		per := (units + p - 1) / p
		if first == 0 {
			first = per
			if c.EmbeddingInSplit {
				first--
			}
		}
		if last == 0 {
			last = per
			if c.LossInSplit {
				last--
			}
		}
	}
	free := p
	rest := L
	if first > 0 {
		free--
		rest -= first
	}
	if last > 0 {
		free--
		rest -= last
	}
	per := 0
	if free > 0 && rest > 0 {
		per = (rest + free - 1) / free
	}
	if first == 0 {
		first = per
	}
	if last == 0 {
		last = per
	}
	l := stageLayout{first: first, last: last, most: max(first, last)}
	if p > 2 {
		l.middle = per
		l.most = max(l.most, per)
	}
	return l
}

func layout(layers, p int, balanced bool, logitsInLayers float64) stageLayout {
	if p <= 1 {
		return stageLayout{first: layers, last: layers, most: layers}
	}
	per := (layers + p - 1) / p
	if !balanced && layers%p == 0 {
		l := stageLayout{first: per, last: per, most: per}
		if p > 2 {
			l.middle = per
		}
		return l
	}
	best, bestLast := math.Inf(1), per
	for last := 1; last <= per && last < layers; last++ {
		rest := layers - last
		perRest := (rest + p - 2) / (p - 1)
		cost := math.Max(float64(perRest), float64(last)+logitsInLayers)
		if cost < best-1e-12 {
			best, bestLast = cost, last
		}
	}
	rest := layers - bestLast
	perRest := (rest + p - 2) / (p - 1)
	l := stageLayout{first: perRest, last: bestLast, most: max(perRest, bestLast)}
	if p > 2 {
		l.middle = perRest
	}
	return l
}

// stateBytesPerParam is the bytes per parameter of weights, gradients and
// optimizer states for a stack and ZeRO stage, on a data-parallel group of
// d. Mixed precision with Adam keeps 16-bit weights, fp32 master weights
// and fp32 Adam m and v (12 bytes).
//
//	Megatron:  2 + 4 (fp32 main_grad) + 12, optimizer /d with the
//	           distributed optimizer: 18 bytes (Korthikanti Fig. 1)
//	DeepSpeed: ZeRO (Rajbhandari et al. 2020): 2 + 2 + 12 sharded by stage;
//	           its bf16 optimizer (stage ≤ 1) also keeps an fp32 gradient
//	           accumulation buffer: 2 + 2 + 4 + 12
//	FSDP:      fp32 sharded parameters (the master copy) 4, fp32 gradients
//	           4 and Adam 8, all /d; 16-bit copies are gathered per layer
func stateBytesPerParam(st Stack, prec Precision, zero, d int) (w, g, o float64) {
	df := float64(d)
	switch st.Kind {
	case FSDP:
		return 4 / df, 4 / df, 8 / df
	case DeepSpeed:
		if prec != FP16 && zero <= 1 {
			w, g, o = 2, 2+st.MainGradBytes, 12
		} else {
			w, g, o = 2, 2, 12
		}
		if zero >= 1 {
			o /= df
		}
		if zero >= 2 {
			g /= df
		}
		if zero >= 3 {
			w /= df
		}
		return w, g, o
	default:
		w, g, o = 2, st.MainGradBytes, 12
		if zero >= 1 {
			o /= df
		}
		return w, g, o
	}
}

// Memory computes the peak per-GPU memory of a layout: the larger of the
// first pipeline rank (most activations, embedding) and the last (output
// layer, logits).
func Memory(j Job, c Config) MemoryBreakdown {
	first, last := stageMemory(j, c)
	if last.TotalBytes > first.TotalBytes {
		return last
	}
	return first
}

// stageMemory returns the first and last pipeline ranks' memory.
func stageMemory(j Job, c Config) (first, last MemoryBreakdown) {
	m := j.Model
	t, p, v := c.TP, c.PP, c.vp()
	tf := float64(t)
	lay := stageLayers(j, c)
	w, g, o := stateBytesPerParam(j.Stack, j.Precision, c.ZeRO, c.dpGroup())
	// The routed experts' states shard over the expert-data-parallel
	// group (dp·cp/ep ranks), the rest over the whole data-parallel group.
	we, ge, oe := stateBytesPerParam(j.Stack, j.Precision, c.ZeRO, max(c.dpGroup()/c.ep(), 1))
	layerP := layerParamsOnGPU(m, c)
	embP := float64(m.EmbeddingParams()) / tf
	outP := float64(m.OutputParams()) / tf
	if m.TiedEmbeddings && p > 1 {
		// The last stage keeps its own copy of the tied embedding.
		outP += float64(m.Vocab) * float64(m.Hidden) / tf
	}
	nMicro := j.microBatches(c)
	dropout := j.dropout()
	flash := j.flash()
	seq := j.localSeq(c)
	am := j.activationModel()
	perLayer := ActivationBytesPerLayer(am, c.MicroBatch, seq, t, c.SP, dropout, flash, c.Recompute)
	if j.fp8() && c.Recompute != RecomputeFull {
		perLayer -= fp8SavedInputSavings(am, c.MicroBatch, seq, t, c.SP)
	}
	// A recomputed layer's full activations exist while its backward runs.
	var working float64
	if c.Recompute == RecomputeFull {
		working = ActivationBytesPerLayer(am, c.MicroBatch, seq, t, c.SP, dropout, flash, RecomputeNone)
	}
	logits := float64(c.MicroBatch) * float64(seq) * float64(m.Vocab) / tf * (2 + 4) // 16-bit logits + fp32 softmax

	build := func(stage string, layers int, params, experts float64, rank int, withLogits bool) MemoryBreakdown {
		var mb MemoryBreakdown
		mb.Stage = stage
		dense := params - experts
		mb.WeightsBytes = int64(dense*w + experts*we)
		if j.fp8() {
			// The FP8 weights and their transposes, cached for the step.
			mb.WeightsBytes += int64(2 * float64(layers) * layerP)
		}
		mb.GradsBytes = int64(dense*g + experts*ge)
		mb.OptimizerBytes = int64(dense*o + experts*oe)
		chunkLayers := float64(layers) / float64(v)
		acts := perLayer*chunkLayers*float64(inFlightChunks(rank, p, v, nMicro)) + working
		mb.ActivationBytes = int64(acts)
		var other float64
		if withLogits {
			other += logits
		}
		if c.ZeRO >= 3 {
			// Two layers gathered in 16 bits (current and prefetched) and
			// one layer's unsharded 16-bit gradients.
			other += 3 * 2 * layerParamsOnGPU(m, c)
		}
		mb.OtherBytes = int64(other)
		mb.sum()
		return mb
	}
	if p == 1 {
		only := build("only", m.Layers, float64(m.Layers)*layerP+embP+outP, stageExpertParams(j, c, false), 0, true)
		return only, only
	}
	first = build("first", lay.first, float64(lay.first)*layerP+embP, stageExpertParams(j, c, false), 0, false)
	last = build("last", lay.last, float64(lay.last)*layerP+outP, stageExpertParams(j, c, true), p-1, true)
	return first, last
}

// LayerStatesBytes is the weights, gradients and optimizer states of one
// GPU holding only transformer layers (a middle pipeline stage), the figure
// Korthikanti et al. 2022 Fig. 1 plots. With p = 1 it includes the
// embedding and output layer.
func LayerStatesBytes(j Job, c Config) float64 {
	m := j.Model
	w, g, o := stateBytesPerParam(j.Stack, j.Precision, c.ZeRO, c.dpGroup())
	if c.PP <= 1 {
		return (float64(m.Params()) - expertParamsOffGPU(m, c)) / float64(c.TP) * (w + g + o)
	}
	lay := stageLayers(j, c)
	return float64(lay.most) * layerParamsOnGPU(m, c) * (w + g + o)
}

// FirstStageLayerActivationBytes is the activation memory of the first
// pipeline rank's transformer layers at its peak, the figure Korthikanti
// et al. 2022 Fig. 1 plots.
func FirstStageLayerActivationBytes(j Job, c Config) float64 {
	v := c.vp()
	lay := stageLayers(j, c)
	perLayer := ActivationBytesPerLayer(j.activationModel(), c.MicroBatch, j.localSeq(c), c.TP, c.SP, j.dropout(), j.flash(), c.Recompute)
	return perLayer * float64(lay.first) / float64(v) * float64(inFlightChunks(0, c.PP, v, j.microBatches(c)))
}

// fp8SavedInputSavings is the activation memory FP8 saves per layer: the
// four linear layers keep their inputs for the backward pass in FP8, half
// their 16-bit size — QKV and MLP inputs (2sbh each, ÷t under SP), the
// output projection's (2sbh/t) and the MLP down projection's (2sbf/t).
func fp8SavedInputSavings(m Model, b, s, t int, sp bool) float64 {
	sb, tf := float64(s)*float64(b), float64(t)
	h, f := float64(m.Hidden), float64(m.FFN)
	repl := 2 * sb * h
	if sp {
		repl /= tf
	}
	return (repl + sb*h/tf + sb*f/tf)
}
