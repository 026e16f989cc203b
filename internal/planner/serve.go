package planner

import (
	"fmt"
	"strings"
)

// ParsePrecision accepts bf16, fp16, fp8, int8 and int4.
func ParsePrecision(s string) (Precision, error) {
	switch p := Precision(strings.ToLower(strings.TrimSpace(s))); p {
	case BF16, FP16, FP8, INT8, INT4:
		return p, nil
	}
	return "", fmt.Errorf("unknown precision %q (want bf16, fp16, fp8, int8 or int4)", s)
}

// BytesPerParam is the storage of one weight at a precision. INT4 adds one
// fp16 scale per group of 128 weights (AWQ/GPTQ layout).
func BytesPerParam(p Precision) float64 {
	switch p {
	case FP8, INT8:
		return 1
	case INT4:
		return 0.5 + 2.0/128
	}
	return 2
}

// Serving reserves, beyond weights and KV cache.
const (
	// DefaultMemoryUtilization is the share of GPU memory an engine takes
	// (vLLM's gpu_memory_utilization default).
	DefaultMemoryUtilization = 0.9
	// servingReservedBytes: CUDA context, CUDA graphs, NCCL buffers.
	servingReservedBytes = 2 * gib
	// servingBatchTokens is the prefill chunk the activation workspace is
	// sized for (vLLM's max_num_batched_tokens default for chunked prefill).
	servingBatchTokens = 8192
)

// ServeRequest asks how a model fits on GPUs for inference.
type ServeRequest struct {
	Model Model
	GPU   GPU
	// Precision of the weights (see WeightsBytes).
	Precision Precision
	// KVPrecision of the KV cache; "" is bf16.
	KVPrecision Precision
	// MaxSeq is the context one request may use; the minimum TP must hold
	// at least one such sequence. 0: 8192.
	MaxSeq int
	// MemoryUtilization is the engine's share of GPU memory; 0: 0.9.
	MemoryUtilization float64
	// NVLinkDomain bounds TP; 0: the GPU's.
	NVLinkDomain int
}

// ServeOption is the fit at one TP degree.
type ServeOption struct {
	TP                 int   `json:"tp"`
	WeightsBytesPerGPU int64 `json:"weights_bytes_per_gpu"`
	// KVCacheBytesPerGPU is what is left for the KV cache on each GPU.
	KVCacheBytesPerGPU int64 `json:"kv_cache_bytes_per_gpu"`
	// KVCapacityTokens is how many tokens of KV cache the TP group holds.
	KVCapacityTokens int64 `json:"kv_capacity_tokens"`
	// Fits: weights fit and at least one MaxSeq sequence of KV cache does.
	Fits   bool   `json:"fits"`
	Reason string `json:"reason,omitempty"`
}

// ServeEstimate is the answer to a ServeRequest.
type ServeEstimate struct {
	Model       string    `json:"model"`
	GPU         string    `json:"gpu"`
	Precision   Precision `json:"precision"`
	KVPrecision Precision `json:"kv_precision"`
	// WeightsBytes is the whole model's weights.
	WeightsBytes int64 `json:"weights_bytes"`
	// KVBytesPerToken is one token's keys and values over all layers.
	KVBytesPerToken int64 `json:"kv_bytes_per_token"`
	MaxSeq          int   `json:"max_seq"`
	// MinTP is the smallest TP degree that fits, 0 if none within one
	// NVLink domain does (Reason says why).
	MinTP   int           `json:"min_tp"`
	Reason  string        `json:"reason,omitempty"`
	Options []ServeOption `json:"options"`
}

// WeightsBytes is the memory of a model's weights at a precision. The
// transformer layers take the precision; the embedding and output layer
// stay in 16 bits (AWQ, GPTQ and FP8 checkpoints keep them so).
func WeightsBytes(m Model, p Precision) int64 {
	edge := float64(m.EmbeddingParams() + m.OutputParams())
	layers := float64(int64(m.Layers) * m.LayerParams())
	return int64(layers*BytesPerParam(p) + edge*2)
}

// KVBytesPerToken is the KV cache of one token: keys and values of every
// layer, 2·layers·kv_heads·head_dim elements.
func KVBytesPerToken(m Model, kv Precision) int64 {
	return int64(2 * float64(m.Layers) * float64(m.KVHidden()) * BytesPerParam(kv))
}

// Serve works out weights memory, KV-cache capacity and the minimum TP for
// serving a model on one GPU type. TP degrees are powers of two that divide
// the attention heads, up to the NVLink domain; with more GPUs than
// key/value heads the KV cache is replicated.
func Serve(req ServeRequest) ServeEstimate {
	m := req.Model
	kvp := req.KVPrecision
	if kvp == "" {
		kvp = BF16
	}
	maxSeq := req.MaxSeq
	if maxSeq <= 0 {
		maxSeq = 8192
	}
	util := req.MemoryUtilization
	if util <= 0 || util > 1 {
		util = DefaultMemoryUtilization
	}
	dom := req.NVLinkDomain
	if dom <= 0 {
		dom = req.GPU.NVLinkDomain
	}
	out := ServeEstimate{Model: m.Name, GPU: req.GPU.Name, Precision: req.Precision, KVPrecision: kvp,
		WeightsBytes: WeightsBytes(m, req.Precision), KVBytesPerToken: KVBytesPerToken(m, kvp), MaxSeq: maxSeq}
	budget := float64(req.GPU.MemoryBytes) * util
	for _, tp := range powersOfTwo(dom) {
		if m.Heads%tp != 0 {
			continue
		}
		w := float64(out.WeightsBytes) / float64(tp)
		// Per GPU, KV heads are split over TP; beyond kv_heads they repeat.
		kvHeadsPerGPU := max(1, m.KVHeads/tp)
		kvPerTokenGPU := 2 * float64(m.Layers) * float64(kvHeadsPerGPU*m.HeadDim()) * BytesPerParam(kvp)
		// Activation workspace of a prefill chunk: residual stream, QKV and
		// the MLP's intermediate (16-bit) plus the logits of a few tokens.
		work := float64(servingBatchTokens) * (4*float64(m.Hidden) + 3*float64(m.FFN)/float64(tp)) * 2
		free := budget - w - work - servingReservedBytes
		opt := ServeOption{TP: tp, WeightsBytesPerGPU: int64(w)}
		if free > 0 {
			opt.KVCacheBytesPerGPU = int64(free)
			opt.KVCapacityTokens = int64(free / kvPerTokenGPU)
		}
		switch {
		case free <= 0:
			opt.Reason = fmt.Sprintf("weights need %.1f GiB per GPU, %.1f GiB available after workspace",
				w/gib, (budget-work-servingReservedBytes)/gib)
		case opt.KVCapacityTokens < int64(maxSeq):
			opt.Reason = fmt.Sprintf("KV cache holds %d tokens, less than one %d-token sequence", opt.KVCapacityTokens, maxSeq)
		default:
			opt.Fits = true
			if out.MinTP == 0 {
				out.MinTP = tp
			}
		}
		out.Options = append(out.Options, opt)
	}
	if out.MinTP == 0 {
		out.Reason = fmt.Sprintf("%s at %s does not fit on one NVLink domain of %d %s GPUs; it needs pipeline parallelism across domains or a smaller precision",
			m.Name, req.Precision, dom, req.GPU.Name)
	}
	return out
}
