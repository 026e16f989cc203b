package planner

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// Vector is one published training run in the format of
// shared/data/planner/dev-vectors.json (see its README): every input a
// performance model needs and what was measured. Free-text fields
// ("unknown (assume 1)", "8x HDR InfiniBand 200 Gb/s per node") are kept as
// text and interpreted by Job.
type Vector struct {
	ID        string          `json:"id"`
	Split     string          `json:"split"`
	Source    string          `json:"source"`
	Stack     string          `json:"stack,omitempty"` // optional: megatron-lm, deepspeed, pytorch-fsdp
	Hardware  VectorHardware  `json:"hardware"`
	Model     VectorModel     `json:"model"`
	Training  VectorTraining  `json:"training"`
	Parallel  VectorParallel  `json:"parallel"`
	Measured  Figures         `json:"measured"`
	Derived   Figures         `json:"derived"`
	Tolerance VectorTolerance `json:"tolerance"`
	// Cases are variants of the run (D4) or separate memory cases (D6).
	Cases []VectorCase `json:"cases"`
	// Invalid says why the vector breaks the schema (fields outside it);
	// such a vector is reported as not evaluated.
	Invalid string `json:"-"`
}

// VectorHardware is the cluster a vector ran on.
type VectorHardware struct {
	GPU          string  `json:"gpu"`
	HBMGB        float64 `json:"hbm_GB"`
	BF16TFLOPs   float64 `json:"bf16_dense_TFLOPs"`
	FP8TFLOPs    float64 `json:"fp8_dense_TFLOPs"`
	NVLinkGBps   float64 `json:"nvlink_GBps_bidir"`
	Count        Number  `json:"count"`
	GPUsPerNode  int     `json:"gpus_per_node"`
	NVLinkDomain int     `json:"nvlink_domain"`
	InterNode    string  `json:"inter_node"`
}

// VectorModel is a vector's model shape.
type VectorModel struct {
	Layers  int `json:"layers"`
	Hidden  int `json:"hidden"`
	Heads   int `json:"heads"`
	KVHeads int `json:"kv_heads"`
	// HeadSize is one head's width when it is not hidden/heads (Qwen3).
	HeadSize       int    `json:"head_size"`
	FFN            int    `json:"ffn"`
	Vocab          int    `json:"vocab"`
	Seq            int    `json:"seq"`
	TiedEmbeddings *bool  `json:"tied_embeddings"`
	MLP            string `json:"mlp"`
	Params         int64  `json:"params"`
	Dropout        *bool  `json:"dropout"`
	// Mixture of experts: routed experts, top-k, shared experts, one
	// expert's FFN width (0: ffn) and leading dense layers.
	Experts         int `json:"experts"`
	ExpertsPerToken int `json:"experts_per_token"`
	SharedExperts   int `json:"shared_experts"`
	ExpertFFN       int `json:"expert_ffn"`
	DenseLayers     int `json:"dense_layers"`
	// SlidingWindow is the attention window of the windowed layers in
	// tokens (0: none); SlidingWindowLayers how many layers use it
	// (absent with a window: all of them).
	SlidingWindow       int `json:"sliding_window"`
	SlidingWindowLayers int `json:"sliding_window_layers"`
}

// VectorTraining is a vector's batch, precision and memory policy.
type VectorTraining struct {
	GBS       Number `json:"gbs"`
	MBS       Number `json:"mbs"`
	GradAccum Number `json:"grad_accum"`
	Precision string `json:"precision"`
	Recompute string `json:"recompute"`
	Optimizer string `json:"optimizer"`
	DPOverlap *bool  `json:"dp_overlap"`
	Stack     string `json:"stack"`
	ZeROStage Number `json:"zero"`
	// CapacityFactor of MoE routing; 0 or absent: dropless.
	CapacityFactor float64 `json:"capacity_factor"`
	// FP8Scaling is the FP8 recipe (precision fp8): delayed or current.
	FP8Scaling string `json:"fp8_scaling"`
}

