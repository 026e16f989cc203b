package hardware

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// MLPKind is the feed-forward block's shape.
type MLPKind string

// The feed-forward blocks the catalog knows.
const (
	// MLPGELU is GPT's two-matrix block: h→ffn, GELU, ffn→h.
	MLPGELU MLPKind = "gelu"
	// MLPSwiGLU is Llama's three-matrix gated block: gate and up h→ffn,
	// SiLU(gate)·up, down ffn→h.
	MLPSwiGLU MLPKind = "swiglu"
)

// Model is the shape of a dense decoder-only transformer.
type Model struct {
	// Name is the canonical name ("llama3-70b"); Aliases are the other
	// names LookupModel accepts ("Llama-3-70B").
	Name    string
	Aliases []string
	Layers  int
	Hidden  int
	Heads   int
	KVHeads int // equal to Heads for multi-head attention; fewer for GQA
	// HeadSize is the width of one attention head when it is not
	// Hidden/Heads (Qwen3: 128 where Hidden/Heads is 80); 0 otherwise.
	HeadSize int
	FFN      int
	Vocab    int
	MLP      MLPKind
	// TiedEmbeddings: the output projection reuses the input embedding.
	TiedEmbeddings bool
	// Biases: linear layers and norms carry biases (GPT-2/3, BLOOM); Llama
	// has none.
	Biases bool
	// LearnedPositions is the number of learned position embeddings (GPT-3:
	// 2048); 0 for RoPE or ALiBi.
	LearnedPositions int
	// RoPE: queries and keys are rotated by rotary position embeddings
	// (Llama, Qwen, Mixtral, GPT-NeoX; not GPT-3, BERT or BLOOM's ALiBi),
	// one more elementwise kernel per layer.
	RoPE bool
	// Dropout: the model is trained with hidden and attention dropout, whose
	// masks are activations too (Korthikanti et al. 2022, Table 2).
	Dropout bool
	// SlidingWindow is the attention window, in tokens, of the windowed
	// layers: each query there attends to itself and at most
	// SlidingWindow−1 keys before it (Mistral 7B: 4,096 on every layer;
	// GPT-OSS: 128 on every other layer). WindowedLayers is how many
	// layers use it; both 0 is full causal attention everywhere.
	SlidingWindow  int
	WindowedLayers int
	// MaxContext is the context length the model is served with by
	// default (vLLM's max_model_len); 0 when the catalog does not say.
	MaxContext int

	// Mixture of experts (Mixtral, DeepSeek-V3); Experts == 0 is a dense
	// model and the other fields must then be 0.
	//
	// Experts is the number of routed experts per MoE layer;
	// ExpertsPerToken the router's top-k; SharedExperts the experts every
	// token passes through (DeepSeek: 1); ExpertFFN one expert's FFN width
	// (0: FFN); DenseLayers the leading layers with a dense FFN-wide MLP
	// instead (DeepSeek-V3's first_k_dense_replace = 3). Every MoE layer
	// also has a router, an h×Experts matrix.
	Experts         int
	ExpertsPerToken int
	SharedExperts   int
	ExpertFFN       int
	DenseLayers     int
}

// MoE reports whether the model has routed experts.
func (m Model) MoE() bool { return m.Experts > 0 }

// ExpertFFNWidth is one expert's FFN width.
func (m Model) ExpertFFNWidth() int {
	if m.ExpertFFN > 0 {
		return m.ExpertFFN
	}
	return m.FFN
}

// MoELayers is the number of layers with routed experts.
func (m Model) MoELayers() int {
	if !m.MoE() {
		return 0
	}
	return m.Layers - m.DenseLayers
}

// expertParams is one expert's weights (its MLP matrices and, with
// biases, their biases).
func (m Model) expertParams() int64 {
	h, f := int64(m.Hidden), int64(m.ExpertFFNWidth())
	p := int64(m.MLPMatrices()) * h * f
	if m.Biases {
		p += int64(m.MLPMatrices()-1)*f + h
	}
	return p
}

