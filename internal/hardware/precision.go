package hardware

import (
	"fmt"
	"strings"
)

// Precision is a number format: of weights, of matmuls, of the KV cache.
type Precision string

// The precisions the formulas know.
const (
	BF16 Precision = "bf16"
	FP16 Precision = "fp16"
	FP8  Precision = "fp8"  // W8A8 FP8; FP8 tensor cores where the GPU has them
	INT8 Precision = "int8" // W8A8 INT8 (SmoothQuant style)
	INT4 Precision = "int4" // W4A16 (AWQ/GPTQ, group 128): weight-only
)

// ParsePrecision accepts bf16, fp16, fp8, int8 and int4, in any case.
func ParsePrecision(s string) (Precision, error) {
	switch p := Precision(strings.ToLower(strings.TrimSpace(s))); p {
	case BF16, FP16, FP8, INT8, INT4:
		return p, nil
	}
	return "", fmt.Errorf("unknown precision %q (want bf16, fp16, fp8, int8 or int4)", s)
}

// ParseQuant reads a quantization as vLLM's --quantization and --dtype
// spell it: bf16/fp16/auto (all served as bf16), fp8, int8/w8a8,
// int4/awq/gptq.
func ParseQuant(s string) (Precision, error) {
	switch strings.ToLower(s) {
	case "", "bf16", "bfloat16", "fp16", "float16", "half", "auto", "none":
		return BF16, nil
	case "fp8":
		return FP8, nil
	case "int8", "w8a8":
		return INT8, nil
	case "int4", "awq", "gptq", "w4a16":
		return INT4, nil
	}
	return "", fmt.Errorf("unknown quantization %q (want bf16, fp8, int8 or int4)", s)
}

// BytesPerParam is the storage of one weight (or KV element) at p. INT4
// adds one fp16 scale per group of 128 weights (AWQ/GPTQ layout).
func (p Precision) BytesPerParam() float64 {
	switch p {
	case FP8, INT8:
		return 1
	case INT4:
		return 0.5 + 2.0/128
	}
	return 2
}

// PeakFLOPS is the dense matmul rate of g at p. Weight-only INT4
// computes in BF16; FP8 and INT8 fall back to BF16 on GPUs without them.
func (p Precision) PeakFLOPS(g GPU) float64 {
	switch p {
	case FP8:
		if g.FP8FLOPS > 0 {
			return g.FP8FLOPS
		}
	case INT8:
		if g.INT8OPS > 0 {
			return g.INT8OPS
		}
	}
	return g.BF16FLOPS
}

// WeightsBytes is the memory of a model's weights at a precision. The
// transformer layers take the precision; the embedding and output layer
// stay in 16 bits (AWQ, GPTQ and FP8 checkpoints keep them so, and vLLM
// loads them so).
func WeightsBytes(m Model, p Precision) int64 {
	edge := float64(m.EmbeddingParams() + m.OutputParams())
	layers := float64(int64(m.Layers) * m.LayerParams())
	return int64(layers*p.BytesPerParam() + edge*2)
}

// KVBytesPerToken is the KV cache of one token over the whole model: keys
// and values of every layer, 2·layers·kv_heads·head_dim elements at kv.
func KVBytesPerToken(m Model, kv Precision) int64 {
	return int64(2 * float64(m.Layers) * float64(m.KVHidden()) * kv.BytesPerParam())
}