// VectorParallel is a vector's layout.
type VectorParallel struct {
	TP int   `json:"tp"`
	PP int   `json:"pp"`
	DP int   `json:"dp"`
	VP int   `json:"vp"`
	SP *bool `json:"sp"`
	// CP is the context-parallel degree (sequence split over cp GPUs).
	CP int `json:"cp"`
	// CPCommType is how context parallelism exchanges keys and values
	// (Megatron-LM's --cp-comm-type): p2p (ring, the default) or
	// all_gather.
	CPCommType string `json:"cp_comm_type"`
	// EP is the expert-parallel degree of a mixture of experts.
	EP   int    `json:"ep"`
	ZeRO Number `json:"zero"`
	// FSDP is the sharding strategy: FULL_SHARD, SHARD_GRAD_OP,
	// HYBRID_SHARD, NO_SHARD (or "zero-2"-like text).
	FSDP                 string `json:"fsdp"`
	DistributedOptimizer *bool  `json:"distributed_optimizer"`
	PPSchedule           string `json:"pp_schedule"`
	// Uneven pipeline splits (Megatron-LM): the embedding and/or the loss
	// counted as a layer of the first/last stage, or explicit layer
	// counts of the first and last stage.
	AccountForEmbedding *bool `json:"account_for_embedding_in_pipeline_split"`
	AccountForLoss      *bool `json:"account_for_loss_in_pipeline_split"`
	FirstStageLayers    int   `json:"first_stage_layers"`
	LastStageLayers     int   `json:"last_stage_layers"`
}

// VectorTolerance says which figure a vector checks and how closely.
type VectorTolerance struct {
	Metric string  `json:"metric"`
	Rel    float64 `json:"rel"`
	Also   string  `json:"also"`
	Memory string  `json:"memory"`
	// D6: memory cases.
	ActRel    float64 `json:"act_rel"`
	StatesRel float64 `json:"states_rel"`
}

// VectorCase is a variant of a run (D4: sp, recompute, measured) or a
// memory case (D6: cfg, tp, pp, vp, mbs and the published GiB).
type VectorCase struct {
	Variant   string       `json:"variant"`
	SP        *bool        `json:"sp"`
	Recompute string       `json:"recompute"`
	Measured  Figures      `json:"measured"`
	Name      string       `json:"model"`
	Cfg       *VectorModel `json:"cfg"`
	TP        int          `json:"tp"`
	PP        int          `json:"pp"`
	VP        int          `json:"vp"`
	MBS       int          `json:"mbs"`
	StatesGiB float64      `json:"params_opt_GiB"`
	ActNone   float64      `json:"act_none_GiB"`
	ActSeqSel float64      `json:"act_seqsel_GiB"`
}

// Figures are measured or derived numbers by name. Non-numeric entries are
// dropped.
type Figures map[string]float64

// UnmarshalJSON keeps the numeric members of an object.
func (f *Figures) UnmarshalJSON(b []byte) error {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		return err
	}
	*f = Figures{}
	for k, v := range raw {
		var x float64
		if json.Unmarshal(v, &x) == nil {
			(*f)[k] = x
		}
	}
	return nil
}

// Number is a JSON number, or a string that may hold one: "8",
// "unknown (assume 1)" (1, assumed), "unknown" or "per Table 3" (unset).
type Number struct {
	Value float64
	Set   bool
	// Assumed: the value came from an "assume N" phrase.
	Assumed bool
	Text    string
}

var (
	assumeRe = regexp.MustCompile(`(?i)assum\w*\s*(-?\d+(?:\.\d+)?)`)
	numberRe = regexp.MustCompile(`^\s*(-?\d+(?:\.\d+)?)\s*$`)
)

// UnmarshalJSON accepts a number, a numeric string or a phrase.
func (n *Number) UnmarshalJSON(b []byte) error {
	*n = Number{}
	if string(b) == "null" {
		return nil
	}
	var x float64
	if err := json.Unmarshal(b, &x); err == nil {
		n.Value, n.Set = x, true
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("want a number or a string, got %s", b)
	}
	n.Text = s
	if m := numberRe.FindStringSubmatch(s); m != nil {
		n.Value, _ = strconv.ParseFloat(m[1], 64)
		n.Set = true
	} else if m := assumeRe.FindStringSubmatch(s); m != nil {
		n.Value, _ = strconv.ParseFloat(m[1], 64)
		n.Set, n.Assumed = true, true
	}
	return nil
}

// Int returns the value as an int, or def when unset.
func (n Number) Int(def int) int {
	if !n.Set {
		return def
	}
	return int(n.Value)
}