// RoutedExpertParams is the routed experts' weights over the whole
// model: what expert parallelism shards.
func (m Model) RoutedExpertParams() int64 {
	return int64(m.MoELayers()) * int64(m.Experts) * m.expertParams()
}

// ErrInvalidModel is wrapped by Model.Validate's errors.
var ErrInvalidModel = errors.New("hardware: invalid model")

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
	case m.HeadSize < 0:
		return bad("head_size must not be negative, got %d", m.HeadSize)
	case m.HeadSize == 0 && m.Hidden%m.Heads != 0:
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
	case m.SlidingWindow < 0:
		return bad("sliding_window must not be negative (0: full attention), got %d", m.SlidingWindow)
	case m.WindowedLayers < 0 || m.WindowedLayers > m.Layers:
		return bad("sliding_window_layers must be 0–%d (the layers), got %d", m.Layers, m.WindowedLayers)
	case (m.SlidingWindow > 0) != (m.WindowedLayers > 0):
		return bad("sliding_window (%d) and sliding_window_layers (%d) must both be set or both be 0", m.SlidingWindow, m.WindowedLayers)
	case m.Experts < 0:
		return bad("experts must not be negative, got %d", m.Experts)
	case m.Experts > 0 && (m.ExpertsPerToken < 1 || m.ExpertsPerToken > m.Experts):
		return bad("experts_per_token (top-k) must be 1–%d (the routed experts), got %d", m.Experts, m.ExpertsPerToken)
	case m.SharedExperts < 0:
		return bad("shared_experts must not be negative, got %d", m.SharedExperts)
	case m.ExpertFFN < 0:
		return bad("expert_ffn must not be negative, got %d", m.ExpertFFN)
	case m.DenseLayers < 0 || (m.Experts > 0 && m.DenseLayers >= m.Layers):
		return bad("dense_layers must be 0–%d (fewer than the layers), got %d", m.Layers-1, m.DenseLayers)
	case m.Experts == 0 && (m.ExpertsPerToken != 0 || m.SharedExperts != 0 || m.ExpertFFN != 0 || m.DenseLayers != 0):
		return bad("experts_per_token, shared_experts, expert_ffn and dense_layers need experts > 0")
	}
	return nil
}

// HeadDim is the width of one attention head.
func (m Model) HeadDim() int {
	if m.HeadSize > 0 {
		return m.HeadSize
	}
	return m.Hidden / m.Heads
}

// QHidden is the width of the query projection (and the attention
// output's input): Heads·HeadDim, equal to Hidden unless HeadSize says
// otherwise.
func (m Model) QHidden() int { return m.Heads * m.HeadDim() }

// KVHidden is the width of the key (or value) projection: KVHeads·HeadDim.
func (m Model) KVHidden() int { return m.KVHeads * m.HeadDim() }

// MLPMatrices is the number of h×ffn matrices in the MLP block.
func (m Model) MLPMatrices() int {
	if m.MLP == MLPSwiGLU {
		return 3
	}
	return 2
}

// denseMatmulParams is the weights a dense layer multiplies by: Q and O
// (h·q each), K and V (h·kv each) and the MLP matrices.
func (m Model) denseMatmulParams() int64 {
	h, q, kv, f := int64(m.Hidden), int64(m.QHidden()), int64(m.KVHidden()), int64(m.FFN)
	return 2*h*q + 2*h*kv + int64(m.MLPMatrices())*h*f
}

// moeLayerMatmul is an MoE layer's attention weights plus its router and
// the MLP weights of n experts.
func (m Model) moeLayerMatmul(n int) int64 {
	h, q, kv := int64(m.Hidden), int64(m.QHidden()), int64(m.KVHidden())
	return 2*h*q + 2*h*kv + h*int64(m.Experts) + int64(n)*int64(m.MLPMatrices())*h*int64(m.ExpertFFNWidth())
}

