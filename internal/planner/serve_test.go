package planner

import (
	"testing"

	"github.com/gangway/gangway/internal/hardware"
)

func TestServeByHand(t *testing.T) {
	cat := DefaultCatalog()
	m, _ := cat.Model("llama3-70b")
	h100 := mustGPU(t, "H100")
	// KV per token: 2 · 80 layers · 8 KV heads · 128 · 2 bytes = 327,680.
	if got := hardware.KVBytesPerToken(m, BF16); got != 327680 {
		t.Errorf("KVBytesPerToken = %d, want 327680", got)
	}
	if got := hardware.KVBytesPerToken(m, FP8); got != 163840 {
		t.Errorf("KVBytesPerToken fp8 = %d, want 163840", got)
	}
	// Weights: layers at the precision, embedding and output in 16 bits.
	layers := float64(80 * m.LayerParams())
	edge := float64(m.EmbeddingParams() + m.OutputParams())
	for _, tt := range []struct {
		p    Precision
		want float64
	}{
		{BF16, 2*layers + 2*edge},
		{FP8, layers + 2*edge},
		{INT8, layers + 2*edge},
		{INT4, (0.5+2.0/128)*layers + 2*edge},
	} {
		if got := hardware.WeightsBytes(m, tt.p); got != int64(tt.want) {
			t.Errorf("WeightsBytes(%s) = %d, want %d", tt.p, got, int64(tt.want))
		}
	}
	for _, tt := range []struct {
		p     Precision
		minTP int
	}{
		// 141 GB of bf16 weights: 65.7 GiB per GPU at TP 2 leaves about
		// 3 GiB (20k tokens) of KV cache on 80 GB parts; fp8 fits TP 2 with
		// room; int4 fits one GPU.
		{BF16, 2},
		{FP8, 2},
		{INT4, 1},
	} {
		est := Serve(ServeRequest{Model: m, GPU: h100, Precision: tt.p})
		if est.MinTP != tt.minTP {
			t.Errorf("%s: MinTP = %d, want %d (options %+v)", tt.p, est.MinTP, tt.minTP, est.Options)
		}
		for _, o := range est.Options {
			if o.TP < est.MinTP && o.Fits {
				t.Errorf("%s: tp=%d fits below MinTP", tt.p, o.TP)
			}
			if o.Fits && o.KVCapacityTokens < int64(est.MaxSeq) {
				t.Errorf("%s tp=%d fits with %d tokens", tt.p, o.TP, o.KVCapacityTokens)
			}
		}
	}
	// Each option is the hardware catalog's replica capacity at its TP
	// degree, with vLLM's defaults and max_model_len MaxSeq.
	est := Serve(ServeRequest{Model: m, GPU: h100, Precision: BF16})
	for _, o := range est.Options {
		cp := hardware.Config{Model: m, GPU: h100, TP: o.TP, Quant: BF16, MaxModelLen: 8192}.WithDefaults().Capacity()
		if o.KVCapacityTokens != cp.KVTokens || o.WeightsBytesPerGPU != cp.WeightBytesPerGPU || o.Fits != cp.Fits {
			t.Errorf("tp=%d: option %+v, hardware capacity %+v", o.TP, o, cp)
		}
	}
}

func TestServeDoesNotFit(t *testing.T) {
	m, _ := DefaultCatalog().Model("llama3-405b")
	est := Serve(ServeRequest{Model: m, GPU: mustGPU(t, "A100"), Precision: BF16})
	if est.MinTP != 0 || est.Reason == "" {
		t.Errorf("405B bf16 on 8 A100 must not fit: %+v", est)
	}
	// On an NVL72 rack it does.
	if est := Serve(ServeRequest{Model: m, GPU: mustGPU(t, "GB200"), Precision: BF16}); est.MinTP == 0 {
		t.Errorf("405B bf16 on GB200 NVL72: %s", est.Reason)
	}
}

func TestParsePrecision(t *testing.T) {
	for _, s := range []string{"bf16", "FP8", " int4 ", "int8", "fp16"} {
		if _, err := ParsePrecision(s); err != nil {
			t.Errorf("ParsePrecision(%q): %v", s, err)
		}
	}
	if _, err := ParsePrecision("fp4"); err == nil {
		t.Error("fp4 accepted")
	}
}

// TestServeKVPrecisionSizesTheCache: a 1-byte KV cache (fp8 or int8)
// holds twice the tokens of a bf16 one in the same memory, and the
// estimate's bytes per token say the same as its capacity.
func TestServeKVPrecisionSizesTheCache(t *testing.T) {
	cat := DefaultCatalog()
	m, _ := cat.Model("llama3-70b")
	h100 := mustGPU(t, "H100")
	tokens := func(kv Precision) (int64, int64) {
		est := Serve(ServeRequest{Model: m, GPU: h100, KVPrecision: kv})
		for _, o := range est.Options {
			if o.TP == 4 {
				return o.KVCapacityTokens, est.KVBytesPerToken
			}
		}
		t.Fatalf("%s: no TP 4 option", kv)
		return 0, 0
	}
	bf, bfPer := tokens(BF16)
	for _, kv := range []Precision{FP8, INT8} {
		got, per := tokens(kv)
		if per*2 != bfPer || got < 2*bf-32 || got > 2*bf+32 {
			t.Errorf("%s KV cache: %d tokens at %d B each; want about twice bf16's %d tokens at half its %d B", kv, got, per, bf, bfPer)
		}
	}
}
