package planner

import (
	"math"
	"testing"
)

func near(a, b, rel float64) bool { return math.Abs(a-b) <= rel*math.Abs(b) }

func TestFLOPsByHand(t *testing.T) {
	// One layer, h=4, ffn=16 (GELU), MHA with 2 heads, vocab 10; one
	// sequence of 3 tokens.
	m := Model{Name: "tiny", Layers: 1, Hidden: 4, Heads: 2, KVHeads: 2, FFN: 16, Vocab: 10, MLP: MLPGELU}
	l := LayerForwardFLOPs(m, 1, 3)
	// Matmuls: 2·tokens·(4h² + 2hf) = 2·3·(64 + 128) = 1152.
	if l.Matmul != 1152 {
		t.Errorf("Matmul = %v, want 1152", l.Matmul)
	}
	// Attention: 4·tokens·s·h = 4·3·3·4 = 144.
	if l.Attention != 144 {
		t.Errorf("Attention = %v, want 144", l.Attention)
	}
	// Logits: 2·3·4·10 = 240.
	if got := LogitsForwardFLOPs(m, 1, 3); got != 240 {
		t.Errorf("Logits = %v, want 240", got)
	}
	// Model FLOPs: 3·(1152 + 144 + 240) = 4608.
	if got := ModelFLOPs(m, 3, 1); got != 4608 {
		t.Errorf("ModelFLOPs = %v, want 4608", got)
	}
	for _, tt := range []struct {
		r    Recompute
		want float64
	}{
		{RecomputeNone, 4608},
		{RecomputeSelective, 4608 + 144},
		{RecomputeFull, 4608 + 1152 + 144},
	} {
		if got := HardwareFLOPs(m, 3, 1, tt.r); got != tt.want {
			t.Errorf("HardwareFLOPs(%s) = %v, want %v", tt.r, got, tt.want)
		}
	}
}

// Narayanan et al. 2021 eq. 3: with full recomputation a GPT step is
// 96·B·s·l·h²·(1 + s/6h + V/16lh) FLOPs (matmul weights only: 12h² per
// layer, as the paper counts).
func TestFLOPsMatchNarayananEq3(t *testing.T) {
	for _, name := range []string{"megatron-18b", "megatron-145b", "megatron-1t"} {
		m, _ := DefaultCatalog().Model(name)
		B, s := 1024.0, 2048.0
		l, h, V := float64(m.Layers), float64(m.Hidden), float64(m.Vocab)
		want := 96 * B * s * l * h * h * (1 + s/(6*h) + V/(16*l*h))
		got := HardwareFLOPs(m, 2048, 1024, RecomputeFull)
		if !near(got, want, 1e-9) {
			t.Errorf("%s: HardwareFLOPs = %.6g, want %.6g", name, got, want)
		}
		// MFU's numerator drops the recomputation: 72 instead of 96, V/12lh.
		wantModel := 72 * B * s * l * h * h * (1 + s/(6*h) + V/(12*l*h))
		if got := ModelFLOPs(m, 2048, 1024); !near(got, wantModel, 1e-9) {
			t.Errorf("%s: ModelFLOPs = %.6g, want %.6g", name, got, wantModel)
		}
	}
}

// Attention work scales with the query width Heads·HeadDim, not the
// hidden size: Qwen3-30B-A3B has 32 heads of 128 (4,096) on a hidden of
// 2,048, so its QKᵀ and attention·V are twice what 4·t·s·h gives.
func TestAttentionFLOPsUseQueryWidth(t *testing.T) {
	m := Model{Name: "q3", Layers: 1, Hidden: 2048, Heads: 32, KVHeads: 4, HeadSize: 128, FFN: 6144, Vocab: 10, MLP: MLPSwiGLU}
	got := LayerForwardFLOPs(m, 2, 4096).Attention
	want := 4.0 * 2 * 4096 * 4096 * 4096
	if got != want {
		t.Errorf("Attention = %v, want %v (4·tokens·s·heads·head_dim)", got, want)
	}
}
