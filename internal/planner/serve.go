package planner

import (
	"fmt"

	"github.com/gangway/gangway/internal/hardware"
)

// ParsePrecision accepts bf16, fp16, fp8, int8 and int4.
func ParsePrecision(s string) (Precision, error) { return hardware.ParsePrecision(s) }

// DefaultMemoryUtilization is the share of GPU memory an engine takes
// (vLLM's gpu_memory_utilization default).
const DefaultMemoryUtilization = hardware.DefaultMemoryUtilization

// ServeRequest asks how a model fits on GPUs for inference.
type ServeRequest struct {
	Model Model
	GPU   GPU
	// Precision of the weights (see hardware.WeightsBytes); "" is bf16.
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
	// KVCapacityTokens is how many tokens of KV cache the TP group holds
	// (whole blocks of 16).
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

// Serve works out weights memory, KV-cache capacity and the minimum TP for
// serving a model on one GPU type, at each TP degree of
// hardware.TPDegrees (powers of two that divide the attention heads, up
// to the NVLink domain). Each degree's answer is hardware.Config.Capacity
// with vLLM's defaults, max_model_len MaxSeq: the same answer the engine
// simulator and the gateway get for that replica.
func Serve(req ServeRequest) ServeEstimate {
	req = req.withDefaults()
	m := req.Model
	out := ServeEstimate{Model: m.Name, GPU: req.GPU.Name, Precision: req.Precision, KVPrecision: req.KVPrecision,
		WeightsBytes:    hardware.WeightsBytes(m, req.Precision),
		KVBytesPerToken: hardware.KVBytesPerToken(m, req.KVPrecision), MaxSeq: req.MaxSeq}
	for _, tp := range hardware.TPDegrees(m, req.NVLinkDomain) {
		cp := req.Replica(tp).Capacity()
		opt := ServeOption{TP: tp, WeightsBytesPerGPU: cp.WeightBytesPerGPU, Fits: cp.Fits, Reason: cp.Reason}
		if cp.KVBytesPerGPU > 0 {
			opt.KVCacheBytesPerGPU = cp.KVBytesPerGPU
			opt.KVCapacityTokens = cp.KVTokens
		}
		if opt.Fits && out.MinTP == 0 {
			out.MinTP = tp
		}
		out.Options = append(out.Options, opt)
	}
	if out.MinTP == 0 {
		out.Reason = fmt.Sprintf("%s at %s does not fit on one NVLink domain of %d %s GPUs; it needs pipeline parallelism across domains or a smaller precision",
			m.Name, req.Precision, req.NVLinkDomain, req.GPU.Name)
	}
	return out
}

// Replica is the engine replica Serve sizes at tensor parallelism tp:
// vLLM's defaults for everything req does not say.
func (req ServeRequest) Replica(tp int) hardware.Config {
	req = req.withDefaults()
	return hardware.Config{Model: req.Model, GPU: req.GPU, TP: tp, Quant: req.Precision,
		KVCacheFP8: req.KVPrecision.BytesPerParam() == 1, GPUMemoryUtilization: req.MemoryUtilization,
		MaxModelLen: req.MaxSeq}.WithDefaults()
}

// withDefaults fills in what the zero values of req stand for.
func (req ServeRequest) withDefaults() ServeRequest {
	if req.Precision == "" {
		req.Precision = BF16
	}
	if req.KVPrecision == "" {
		req.KVPrecision = BF16
	}
	if req.MaxSeq <= 0 {
		req.MaxSeq = hardware.DefaultMaxModelLen
	}
	if req.MemoryUtilization <= 0 || req.MemoryUtilization > 1 {
		req.MemoryUtilization = DefaultMemoryUtilization
	}
	if req.NVLinkDomain <= 0 {
		req.NVLinkDomain = req.GPU.NVLinkDomain
	}
	return req
}
