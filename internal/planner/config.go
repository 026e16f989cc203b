package planner

import (
	"fmt"
	"math"
	"strings"

	"github.com/gangway/gangway/internal/hardware"
)

// Recompute is the activation recomputation policy.
type Recompute string

// Recomputation policies (Korthikanti et al. 2022).
const (
	// RecomputeNone keeps every activation.
	RecomputeNone Recompute = "none"
	// RecomputeSelective recomputes only the attention core (QKᵀ, softmax,
	// dropout, ·V), whose s×s activations are large and cheap to redo.
	RecomputeSelective Recompute = "selective"
	// RecomputeFull keeps only each layer's input and recomputes the whole
	// layer's forward pass during the backward pass.
	RecomputeFull Recompute = "full"
)

// ParseRecompute accepts "none", "selective", "full" and the loose
// spellings papers use ("full (uniform, every layer)", "checkpoint-activations").
func ParseRecompute(s string) (Recompute, error) {
	l := strings.ToLower(strings.TrimSpace(s))
	switch {
	case l == "none" || l == "no" || l == "off" || l == "false" || l == "":
		return RecomputeNone, nil
	case strings.HasPrefix(l, "selective"):
		return RecomputeSelective, nil
	case strings.HasPrefix(l, "full") || strings.Contains(l, "checkpoint"):
		return RecomputeFull, nil
	}
	return "", fmt.Errorf("unknown recompute %q (want none, selective or full)", s)
}

// Precision is the number format of the matrix multiplications.
type Precision = hardware.Precision

// The precisions the planner knows.
const (
	BF16 = hardware.BF16
	FP16 = hardware.FP16
	FP8  = hardware.FP8
	INT8 = hardware.INT8
	INT4 = hardware.INT4
)

// Config is one parallel layout and its per-GPU choices.
type Config struct {
	TP int `json:"tp"` // tensor-parallel degree
	PP int `json:"pp"` // pipeline stages
	VP int `json:"vp"` // virtual stages (model chunks) per pipeline stage; 1 = plain 1F1B
	DP int `json:"dp"` // data-parallel replicas
	// SP: sequence parallelism in the TP group (Korthikanti et al. 2022).
	SP         bool      `json:"sp"`
	MicroBatch int       `json:"micro_batch"` // sequences per micro-batch
	Recompute  Recompute `json:"recompute"`
	// ZeRO is the optimizer-state sharding stage: 0 none, 1 optimizer
	// states (Megatron's distributed optimizer), 2 + gradients, 3 +
	// parameters (FSDP FULL_SHARD).
	ZeRO int `json:"zero"`
	// CP is the context-parallel degree: each sequence is split over CP
	// GPUs, which exchange attention's keys and values by ring
	// send/receive (0 or 1: none). Gradients are reduced, and ZeRO
	// shards, over DP·CP.
	CP int `json:"cp,omitempty"`
	// Uneven pipeline splits (Megatron-LM): explicit transformer layers
	// on the first and last stage (0: from the even split), and the
	// embedding / loss counted as one layer of the first / last stage
	// (account_for_embedding_in_pipeline_split,
	// account_for_loss_in_pipeline_split).
	FirstStageLayers int  `json:"first_stage_layers,omitempty"`
	LastStageLayers  int  `json:"last_stage_layers,omitempty"`
	EmbeddingInSplit bool `json:"embedding_in_split,omitempty"`
	LossInSplit      bool `json:"loss_in_split,omitempty"`
	// EP is the expert-parallel degree of a mixture-of-experts model: each
	// MoE layer's routed experts are split over EP consecutive
	// data-parallel ranks (0 or 1: every GPU holds every expert), which
	// exchange tokens by all-to-all. EP divides DP·CP and the experts.
	EP int `json:"ep,omitempty"`
}

func (c Config) ep() int {
	if c.EP < 1 {
		return 1
	}
	return c.EP
}

// GPUs is TP·PP·DP·CP.
func (c Config) GPUs() int { return c.TP * c.PP * c.DP * c.cp() }

func (c Config) cp() int {
	if c.CP < 1 {
		return 1
	}
	return c.CP
}

// dpGroup is the gradient-reduction (and ZeRO sharding) group: DP·CP.
func (c Config) dpGroup() int { return c.DP * c.cp() }

// uneven reports whether the pipeline split is set explicitly.
func (c Config) uneven() bool {
	return c.FirstStageLayers > 0 || c.LastStageLayers > 0 || c.EmbeddingInSplit || c.LossInSplit
}

func (c Config) vp() int {
	if c.VP < 1 {
		return 1
	}
	return c.VP
}