// ParseVectors decodes a vector file: a JSON array of vectors. Malformed
// JSON or a wrongly typed field is an error naming the entry and position.
// Field aliases (Megatron-LM's argument names, schema.go) are renamed; a
// vector with fields outside the schema is returned with Invalid naming
// them, and is reported as not evaluated, so one bad vector does not hide
// the rest of the file.
func ParseVectors(data []byte) ([]Vector, error) {
	var raws []json.RawMessage
	if err := json.Unmarshal(data, &raws); err != nil {
		return nil, fmt.Errorf("vectors: %w", describeJSONError(data, err))
	}
	out := make([]Vector, 0, len(raws))
	for i, r := range raws {
		v, err := decodeVector(r)
		if err != nil {
			return nil, fmt.Errorf("vectors: entry %d: %w", i, err)
		}
		if v.ID == "" {
			v.ID = fmt.Sprintf("#%d", i)
		}
		out = append(out, v)
	}
	return out, nil
}

// describeJSONError adds line and column to a syntax error.
func describeJSONError(data []byte, err error) error {
	var off int64 = -1
	switch e := err.(type) {
	case *json.SyntaxError:
		off = e.Offset
	case *json.UnmarshalTypeError:
		off = e.Offset
	}
	if off < 0 || off > int64(len(data)) {
		return err
	}
	line := 1 + bytes.Count(data[:off], []byte("\n"))
	col := int(off) - bytes.LastIndexByte(data[:off], '\n')
	return fmt.Errorf("line %d column %d: %w", line, col, err)
}

// interNodeRe finds "8x HDR InfiniBand 200 Gb/s" or "4x Omni-Path 100 Gb/s".
var interNodeRe = regexp.MustCompile(`(?i)(\d+)\s*x\b[^0-9]*?(\d+(?:\.\d+)?)\s*gb(?:it)?(?:/|\s*p)?s`)

// nicBitsPerGPU reads a per-GPU inter-node bandwidth from a description
// such as "8x HDR InfiniBand 200 Gb/s per node (1 per GPU)"; 0 if none.
func nicBitsPerGPU(text string, gpusPerNode int) float64 {
	m := interNodeRe.FindStringSubmatch(text)
	if m == nil {
		return 0
	}
	links, _ := strconv.ParseFloat(m[1], 64)
	rate, _ := strconv.ParseFloat(m[2], 64)
	if links <= 0 || rate <= 0 {
		return 0
	}
	if strings.Contains(strings.ToLower(text), "per gpu") && !strings.Contains(strings.ToLower(text), "per node") {
		return rate * 1e9
	}
	if gpusPerNode <= 0 {
		gpusPerNode = 8
	}
	return links * rate * 1e9 / float64(gpusPerNode)
}

// inferStack picks the software stack a vector ran on: its "stack" field
// when given; otherwise FSDP when the layout says FSDP or ZeRO-3 with no
// TP/PP, DeepSpeed when the text names DeepSpeed, ZeRO or BigScience, and
// Megatron-LM for the rest.
func (v Vector) inferStack() (StackKind, error) {
	for _, f := range []struct{ name, value string }{{"stack", v.Stack}, {"training.stack", v.Training.Stack}} {
		if f.value != "" {
			k, err := ParseStackKind(f.value)
			if err != nil {
				return "", fmt.Errorf("%s: %w", f.name, err)
			}
			return k, nil
		}
	}
	text := strings.ToLower(v.Source + " " + v.Training.Optimizer + " " + v.Parallel.FSDP)
	switch {
	case v.Parallel.FSDP != "" || strings.Contains(text, "fsdp") || strings.Contains(text, "llm-foundry") || strings.Contains(text, "torchtitan") ||
		(v.Parallel.ZeRO.Int(0) == 3 && v.Parallel.TP <= 1 && v.Parallel.PP <= 1):
		return FSDP, nil
	case strings.Contains(text, "deepspeed") || strings.Contains(text, "bigscience") ||
		strings.Contains(text, "zero-1") || strings.Contains(text, "zero-2") || strings.Contains(text, "zero1"):
		return DeepSpeed, nil
	}
	return Megatron, nil
}