// LayerMatmulParams is the number of weights one token is multiplied by in
// a layer, averaged over the layers: Q and O (h·q each), K and V (h·kv
// each) and the MLP matrices; for a mixture of experts only the router
// and the top-k routed and the shared experts count (the forward FLOPs
// per token are 2× this).
func (m Model) LayerMatmulParams() int64 {
	if !m.MoE() {
		return m.denseMatmulParams()
	}
	moe := int64(m.MoELayers()) * m.moeLayerMatmul(m.ExpertsPerToken+m.SharedExperts)
	return (int64(m.DenseLayers)*m.denseMatmulParams() + moe) / int64(m.Layers)
}

// LayerParams is a layer's weights — its matrices (every expert, for a
// mixture of experts), biases and the two norms' weights (and their
// biases for LayerNorm models) — averaged over the layers.
func (m Model) LayerParams() int64 {
	if !m.MoE() {
		return m.denseLayerParams()
	}
	return m.layersParams() / int64(m.Layers)
}

// denseLayerParams is one dense layer's weights.
func (m Model) denseLayerParams() int64 {
	h, q, kv, f := int64(m.Hidden), int64(m.QHidden()), int64(m.KVHidden()), int64(m.FFN)
	p := m.denseMatmulParams() + 2*h // norm weights
	if m.Biases {
		p += 2*h + // norm biases
			q + 2*kv + h + // q, k, v, o
			int64(m.MLPMatrices()-1)*f + h // MLP up (and gate), down
	}
	return p
}

// layersParams is the weights of all layers.
func (m Model) layersParams() int64 {
	if !m.MoE() {
		return int64(m.Layers) * m.denseLayerParams()
	}
	h, q, kv := int64(m.Hidden), int64(m.QHidden()), int64(m.KVHidden())
	moe := m.moeLayerMatmul(0) + 2*h + int64(m.Experts+m.SharedExperts)*m.expertParams()
	if m.Biases {
		moe += 2*h + q + 2*kv + h
	}
	return int64(m.DenseLayers)*m.denseLayerParams() + int64(m.MoELayers())*moe
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
	return m.layersParams() + m.EmbeddingParams() + m.OutputParams()
}

func gptModel(name string, layers, hidden, heads, vocab int) Model {
	return Model{Name: name, Layers: layers, Hidden: hidden, Heads: heads, KVHeads: heads,
		FFN: 4 * hidden, Vocab: vocab, MLP: MLPGELU, TiedEmbeddings: true, Biases: true,
		LearnedPositions: 2048, Dropout: true}
}

func llamaModel(name string, layers, hidden, heads, kvHeads, ffn, vocab, maxContext int, aliases ...string) Model {
	return Model{Name: name, Aliases: aliases, Layers: layers, Hidden: hidden, Heads: heads, KVHeads: kvHeads,
		FFN: ffn, Vocab: vocab, MLP: MLPSwiGLU, RoPE: true, MaxContext: maxContext}
}

