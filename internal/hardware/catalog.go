package hardware

import (
	"fmt"
	"sort"
	"strings"
)

// GPU describes one accelerator as the roofline sees it.
type GPU struct {
	Name        string
	MemoryBytes int64   // total device memory as CUDA reports it
	BF16FLOPS   float64 // dense BF16 tensor FLOP/s
	FP8FLOPS    float64 // dense FP8 FLOP/s; 0 when the GPU has none
	INT8OPS     float64 // dense INT8 OP/s
	HBMBytesPS  float64 // HBM bandwidth, bytes/s
	NVLinkBPS   float64 // NVLink bandwidth per GPU, both directions, bytes/s
}

const (
	mib = 1 << 20
	gib = 1 << 30
)

// Total memory is what cudaMemGetInfo reports (nvidia-smi's "MiB" total),
// which is what vLLM multiplies by gpu_memory_utilization.
var gpus = map[string]GPU{
	"A100": {Name: "A100", MemoryBytes: 81920 * mib, BF16FLOPS: 312e12, INT8OPS: 624e12, HBMBytesPS: 2.039e12, NVLinkBPS: 600e9},
	"H100": {Name: "H100", MemoryBytes: 81559 * mib, BF16FLOPS: 989e12, FP8FLOPS: 1979e12, INT8OPS: 1979e12, HBMBytesPS: 3.35e12, NVLinkBPS: 900e9},
	"H200": {Name: "H200", MemoryBytes: 143771 * mib, BF16FLOPS: 989e12, FP8FLOPS: 1979e12, INT8OPS: 1979e12, HBMBytesPS: 4.8e12, NVLinkBPS: 900e9},
	"B200": {Name: "B200", MemoryBytes: 183359 * mib, BF16FLOPS: 2250e12, FP8FLOPS: 4500e12, INT8OPS: 4500e12, HBMBytesPS: 8.0e12, NVLinkBPS: 1800e9},
}

// LookupGPU returns the GPU named name (case-insensitive; "H100-80GB" and
// "nvidia-h100" style names are accepted).
func LookupGPU(name string) (GPU, error) {
	n := strings.ToUpper(name)
	n = strings.TrimPrefix(n, "NVIDIA-")
	n = strings.TrimPrefix(n, "NVIDIA ")
	for k, g := range gpus {
		if n == k || strings.HasPrefix(n, k+"-") || strings.HasPrefix(n, k+" ") {
			return g, nil
		}
	}
	return GPU{}, fmt.Errorf("unknown gpu %q (known: %s)", name, strings.Join(GPUNames(), ", "))
}

// GPUNames lists the known GPUs, sorted.
func GPUNames() []string { return keys(gpus) }

// Model is a dense decoder-only transformer with grouped-query attention
// and a gated (SwiGLU) MLP.
type Model struct {
	Name        string
	Layers      int
	Hidden      int
	Heads       int
	KVHeads     int
	HeadDim     int
	FFN         int // intermediate size of the MLP
	Vocab       int
	Tied        bool // input embedding and LM head share weights
	MaxModelLen int  // default context length served
}

var models = map[string]Model{
	"Qwen3-32B":   {Name: "Qwen3-32B", Layers: 64, Hidden: 5120, Heads: 64, KVHeads: 8, HeadDim: 128, FFN: 25600, Vocab: 151936, MaxModelLen: 40960},
	"Qwen3-8B":    {Name: "Qwen3-8B", Layers: 36, Hidden: 4096, Heads: 32, KVHeads: 8, HeadDim: 128, FFN: 12288, Vocab: 151936, MaxModelLen: 40960},
	"Qwen3-0.6B":  {Name: "Qwen3-0.6B", Layers: 28, Hidden: 1024, Heads: 16, KVHeads: 8, HeadDim: 128, FFN: 3072, Vocab: 151936, Tied: true, MaxModelLen: 40960},
	"Llama-3-8B":  {Name: "Llama-3-8B", Layers: 32, Hidden: 4096, Heads: 32, KVHeads: 8, HeadDim: 128, FFN: 14336, Vocab: 128256, MaxModelLen: 8192},
	"Llama-3-70B": {Name: "Llama-3-70B", Layers: 80, Hidden: 8192, Heads: 64, KVHeads: 8, HeadDim: 128, FFN: 28672, Vocab: 128256, MaxModelLen: 8192},
}

// LookupModel returns the model named name, case-insensitively, ignoring
// an organisation prefix ("Qwen/Qwen3-32B") and "Meta-"/"-Instruct" decor.
func LookupModel(name string) (Model, error) {
	n := strings.ToLower(name)
	if i := strings.LastIndexByte(n, '/'); i >= 0 {
		n = n[i+1:]
	}
	n = strings.TrimPrefix(n, "meta-")
	n = strings.TrimSuffix(n, "-instruct")
	n = strings.Replace(n, "llama-3.1-", "llama-3-", 1)
	for k, m := range models {
		if strings.ToLower(k) == n {
			return m, nil
		}
	}
	return Model{}, fmt.Errorf("unknown model %q (known: %s)", name, strings.Join(ModelNames(), ", "))
}

// ModelNames lists the known models, sorted.
func ModelNames() []string { return keys(models) }

// LayerParams is the number of weights in the transformer layers
// (attention and MLP; norms are negligible and left out).
func (m Model) LayerParams() int64 {
	h := int64(m.Hidden)
	q := int64(m.Heads * m.HeadDim)
	kv := int64(m.KVHeads * m.HeadDim)
	perLayer := h*q + 2*h*kv + q*h + 3*h*int64(m.FFN)
	return perLayer * int64(m.Layers)
}

// EmbeddingParams counts the input embedding and the LM head (once if tied).
func (m Model) EmbeddingParams() int64 {
	e := int64(m.Vocab) * int64(m.Hidden)
	if m.Tied {
		return e
	}
	return 2 * e
}

// Params is the total parameter count.
func (m Model) Params() int64 { return m.LayerParams() + m.EmbeddingParams() }

// Quant is a weight quantization scheme.
type Quant string

// The quantizations the model knows.
const (
	BF16 Quant = "bf16" // 16-bit weights and activations (also fp16)
	FP8  Quant = "fp8"  // W8A8 FP8; FP8 tensor cores where the GPU has them
	INT8 Quant = "int8" // W8A8 INT8 (SmoothQuant style)
	INT4 Quant = "int4" // W4A16 (AWQ/GPTQ, group 128): weight-only
)

// ParseQuant accepts bf16/fp16/auto, fp8, int8/w8a8, int4/awq/gptq.
func ParseQuant(s string) (Quant, error) {
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

// WeightBytesPerParam is the storage of one quantized weight. INT4 counts
// one fp16 scale per group of 128.
func (q Quant) WeightBytesPerParam() float64 {
	switch q {
	case FP8, INT8:
		return 1
	case INT4:
		return 0.5 + 2.0/128
	}
	return 2
}

// PeakFLOPS is the dense matmul rate of g under q. Weight-only schemes
// compute in BF16; FP8 falls back to BF16 on GPUs without FP8 units.
func (q Quant) PeakFLOPS(g GPU) float64 {
	switch q {
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

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
