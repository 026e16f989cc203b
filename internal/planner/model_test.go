package planner

import (
	"errors"
	"testing"
)

func TestParamsMatchPublishedCounts(t *testing.T) {
	cat := DefaultCatalog()
	tests := []struct {
		model string
		want  int64 // published or reported count
		tol   float64
	}{
		// Exact counts reported by LLM Foundry for its benchmark configs
		// (dev vectors D9 and D10).
		{"foundry-70b", 64862437376, 0},
		{"foundry-13b", 12853954560, 0},
		// Hugging Face model cards.
		{"llama2-7b", 6738415616, 0},
		{"llama3-8b", 8030261248, 0},
		{"llama3-70b", 70553706496, 0},
		{"llama3-405b", 405853388800, 0},
		// BLOOM also has a layer norm after the embedding (2h).
		{"bloom-176b", 176247271424, 1e-6},
		// Narayanan et al. 2021 Table 1.
		{"megatron-18b", 18.4e9, 0.005},
		{"megatron-145b", 145.6e9, 0.005},
		{"megatron-1t", 1008e9, 0.005},
		{"mt-nlg-530b", 530e9, 0.005},
		{"gpt3-175b", 175e9, 0.005},
	}
	for _, tt := range tests {
		t.Run(tt.model, func(t *testing.T) {
			m, err := cat.Model(tt.model)
			if err != nil {
				t.Fatal(err)
			}
			got := m.Params()
			rel := float64(got-tt.want) / float64(tt.want)
			if rel < -tt.tol || rel > tt.tol {
				t.Errorf("Params() = %d, want %d (±%g)", got, tt.want, tt.tol)
			}
		})
	}
}

func TestLayerParamsByHand(t *testing.T) {
	// GQA + SwiGLU: h=8, 4 heads of 2, 2 KV heads (kv width 4), ffn 16.
	m := Model{Name: "tiny", Layers: 1, Hidden: 8, Heads: 4, KVHeads: 2, FFN: 16, Vocab: 10, MLP: MLPSwiGLU}
	// Q 64 + K 32 + V 32 + O 64 + 3·8·16 = 576 matmul weights.
	if got := m.LayerMatmulParams(); got != 576 {
		t.Errorf("LayerMatmulParams = %d, want 576", got)
	}
	// + two RMSNorm weights 16.
	if got := m.LayerParams(); got != 592 {
		t.Errorf("LayerParams = %d, want 592", got)
	}
	// Untied: embedding 80, output 80 + final norm 8.
	if got := m.Params(); got != 592+80+88 {
		t.Errorf("Params = %d, want %d", got, 592+80+88)
	}
	// GPT with biases: 12h² + 13h per layer.
	g := Model{Name: "gpt", Layers: 2, Hidden: 8, Heads: 2, KVHeads: 2, FFN: 32, Vocab: 10, MLP: MLPGELU,
		Biases: true, TiedEmbeddings: true, LearnedPositions: 4}
	if got, want := g.LayerParams(), int64(12*64+13*8); got != want {
		t.Errorf("GPT LayerParams = %d, want %d", got, want)
	}
	if got, want := g.Params(), int64(2*(12*64+13*8)+10*8+4*8+2*8); got != want {
		t.Errorf("GPT Params = %d, want %d", got, want)
	}
}

func TestModelValidate(t *testing.T) {
	ok := Model{Name: "m", Layers: 2, Hidden: 8, Heads: 4, KVHeads: 2, FFN: 16, Vocab: 10, MLP: MLPSwiGLU}
	if err := ok.Validate(); err != nil {
		t.Fatalf("valid model: %v", err)
	}
	tests := []struct {
		name string
		edit func(*Model)
	}{
		{"no name", func(m *Model) { m.Name = "" }},
		{"zero layers", func(m *Model) { m.Layers = 0 }},
		{"hidden not multiple of heads", func(m *Model) { m.Hidden = 10 }},
		{"kv heads do not divide heads", func(m *Model) { m.KVHeads = 3 }},
		{"more kv heads than heads", func(m *Model) { m.KVHeads = 8 }},
		{"unknown mlp", func(m *Model) { m.MLP = "relu" }},
		{"negative positions", func(m *Model) { m.LearnedPositions = -1 }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := ok
			tt.edit(&m)
			if err := m.Validate(); !errors.Is(err, ErrInvalidModel) {
				t.Errorf("Validate() = %v, want ErrInvalidModel", err)
			}
		})
	}
}