// models is the catalog: the planner's models (its names are canonical;
// the planner's README and dev vectors print them) and the engine
// simulator's (Qwen3; its "Llama-3-70B" spellings are aliases). The two
// tables agreed on every shape they shared. Llama 3 is served with its
// 8k context (the simulator's default); Llama 3.1 405B with 128k.
var models = func() []Model {
	bloom := gptModel("bloom-176b", 70, 14336, 112, 250880)
	bloom.LearnedPositions = 0 // ALiBi
	bloom.Dropout = false
	foundry13 := gptModel("foundry-13b", 40, 5120, 40, 50368)
	foundry13.Dropout = false
	foundry70 := gptModel("foundry-70b", 80, 8192, 64, 50368)
	foundry70.Dropout = false
	qwen3 := func(name string, layers, hidden, heads, ffn int, tied bool) Model {
		return Model{Name: name, Layers: layers, Hidden: hidden, Heads: heads, KVHeads: 8, HeadSize: 128,
			FFN: ffn, Vocab: 151936, MLP: MLPSwiGLU, RoPE: true, TiedEmbeddings: tied, MaxContext: 40960}
	}
	// Mixtral (Mistral AI's config.json): 8 routed experts, top-2, every
	// layer MoE.
	mixtral := func(name string, layers, hidden, heads, ffn, vocab int, aliases ...string) Model {
		m := llamaModel(name, layers, hidden, heads, 8, ffn, vocab, 32768, aliases...)
		m.Experts, m.ExpertsPerToken = 8, 2
		return m
	}
	return []Model{
		gptModel("gpt3-175b", 96, 12288, 96, 50257),
		llamaModel("llama3-8b", 32, 4096, 32, 8, 14336, 128256, 8192, "Llama-3-8B", "llama-3.1-8b", "llama3.1-8b"),
		llamaModel("llama3-70b", 80, 8192, 64, 8, 28672, 128256, 8192, "Llama-3-70B", "llama-3.1-70b", "llama3.1-70b"),
		llamaModel("llama3-405b", 126, 16384, 128, 8, 53248, 128256, 131072, "Llama-3.1-405B", "llama3.1-405b", "llama-3-405b"),
		llamaModel("llama2-7b", 32, 4096, 32, 32, 11008, 32000, 4096, "Llama-2-7B"),
		llamaModel("llama2-13b", 40, 5120, 40, 40, 13824, 32000, 4096, "Llama-2-13B"),
		llamaModel("llama2-70b", 80, 8192, 64, 8, 28672, 32000, 4096, "Llama-2-70B"),
		// Narayanan et al. 2021 Table 1 and Korthikanti et al. 2022.
		gptModel("megatron-18b", 40, 6144, 48, 51200),
		gptModel("megatron-22b", 48, 6144, 64, 51200),
		gptModel("megatron-145b", 80, 12288, 96, 51200),
		gptModel("megatron-175b", 96, 12288, 96, 51200),
		gptModel("mt-nlg-530b", 105, 20480, 128, 51200),
		gptModel("megatron-1t", 128, 25600, 160, 51200),
		bloom,
		// MosaicML LLM Foundry benchmark configurations.
		foundry13,
		foundry70,
		// Qwen3 (Hugging Face config.json of Qwen/Qwen3-*).
		qwen3("Qwen3-32B", 64, 5120, 64, 25600, false),
		qwen3("Qwen3-8B", 36, 4096, 32, 12288, false),
		qwen3("Qwen3-0.6B", 28, 1024, 16, 3072, true),
		mixtral("mixtral-8x7b", 32, 4096, 32, 14336, 32000, "Mixtral-8x7B-v0.1"),
		mixtral("mixtral-8x22b", 56, 6144, 48, 16384, 32768, "Mixtral-8x22B-v0.1"),
	}
}()

// Models returns the catalog's models in a fixed order. The caller may
// modify the result.
func Models() []Model {
	out := make([]Model, len(models))
	for i, m := range models {
		m.Aliases = slices.Clone(m.Aliases)
		out[i] = m
	}
	return out
}

// ModelNames lists the canonical model names, sorted.
func ModelNames() []string {
	names := make([]string, len(models))
	for i, m := range models {
		names[i] = m.Name
	}
	slices.SortFunc(names, func(a, b string) int { return strings.Compare(strings.ToLower(a), strings.ToLower(b)) })
	return names
}

// LookupModel finds a model by its canonical name or an alias, ignoring
// case, an organisation prefix ("Qwen/Qwen3-32B"), and the "Meta-" and
// "-Instruct" decorations of Hugging Face names
// ("meta-llama/Meta-Llama-3-70B-Instruct").
func LookupModel(name string) (Model, error) {
	n := strings.ToLower(strings.TrimSpace(name))
	if i := strings.LastIndexByte(n, '/'); i >= 0 {
		n = n[i+1:]
	}
	n = strings.TrimPrefix(n, "meta-")
	n = strings.TrimSuffix(n, "-instruct")
	for _, m := range models {
		if strings.EqualFold(n, m.Name) || slices.ContainsFunc(m.Aliases, func(a string) bool { return strings.EqualFold(n, a) }) {
			return m, nil
		}
	}
	return Model{}, fmt.Errorf("%w model %q (known: %s)", ErrUnknown, name, strings.Join(ModelNames(), ", "))
}
