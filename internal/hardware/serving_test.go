package hardware

import (
	"math"
	"strings"
	"testing"
)

func mustConfig(t testing.TB, model, gpu string, tp int, quant string) Config {
	t.Helper()
	c, err := NewConfig(model, gpu, tp, quant)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// Published: vLLM logs about 307k KV tokens for Qwen3-32B at TP=2 on H100
// 80GB with gpu_memory_utilization 0.9 (llm-d's precise-prefix guide).
func TestKVCapacityMatchesPublished(t *testing.T) {
	c := mustConfig(t, "Qwen3-32B", "H100", 2, "bf16")
	cp := c.Capacity()
	const published = 307_000
	if rel := math.Abs(float64(cp.KVTokens)-published) / published; rel > 0.05 {
		t.Errorf("KV tokens = %d, published ≈ %d (off by %.1f%%, want ≤ 5%%)", cp.KVTokens, published, rel*100)
	}
	if !cp.Fits {
		t.Errorf("Qwen3-32B should fit at tp=2: %s", cp.Reason)
	}
	t.Logf("Qwen3-32B 2×H100: weights %.1f GiB/GPU, KV %.1f GiB/GPU = %d tokens", float64(cp.WeightBytesPerGPU)/gib, float64(cp.KVBytesPerGPU)/gib, cp.KVTokens)
}

func TestMinTP(t *testing.T) {
	tests := []struct {
		model, gpu, quant string
		want              int
	}{
		{"Qwen3-32B", "H100", "bf16", 2}, // 61 GiB of weights leave too little KV at tp=1
		{"Qwen3-32B", "H200", "bf16", 1},
		{"Qwen3-32B", "H100", "fp8", 1},
		{"Llama-3-70B", "H100", "bf16", 2}, // starts, with a few GiB of KV for 8k contexts
		{"Llama-3-70B", "H100", "int4", 1},
		{"Llama-3-8B", "A100", "bf16", 1},
	}
	for _, tc := range tests {
		t.Run(tc.model+"/"+tc.gpu+"/"+tc.quant, func(t *testing.T) {
			c := mustConfig(t, tc.model, tc.gpu, 1, tc.quant)
			got, cp, ok := MinTP(c)
			if !ok || got != tc.want {
				t.Errorf("MinTP = %d (ok %v, %s), want %d", got, ok, cp.Reason, tc.want)
			}
		})
	}
}

func TestRooflineShape(t *testing.T) {
	c := mustConfig(t, "Qwen3-32B", "H100", 2, "bf16")
	// Decode is memory-bound: 64 sequences cost far less than 64× one.
	d1, d64 := c.DecodeStepTime(1, 1000), c.DecodeStepTime(64, 1000)
	if d64 > 3*d1 {
		t.Errorf("decode batch 64 = %v, batch 1 = %v: want memory-bound (≤ 3×)", d64, d1)
	}
	// Prefill is compute-bound: twice the tokens, about twice the time.
	p1, p2 := c.PrefillTime(0, 4096), c.PrefillTime(0, 8192)
	if r := float64(p2) / float64(p1); r < 1.8 || r > 2.3 {
		t.Errorf("prefill 8192/4096 time ratio = %.2f, want ≈ 2", r)
	}
	// TP halves the per-GPU work: tp=4 decodes faster than tp=2.
	c4 := mustConfig(t, "Qwen3-32B", "H100", 4, "bf16")
	if c4.DecodeStepTime(1, 1000) >= d1 {
		t.Error("tp=4 decode should be faster than tp=2")
	}
	// FP8 weights halve decode traffic; H200's HBM is faster than H100's.
	if mustConfig(t, "Qwen3-32B", "H100", 2, "fp8").DecodeStepTime(1, 1000) >= d1 {
		t.Error("fp8 decode should be faster than bf16")
	}
	if mustConfig(t, "Qwen3-32B", "H200", 2, "bf16").DecodeStepTime(1, 1000) >= d1 {
		t.Error("H200 decode should be faster than H100")
	}
}

func TestConfigValidate(t *testing.T) {
	base := mustConfig(t, "Qwen3-32B", "H100", 2, "bf16")
	tests := []struct {
		name   string
		mutate func(*Config)
		want   string
	}{
		{"tp not dividing heads", func(c *Config) { c.TP = 3 }, "tp: 3 does not divide"},
		{"utilization", func(c *Config) { c.GPUMemoryUtilization = 1.5 }, "gpu_memory_utilization"},
		{"block size", func(c *Config) { c.BlockSize = 12 }, "block_size"},
		{"quant", func(c *Config) { c.Quant = "fp3" }, "quant"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := base
			tc.mutate(&c)
			err := c.Validate()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Validate() = %v, want mention of %q", err, tc.want)
			}
		})
	}
}