func (c Config) String() string {
	sp := ""
	if c.SP {
		sp = "+sp"
	}
	s := fmt.Sprintf("tp=%d%s pp=%d vp=%d dp=%d mbs=%d recompute=%s zero=%d",
		c.TP, sp, c.PP, c.vp(), c.DP, c.MicroBatch, c.Recompute, c.ZeRO)
	if c.cp() > 1 {
		s += fmt.Sprintf(" cp=%d", c.CP)
	}
	if c.ep() > 1 {
		s += fmt.Sprintf(" ep=%d", c.EP)
	}
	if c.uneven() {
		s += fmt.Sprintf(" split(first=%d last=%d emb=%v loss=%v)", c.FirstStageLayers, c.LastStageLayers, c.EmbeddingInSplit, c.LossInSplit)
	}
	return s
}

// Job is what is being planned: a model trained on a cluster with a stack.
type Job struct {
	Model   Model
	Cluster Cluster
	Stack   Stack
	Seq     int
	// GlobalBatch is the number of sequences per optimizer step. Zero means
	// "many micro-batches" (memory only: the pipeline is full).
	GlobalBatch int
	// Precision of the matmuls; "" is bf16.
	Precision Precision
	// OverlapDP overrides Stack.OverlapDP when non-nil.
	OverlapDP *bool
	// Dropout overrides Model.Dropout when non-nil.
	Dropout *bool
	// FlashAttention overrides Stack.FlashAttention when non-nil.
	FlashAttention *bool
	// CapacityFactor bounds the tokens each routed expert takes to
	// CapacityFactor × its even share, padding to it (Switch Transformer;
	// Megatron's moe_expert_capacity_factor with pad_to_capacity); 0 is
	// dropless routing, each expert computing the tokens routed to it,
	// taken as balanced.
	CapacityFactor float64
	// FP8Scaling is the FP8 recipe when Precision is FP8 ("": delayed).
	FP8Scaling FP8Scaling
	// TPCommOverlap: Transformer Engine's userbuffers overlap (NeMo's and
	// Megatron-Bridge's tp_comm_overlap) splits each sequence-parallel
	// all-gather and reduce-scatter into chunks pipelined with the GEMM
	// that consumes or produces them; what is exposed is the larger of one
	// chunk (1/t of the collective) and what the GEMM cannot cover.
	TPCommOverlap bool
	// CPAllGather: context parallelism all-gathers every chunk's keys and
	// values before the attention core and reduce-scatters their gradients
	// after its backward (Megatron-LM's --cp-comm-type all_gather, the
	// Llama 3 paper's CP), instead of passing them round a ring behind the
	// attention of the chunk in hand. The collectives are not overlapped.
	CPAllGather bool
}

// expertTokensFactor is how many tokens an expert computes relative to
// its even share: the capacity factor, or 1 when dropless.
func (j Job) expertTokensFactor() float64 {
	if j.CapacityFactor > 0 {
		return j.CapacityFactor
	}
	return 1
}

// moeFraction is the share of the layers that route to experts.
func (j Job) moeFraction() float64 {
	if !j.Model.MoE() {
		return 0
	}
	return float64(j.Model.MoELayers()) / float64(j.Model.Layers)
}

// activeFFN is the MLP width one token's activations span, averaged over
// the layers: FFN for dense layers; for MoE layers the top-k routed
// experts (times the capacity factor's padding) and the shared experts.
func (j Job) activeFFN() float64 {
	m := j.Model
	fr := j.moeFraction()
	moe := (float64(m.ExpertsPerToken)*j.expertTokensFactor() + float64(m.SharedExperts)) * float64(m.ExpertFFNWidth())
	return (1-fr)*float64(m.FFN) + fr*moe
}

// activationModel is the model as the activation and elementwise-traffic
// formulas see it: its FFN the width a token's activations span.
func (j Job) activationModel() Model {
	m := j.Model
	if m.MoE() {
		m.FFN = int(math.Round(j.activeFFN()))
	}
	return m
}

func (j Job) flash() bool {
	if j.FlashAttention != nil {
		return *j.FlashAttention
	}
	return j.Stack.FlashAttention
}

func (j Job) dropout() bool {
	if j.Dropout != nil {
		return *j.Dropout
	}
	return j.Model.Dropout
}

func (j Job) overlapDP() bool {
	if j.OverlapDP != nil {
		return *j.OverlapDP
	}
	return j.Stack.OverlapDP
}

// localSeq is the tokens of one sequence on one GPU: Seq/CP.
func (j Job) localSeq(c Config) int { return max(j.Seq/c.cp(), 1) }

// microBatches is the number of micro-batches per pipeline per step, or 0
// when the global batch is not given.
func (j Job) microBatches(c Config) int {
	if j.GlobalBatch <= 0 || c.MicroBatch <= 0 || c.DP <= 0 {
		return 0
	}
	return j.GlobalBatch / (c.MicroBatch * c.DP)
}
