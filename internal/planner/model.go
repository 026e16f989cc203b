package planner

import (
	"errors"
	"fmt"
)

// MLPKind is the feed-forward block's shape.
type MLPKind string

// The feed-forward blocks the planner knows.
const (
	// MLPGELU is GPT's two-matrix block: h→ffn, GELU, ffn→h.
	MLPGELU MLPKind = "gelu"
	// MLPSwiGLU is Llama's three-matrix gated block: gate and up h→ffn,
	// SiLU(gate)·up, down ffn→h.
	MLPSwiGLU MLPKind = "swiglu"
)

// Model is a dense decoder-only transformer.
type Model struct {
	Name    string
	Layers  int
	Hidden  int
	Heads   int
	KVHeads int // equal to Heads for multi-head attention; fewer for GQA
	FFN     int
	Vocab   int
	MLP     MLPKind
	// TiedEmbeddings: the output projection reuses the input embedding.
	TiedEmbeddings bool
	// Biases: linear layers and norms carry biases (GPT-2/3, BLOOM); Llama
	// has none.
	Biases bool
	// LearnedPositions is the number of learned position embeddings (GPT-3:
	// 2048); 0 for RoPE or ALiBi.
	LearnedPositions int
	// Dropout: the model is trained with hidden and attention dropout, whose
	// masks are activations too (Korthikanti et al. 2022, Table 2).
	Dropout bool
}

// ErrInvalidModel is wrapped by Model.Validate's errors.
var ErrInvalidModel = errors.New("planner: invalid model")

// Validate reports the first field that makes the model unusable.
func (m Model) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w %q: %s", ErrInvalidModel, m.Name, fmt.Sprintf(format, args...))
	}
	switch {
	case m.Name == "":
		return fmt.Errorf("%w: name is empty", ErrInvalidModel)
	case m.Layers <= 0:
		return bad("layers must be positive, got %d", m.Layers)
	case m.Hidden <= 0:
		return bad("hidden must be positive, got %d", m.Hidden)
	case m.Heads <= 0:
		return bad("heads must be positive, got %d", m.Heads)
	case m.Hidden%m.Heads != 0:
		return bad("hidden %d is not a multiple of heads %d", m.Hidden, m.Heads)
	case m.KVHeads <= 0:
		return bad("kv_heads must be positive, got %d", m.KVHeads)
	case m.KVHeads > m.Heads || m.Heads%m.KVHeads != 0:
		return bad("heads %d is not a multiple of kv_heads %d", m.Heads, m.KVHeads)
	case m.FFN <= 0:
		return bad("ffn must be positive, got %d", m.FFN)
	case m.Vocab <= 0:
		return bad("vocab must be positive, got %d", m.Vocab)
	case m.MLP != MLPGELU && m.MLP != MLPSwiGLU:
		return bad("mlp must be %q or %q, got %q", MLPGELU, MLPSwiGLU, m.MLP)
	case m.LearnedPositions < 0:
		return bad("learned_positions must not be negative, got %d", m.LearnedPositions)
	}
	return nil
}

// HeadDim is the width of one attention head.
func (m Model) HeadDim() int { return m.Hidden / m.Heads }

// KVHidden is the width of the key (or value) projection: KVHeads·HeadDim.
func (m Model) KVHidden() int { return m.KVHeads * m.HeadDim() }

// mlpMatrices is the number of h×ffn matrices in the MLP block.
func (m Model) mlpMatrices() int {
	if m.MLP == MLPSwiGLU {
		return 3
	}
	return 2
}

// LayerMatmulParams is the number of weights one layer multiplies by:
// Q and O (h·h each), K and V (h·kv each) and the MLP matrices.
func (m Model) LayerMatmulParams() int64 {
	h, kv, f := int64(m.Hidden), int64(m.KVHidden()), int64(m.FFN)
	return 2*h*h + 2*h*kv + int64(m.mlpMatrices())*h*f
}

// LayerParams is LayerMatmulParams plus biases and the two norms' weights
// (and their biases for LayerNorm models).
func (m Model) LayerParams() int64 {
	h, kv, f := int64(m.Hidden), int64(m.KVHidden()), int64(m.FFN)
	p := m.LayerMatmulParams() + 2*h // norm weights
	if m.Biases {
		p += 2*h + // norm biases
			h + 2*kv + h + // q, k, v, o
			int64(m.mlpMatrices()-1)*f + h // MLP up (and gate), down
	}
	return p
}

// EmbeddingParams is the input embedding plus learned positions.
func (m Model) EmbeddingParams() int64 {
	return int64(m.Vocab)*int64(m.Hidden) + int64(m.LearnedPositions)*int64(m.Hidden)
}

// OutputParams is the final norm plus, when untied, the output projection.
func (m Model) OutputParams() int64 {
	p := int64(m.Hidden)
	if m.Biases {
		p += int64(m.Hidden)
	}
	if !m.TiedEmbeddings {
		p += int64(m.Vocab) * int64(m.Hidden)
	}
	return p
}

// Params is the model's total parameter count.
func (m Model) Params() int64 {
	return int64(m.Layers)*m.LayerParams() + m.EmbeddingParams() + m.OutputParams()
}
