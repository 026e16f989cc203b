package planner

import (
	"fmt"
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
// vectors, by Fit, one pair shared by every stack); everything else is
// read from the stack's source.
type Stack struct {
	Kind StackKind
	// ComputeEfficiency is the fraction of the GPU's dense tensor-core peak
	// the stack's matrix multiplications sustain. Fitted.
	ComputeEfficiency float64
	// NetworkEfficiency is the fraction of the per-GPU NIC line rate the
	// stack's inter-node collectives sustain (bus bandwidth). Fitted.
	NetworkEfficiency float64
	// MoEHostOpSeconds is the host's time to issue one kernel of a
	// dropless MoE layer, which the GPU waits for after the dispatcher's
	// device→host synchronisation (moehost.go). Fitted.
	MoEHostOpSeconds float64
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
	return fmt.Sprintf("%s (compute_efficiency=%.3f network_efficiency=%.3f moe_host_op_us=%.0f, fitted on %s)",
		s.Kind, s.ComputeEfficiency, s.NetworkEfficiency, s.MoEHostOpSeconds*1e6, strings.Join(s.FittedOn, ","))
}

// The fitted efficiencies, one pair shared by every stack. These are the
// output of Fit on every vector: shared/data/planner/dev-vectors.json and
// testdata/public-vectors.json together, as issue 21 asks (one fit across
// all vectors, reported with its leave-one-out error); TestFittedConstants
// re-runs the fit and fails when they drift from it. Regenerate with
// `gangway plan --fit` on the two files concatenated.
const (
	fittedCompute = 0.714
	fittedNetwork = 0.533
	// fittedMoEHostOp is Stack.MoEHostOpSeconds: 53 µs per kernel.
	fittedMoEHostOp = 53e-6
)

// fittedOn is the vectors the shared efficiencies were fitted on.
var fittedOn = []string{"D1", "D10", "D2", "D3", "D4", "D5", "D7", "D8", "D9",
	"P1", "P10", "P11", "P12", "P13", "P14", "P15", "P16", "P17", "P2", "P3", "P4", "P5", "P6", "P8", "P9"}

// DefaultStacks returns the stacks with the fitted efficiencies.
func DefaultStacks() map[StackKind]Stack {
	return map[StackKind]Stack{
		Megatron: {
			Kind:              Megatron,
			ComputeEfficiency: fittedCompute,
			NetworkEfficiency: fittedNetwork,
			MoEHostOpSeconds:  fittedMoEHostOp,
			FittedOn:          fittedOn,
			MainGradBytes:     4,
			GradReduceBytes:   4,
			FlashAttention:    true,
			ScatterGatherP2P:  true,
		},
		DeepSpeed: {
			Kind:              DeepSpeed,
			ComputeEfficiency: fittedCompute,
			NetworkEfficiency: fittedNetwork,
			MoEHostOpSeconds:  fittedMoEHostOp,
			FittedOn:          fittedOn,
			MainGradBytes:     4,
			GradReduceBytes:   4,
			FlashAttention:    true,
			BalancedPipeline:  true,
		},
		FSDP: {
			Kind:              FSDP,
			ComputeEfficiency: fittedCompute,
			NetworkEfficiency: fittedNetwork,
			MoEHostOpSeconds:  fittedMoEHostOp,
			FittedOn:          fittedOn,
			MainGradBytes:     4,
			GradReduceBytes:   2,
			FlashAttention:    true,
			OverlapDP:         true,
			MaxTP:             1,
			MaxPP:             1,
		},
	}
}

// stackNames is the stack vocabulary: each stack's name and the spellings
// taken for it after normalising (lower case; spaces, '+', '_', '/' and
// '&' become '-'). Megatron-DeepSpeed (Megatron-LM's model code driven by
// DeepSpeed's ZeRO and pipeline engine) is the deepspeed stack.
var stackNames = []struct {
	kind    StackKind
	aliases []string
}{
	{Megatron, []string{"megatron-lm", "megatron", "megatron-core", "mcore", "nemo", "nemo-megatron",
		"nvidia-nemo", "megatron-lm-te", "megatron-lm-transformer-engine", "nemo-framework"}},
	{DeepSpeed, []string{"deepspeed", "ds", "megatron-deepspeed", "deepspeed-megatron", "megatron-ds",
		"deepspeed-zero", "bigscience-megatron-deepspeed"}},
	{FSDP, []string{"pytorch-fsdp", "fsdp", "fsdp1", "fsdp2", "torch-fsdp", "pytorch-fsdp2", "llm-foundry",
		"composer", "mosaicml-composer", "torchtitan", "pytorch-torchtitan"}},
}

// normaliseName lower-cases a free-text name and joins its words with '-'.
func normaliseName(s string) string {
	s = strings.ToLower(strings.TrimSpace(s))
	s = strings.NewReplacer("+", " ", "_", " ", "/", " ", "&", " ", ",", " ", "(", " ", ")", " ").Replace(s)
	return strings.Join(strings.FieldsFunc(s, func(r rune) bool { return r == ' ' || r == '-' }), "-")
}

// ParseStackKind reads a stack name through the vocabulary: an exact
// alias ("Megatron-LM", "NeMo", "DeepSpeed + Megatron", "PyTorch FSDP",
// "torchtitan"), else free text that names exactly one family (with
// DeepSpeed and Megatron together meaning Megatron-DeepSpeed). Anything
// else is an error giving the value and the accepted forms.
func ParseStackKind(s string) (StackKind, error) {
	n := normaliseName(s)
	if n == "" {
		return Megatron, nil
	}
	for _, st := range stackNames {
		for _, a := range st.aliases {
			if n == a {
				return st.kind, nil
			}
		}
	}
	has := func(w ...string) bool {
		for _, x := range w {
			if strings.Contains(n, x) {
				return true
			}
		}
		return false
	}
	switch ds, mg, fs := has("deepspeed"), has("megatron", "nemo", "mcore"), has("fsdp", "torchtitan", "llm-foundry", "composer"); {
	case fs && !ds:
		return FSDP, nil
	case ds && !fs:
		return DeepSpeed, nil
	case mg && !fs:
		return Megatron, nil
	}
	var forms []string
	for _, st := range stackNames {
		forms = append(forms, fmt.Sprintf("%s (%s)", st.kind, strings.Join(st.aliases, ", ")))
	}
	return "", fmt.Errorf("unknown stack %q; accepted: %s; case, spaces, '+' and '_' do not matter",
		s, strings.Join(forms, "; "))
}
