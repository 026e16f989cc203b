package planner

import (
	"fmt"
	"sort"
	"strings"
)

// StackKind names a training software stack.
type StackKind string

// The stacks the planner models.
const (
	Megatron  StackKind = "megatron-lm"
	DeepSpeed StackKind = "deepspeed"
	FSDP      StackKind = "pytorch-fsdp"
)

// Stack is what a training stack does, as the planner models it. The two
// efficiencies are the only numbers fitted to measurements (on the dev
// vectors, by Fit); everything else is read from the stack's source.
type Stack struct {
	Kind StackKind
	// ComputeEfficiency is the fraction of the GPU's dense tensor-core peak
	// the stack's matrix multiplications sustain. Fitted.
	ComputeEfficiency float64
	// NetworkEfficiency is the fraction of the per-GPU NIC line rate the
	// stack's inter-node collectives sustain (bus bandwidth). Fitted.
	NetworkEfficiency float64
	// FittedOn lists the dev vectors the efficiencies were fitted on.
	FittedOn []string

	// MainGradBytes is the bytes per gradient element kept between
	// micro-batches: Megatron's fp32 main_grad (4), DeepSpeed's bf16
	// optimizer fp32 accumulation buffer (4), ZeRO's 16-bit grads (2).
	MainGradBytes float64
	// GradReduceBytes is the element size of the data-parallel gradient
	// reduction.
	GradReduceBytes float64
	// FlashAttention: the attention core is one fused kernel that skips the
	// masked half of causal attention and stores no s×s scores. All three
	// stacks have it today; the Megatron-LM and DeepSpeed dev vectors
	// (2021–2022) predate it and set it off per job.
	FlashAttention bool
	// OverlapDP: the data-parallel gradient reduction runs during the
	// backward pass (bucketed) instead of after it.
	OverlapDP bool
	// ScatterGatherP2P: pipeline sends are split over the TP group
	// (Narayanan et al. 2021, Sec. 4.1), so each GPU sends 1/t of the
	// activation.
	ScatterGatherP2P bool
	// BalancedPipeline: layers are partitioned so the last stage's output
	// layer is balanced against the others (DeepSpeed's partitioner);
	// otherwise every stage holds Layers/PP layers and the last one also
	// computes the logits (Megatron).
	BalancedPipeline bool
	// MaxTP, MaxPP bound the layouts the stack supports (0: no bound).
	MaxTP, MaxPP int
}

func (s Stack) String() string {
	return fmt.Sprintf("%s (compute_efficiency=%.3f network_efficiency=%.3f, fitted on %s)",
		s.Kind, s.ComputeEfficiency, s.NetworkEfficiency, strings.Join(s.FittedOn, ","))
}

// Fitted stack efficiencies. These are the output of Fit on
// shared/data/planner/dev-vectors.json; TestFittedConstants re-runs the fit
// and fails when they drift from it. Regenerate with
// `gangway plan --fit dev-vectors.json`.
const (
	megatronCompute  = 0.707
	megatronNetwork  = 0.899
	deepspeedCompute = 0.623
	fsdpCompute      = 0.580
	fsdpNetwork      = 0.228
)

// DefaultStacks returns the stacks with their fitted efficiencies.
func DefaultStacks() map[StackKind]Stack {
	return map[StackKind]Stack{
		Megatron: {
			Kind:              Megatron,
			ComputeEfficiency: megatronCompute,
			NetworkEfficiency: megatronNetwork,
			FittedOn:          []string{"D1", "D2", "D3", "D4", "D5", "D7"},
			MainGradBytes:     4,
			GradReduceBytes:   4,
			FlashAttention:    true,
			ScatterGatherP2P:  true,
		},
		DeepSpeed: {
			Kind:              DeepSpeed,
			ComputeEfficiency: deepspeedCompute,
			// DeepSpeed's pipeline engine drives NCCL the way Megatron does;
			// one dev vector cannot pin two parameters, so it shares
			// Megatron's network efficiency.
			NetworkEfficiency: megatronNetwork,
			FittedOn:          []string{"D8"},
			MainGradBytes:     4,
			GradReduceBytes:   4,
			FlashAttention:    true,
			BalancedPipeline:  true,
		},
		FSDP: {
			Kind:              FSDP,
			ComputeEfficiency: fsdpCompute,
			NetworkEfficiency: fsdpNetwork,
			FittedOn:          []string{"D10", "D9"},
			MainGradBytes:     4,
			GradReduceBytes:   2,
			FlashAttention:    true,
			OverlapDP:         true,
			MaxTP:             1,
			MaxPP:             1,
		},
	}
}

// ParseStackKind accepts the stack names and common spellings.
func ParseStackKind(s string) (StackKind, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "", "megatron", "megatron-lm", "megatron_lm", "nemo":
		return Megatron, nil
	case "deepspeed", "megatron-deepspeed", "ds":
		return DeepSpeed, nil
	case "fsdp", "pytorch-fsdp", "torch-fsdp", "llm-foundry", "composer":
		return FSDP, nil
	}
	known := []string{string(Megatron), string(DeepSpeed), string(FSDP)}
	sort.Strings(known)
	return "", fmt.Errorf("unknown stack %q (known: %s)", s, strings.Join(known, ", "))
}