func (vm VectorModel) model(name string, st StackKind) Model {
	mlpText := strings.ToLower(vm.MLP)
	mlp := MLPGELU
	if strings.Contains(mlpText, "swiglu") || strings.Contains(mlpText, "silu") || strings.Contains(mlpText, "glu") {
		mlp = MLPSwiGLU
	}
	kv := vm.KVHeads
	if kv == 0 {
		kv = vm.Heads
	}
	tied := mlp == MLPGELU
	if vm.TiedEmbeddings != nil {
		tied = *vm.TiedEmbeddings
	}
	m := Model{
		Name: name, Layers: vm.Layers, Hidden: vm.Hidden, Heads: vm.Heads, KVHeads: kv,
		FFN: vm.FFN, Vocab: vm.Vocab, MLP: mlp, TiedEmbeddings: tied,
		HeadSize: vm.HeadSize, Experts: vm.Experts, ExpertsPerToken: vm.ExpertsPerToken, SharedExperts: vm.SharedExperts,
		ExpertFFN: vm.ExpertFFN, DenseLayers: vm.DenseLayers,
		SlidingWindow: vm.SlidingWindow, WindowedLayers: vm.SlidingWindowLayers,
	}
	if m.SlidingWindow > 0 && m.WindowedLayers == 0 {
		m.WindowedLayers = m.Layers
	}
	if m.FFN == 0 {
		m.FFN = 4 * m.Hidden
	}
	// GPT-style (GELU) models have biases and learned positions unless they
	// use ALiBi or rotary embeddings.
	if mlp == MLPGELU {
		m.Biases = true
		if !strings.Contains(mlpText, "alibi") && !strings.Contains(mlpText, "rope") && !strings.Contains(mlpText, "rotary") {
			m.LearnedPositions = vm.Seq
		}
	}
	// Rotary position embeddings: every SwiGLU model the vectors hold
	// (Llama 3, Qwen3) uses them; a GELU model only when its mlp text
	// says so (GPT-NeoX style).
	m.RoPE = mlp == MLPSwiGLU || strings.Contains(mlpText, "rope") || strings.Contains(mlpText, "rotary")
	// Megatron-LM and Megatron-DeepSpeed GPT configs train with dropout 0.1;
	// LLM Foundry and Llama recipes with none.
	m.Dropout = st != FSDP && mlp == MLPGELU && !strings.Contains(mlpText, "alibi")
	if vm.Dropout != nil {
		m.Dropout = *vm.Dropout
	}
	return m
}

// precisionOf reads "fp16 mixed", "amp_bf16", "fp8" into a Precision.
func precisionOf(s string) Precision {
	l := strings.ToLower(s)
	switch {
	case strings.Contains(l, "fp8"):
		return FP8
	case strings.Contains(l, "bf16"):
		return BF16
	case strings.Contains(l, "fp16"):
		return FP16
	}
	return BF16
}

// zeroOf reads the ZeRO stage from the layout or the optimizer text.
func (v Vector) zeroOf(st StackKind) int {
	if z := v.Parallel.ZeRO.Int(-1); z >= 0 {
		return z
	}
	if z := v.Training.ZeROStage.Int(-1); z >= 0 {
		return z
	}
	// FSDP's sharding strategy and ZeRO named in text come before the
	// FSDP default: a run that shards gradients and optimizer state but
	// not parameters is ZeRO-2, whatever stack drives it.
	t := normaliseName(v.Parallel.FSDP + " " + v.Training.Optimizer)
	switch {
	case strings.Contains(t, "shard-grad-op") || strings.Contains(t, "zero-2") || strings.Contains(t, "zero2"):
		return 2
	case strings.Contains(t, "no-shard"):
		return 0
	case strings.Contains(t, "full-shard") || strings.Contains(t, "hybrid-shard") ||
		strings.Contains(t, "zero-3") || strings.Contains(t, "zero3"):
		return 3
	case strings.Contains(t, "zero-1") || strings.Contains(t, "zero1") || strings.Contains(t, "distributed-optimizer") ||
		(v.Parallel.DistributedOptimizer != nil && *v.Parallel.DistributedOptimizer):
		return 1
	case st == FSDP:
		return 3
	}
	return 0
}

// mentions reports whether any free-text field of the vector contains word.
func (v Vector) mentions(word string) bool {
	text := strings.ToLower(strings.Join([]string{v.Source, v.Model.MLP, v.Training.Precision,
		v.Training.Recompute, v.Training.Optimizer, v.Parallel.PPSchedule, v.Hardware.GPU}, " "))
	return strings.Contains(text, strings.ToLower(word))
}

// fusedAttention decides whether a vector's run used fused (flash)
// attention: FSDP (LLM Foundry) runs did; Megatron-LM and DeepSpeed runs on
// Ampere or older (the 2021–2022 papers) did not unless the vector says
// "flash", NeMo or Transformer Engine; runs on Hopper or newer are 2023+
// software, where Megatron's Transformer Engine fuses attention by default.
func (v Vector) fusedAttention(kind StackKind, gpu GPU) bool {
	if kind == FSDP {
		return true
	}
	for _, w := range []string{"flash", "nemo", "transformer engine", "transformerengine"} {
		if v.mentions(w) {
			return true
		}
	}
	return gpu.FP8FLOPS > 0 // Hopper and newer
}
