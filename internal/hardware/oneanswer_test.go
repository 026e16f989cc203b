package hardware_test

import (
	"testing"

	"github.com/gangway/gangway/internal/hardware"
	"github.com/gangway/gangway/internal/inference/enginesim"
	"github.com/gangway/gangway/internal/inference/gateway"
	"github.com/gangway/gangway/internal/planner"
)

// answer is what gangway says to "does model M fit on N×GPU, with how
// many KV-cache tokens".
type answer struct {
	fits              bool
	kvTokens          int64
	weightBytesPerGPU int64
}

// TestOneAnswer asks every front-end that sizes an inference replica the
// same question and wants one answer: hardware.Config.Capacity itself,
// `gangway plan serve` (planner.Serve, through the planner's catalog),
// the engine simulator (enginesim.NewEngine) and the gateway's routing
// capacity (gateway.CapacityFromConfig).
func TestOneAnswer(t *testing.T) {
	tests := []struct {
		name, model, gpu string
		tp               int
		quant            string
		// want is hardware's answer, pinned so that a change of the
		// memory model shows up here as well as in its own tests.
		want answer
	}{
		// 141 GB of bf16 weights, 32.9 GiB per GPU; 35.7 GiB of KV cache
		// per GPU at 80 KiB per token (2 of the 8 KV heads).
		{"Llama-3-70B on 4×H100", "Llama-3-70B", "H100", 4, "bf16", answer{true, 467840, 35276853248}},
		{"Llama-3-70B on 2×H100", "llama3-70b", "H100-SXM", 2, "bf16", answer{true, 16192, 70553706496}},
		{"Llama-3-70B on 1×H100", "llama3-70b", "h100", 1, "bf16", answer{false, 0, 141107412992}},
		{"Llama-3-70B int4 on 1×H100", "Llama-3-70B", "NVIDIA H100 80GB HBM3", 1, "int4", answer{true, 103744, 39498452992}},
		{"Llama-3-8B on 1×A100", "llama3-8b", "A100", 1, "bf16", answer{true, 448720, 16060522496}},
		{"Qwen3-32B on 2×H100", "Qwen3-32B", "H100", 2, "bf16", answer{true, 310128, 32762106880}},
		{"Llama-3.1-405B fp8 on 8×H200", "llama3-405b", "H200", 8, "fp8", answer{true, 1248592, 51257012224}},
		{"Llama-3.1-405B on 8×A100", "llama3-405b", "A100", 8, "bf16", answer{false, 0, 101463347200}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := hardware.NewConfig(tc.model, tc.gpu, tc.tp, tc.quant)
			if err != nil {
				t.Fatal(err)
			}
			cp := cfg.Capacity()
			got := map[string]answer{"hardware": {cp.Fits, cp.KVTokens, cp.WeightBytesPerGPU}}

			cat := planner.DefaultCatalog()
			m, err := cat.Model(tc.model)
			if err != nil {
				t.Fatal(err)
			}
			g, err := cat.GPU(tc.gpu)
			if err != nil {
				t.Fatal(err)
			}
			prec, err := hardware.ParseQuant(tc.quant)
			if err != nil {
				t.Fatal(err)
			}
			est := planner.Serve(planner.ServeRequest{Model: m, GPU: g, Precision: prec, MaxSeq: cfg.MaxModelLen})
			for _, o := range est.Options {
				if o.TP == tc.tp {
					got["planner.Serve"] = answer{o.Fits, o.KVCapacityTokens, o.WeightsBytesPerGPU}
				}
			}

			if e, err := enginesim.NewEngine(cfg); err == nil {
				ecp := e.Capacity()
				got["enginesim"] = answer{ecp.Fits, ecp.KVTokens, ecp.WeightBytesPerGPU}
			} else if tc.want.fits {
				t.Errorf("enginesim refuses what fits: %v", err)
			}

			if tc.want.fits {
				gcp := gateway.CapacityFromConfig(cfg)
				got["gateway"] = answer{true, gcp.KVTokens, gcp.Engine.WeightBytesPerGPU()}
			}

			fronts := []string{"hardware", "planner.Serve"}
			if tc.want.fits {
				fronts = append(fronts, "enginesim", "gateway")
			}
			for _, f := range fronts {
				a, ok := got[f]
				if !ok {
					t.Errorf("%s gave no answer", f)
					continue
				}
				if a != tc.want {
					t.Errorf("%s: fits %v, %d KV tokens, %d weight bytes per GPU; want %v, %d, %d",
						f, a.fits, a.kvTokens, a.weightBytesPerGPU, tc.want.fits, tc.want.kvTokens, tc.want.weightBytesPerGPU)
				}
			}
		})
	}
}
