package planner

import (
	"errors"
	"fmt"
)

// Request is what the orchestrator knows when it admits a training job.
type Request struct {
	// Model and GPU are catalog names ("llama3-70b", "H100").
	Model string
	GPU   string
	GPUs  int
	// GPUsPerDomain is the NVLink domain size of the GPUs placed (8 for
	// HGX nodes, 72 for an NVL72 rack); 0: the GPU's catalog value.
	GPUsPerDomain int
	// GPUsPerNode; 0: the GPU's catalog value.
	GPUsPerNode int
	Seq         int
	// GlobalBatch is sequences per optimizer step.
	GlobalBatch int
	// Stack is "megatron-lm" (default), "deepspeed" or "pytorch-fsdp".
	Stack string
	// Precision of the matmuls: "bf16" (default) or "fp8".
	Precision string
	// FP8Scaling is the FP8 recipe: "delayed" (default) or "current".
	FP8Scaling string
}

// Plan is a chosen layout and what the planner predicts for it.
type Plan struct {
	TP         int       `json:"tp"`
	PP         int       `json:"pp"`
	VP         int       `json:"vp"`
	DP         int       `json:"dp"`
	MicroBatch int       `json:"micro_batch"`
	SP         bool      `json:"sp"`
	Recompute  Recompute `json:"recompute"`
	ZeRO       int       `json:"zero"`
	// Predictions.
	TokensPerSecPerGPU float64 `json:"tokens_per_s_per_gpu"`
	StepSeconds        float64 `json:"step_s"`
	MFU                float64 `json:"mfu"`
	PeakMemoryBytes    int64   `json:"peak_memory_bytes"`
	Bottleneck         string  `json:"bottleneck"`
	// Stack names the stack and the fitted efficiencies used.
	Stack string `json:"stack"`
}

func planOf(e Estimate) Plan {
	c := e.Config
	return Plan{TP: c.TP, PP: c.PP, VP: c.vp(), DP: c.DP, MicroBatch: c.MicroBatch, SP: c.SP,
		Recompute: c.Recompute, ZeRO: c.ZeRO, TokensPerSecPerGPU: e.TokensPerSecPerGPU,
		StepSeconds: e.StepSeconds, MFU: e.MFU, PeakMemoryBytes: e.Memory.TotalBytes,
		Bottleneck: e.Bottleneck, Stack: e.Stack}
}

// ErrBadRequest is wrapped by errors about malformed requests.
var ErrBadRequest = errors.New("planner: bad request")

// Job resolves a request against the catalog and the fitted stacks.
func (c *Catalog) Job(req Request) (Job, error) {
	m, err := c.Model(req.Model)
	if err != nil {
		return Job{}, err
	}
	g, err := c.GPU(req.GPU)
	if err != nil {
		return Job{}, err
	}
	kind, err := ParseStackKind(req.Stack)
	if err != nil {
		return Job{}, fmt.Errorf("%w: %v", ErrBadRequest, err)
	}
	prec := BF16
	if req.Precision != "" {
		p, err := ParsePrecision(req.Precision)
		if err != nil {
			return Job{}, fmt.Errorf("%w: %v", ErrBadRequest, err)
		}
		if p != BF16 && p != FP16 && p != FP8 {
			return Job{}, fmt.Errorf("%w: training precision must be bf16, fp16 or fp8, got %s", ErrBadRequest, p)
		}
		prec = p
	}
	scaling, err := ParseFP8Scaling(req.FP8Scaling)
	if err != nil {
		return Job{}, fmt.Errorf("%w: %v", ErrBadRequest, err)
	}
	if req.FP8Scaling != "" && prec != FP8 {
		return Job{}, fmt.Errorf("%w: fp8 scaling %q needs precision fp8, got %s", ErrBadRequest, req.FP8Scaling, prec)
	}
	if prec == FP8 && g.FP8FLOPS <= 0 {
		return Job{}, fmt.Errorf("%w: precision fp8 needs FP8 tensor cores; %s has none in the catalog", ErrBadRequest, g.Name)
	}
	switch {
	case req.GPUs <= 0:
		return Job{}, fmt.Errorf("%w: gpus must be positive, got %d", ErrBadRequest, req.GPUs)
	case req.Seq <= 0:
		return Job{}, fmt.Errorf("%w: seq must be positive, got %d", ErrBadRequest, req.Seq)
	case req.GlobalBatch <= 0:
		return Job{}, fmt.Errorf("%w: global batch must be positive, got %d", ErrBadRequest, req.GlobalBatch)
	case req.GPUsPerDomain < 0 || req.GPUsPerNode < 0:
		return Job{}, fmt.Errorf("%w: gpus per domain and per node must not be negative", ErrBadRequest)
	}
	return Job{Model: m, Stack: DefaultStacks()[kind], Seq: req.Seq, GlobalBatch: req.GlobalBatch, Precision: prec,
		FP8Scaling: scaling, Cluster: Cluster{GPU: g, GPUs: req.GPUs, GPUsPerNode: req.GPUsPerNode, NVLinkDomain: req.GPUsPerDomain}}, nil
}

// BestPlan returns the fastest layout that fits, or, when none does, nil
// and a reason a person can act on. The error is for requests that name
// unknown models or GPUs or carry impossible numbers.
func (c *Catalog) BestPlan(req Request) (*Plan, string, error) {
	j, err := c.Job(req)
	if err != nil {
		return nil, "", err
	}
	res := Search(SearchRequest{Job: j, Top: 1})
	if len(res.Best) > 0 {
		p := planOf(res.Best[0])
		return &p, "", nil
	}
	return nil, noFitReason(j, res), nil
}

func noFitReason(j Job, res SearchResult) string {
	why := fmt.Sprintf("no layout of %s on %d %s GPUs fits", j.Model.Name, j.Cluster.GPUs, j.Cluster.GPU.Name)
	for _, r := range res.Rejected {
		if r.Kind == RejectOOM {
			return why + "; the closest: " + r.Example
		}
	}
	for _, r := range res.Rejected {
		return why + "; " + r.Example
	}
	return why
}

// Verdict is the outcome of checking an explicit layout.
type Verdict struct {
	// TP, PP, DP are the layout checked (DP filled in when asked for 0).
	TP int  `json:"tp"`
	PP int  `json:"pp"`
	DP int  `json:"dp"`
	OK bool `json:"ok"`
	// Reasons say why the layout cannot run (empty when OK).
	Reasons []string `json:"reasons,omitempty"`
	// Plan is the best micro-batch, recomputation and ZeRO choice for the
	// layout when OK.
	Plan *Plan `json:"plan,omitempty"`
}

// Check explains whether an explicit tp/pp/dp can run the job: a TP group
// wider than the NVLink domain, a product that is not the GPU count, a
// shape the model does not divide into, or memory that does not fit under
// any micro-batch, recomputation or ZeRO choice. dp = 0 means "the rest of
// the GPUs". The error is for malformed requests only.
func (c *Catalog) Check(req Request, tp, pp, dp int) (Verdict, error) {
	j, err := c.Job(req)
	if err != nil {
		return Verdict{}, err
	}
	if tp <= 0 || pp <= 0 || dp < 0 {
		return Verdict{}, fmt.Errorf("%w: tp and pp must be positive and dp not negative (tp=%d pp=%d dp=%d)", ErrBadRequest, tp, pp, dp)
	}
	if dp == 0 && j.Cluster.GPUs%(tp*pp) == 0 {
		dp = j.Cluster.GPUs / (tp * pp)
	}
	v := Verdict{TP: tp, PP: pp, DP: dp}
	if dom := j.Cluster.domain(); tp > dom {
		v.Reasons = append(v.Reasons, fmt.Sprintf("tp=%d exceeds the NVLink domain of %d GPUs: a TP group must sit inside one", tp, dom))
	}
	if tp*pp*max(dp, 1) != j.Cluster.GPUs || dp == 0 {
		v.Reasons = append(v.Reasons, fmt.Sprintf("tp×pp×dp = %d×%d×%d = %d, but the job has %d GPUs", tp, pp, dp, tp*pp*dp, j.Cluster.GPUs))
	}
	if j.Stack.MaxTP > 0 && tp > j.Stack.MaxTP || j.Stack.MaxPP > 0 && pp > j.Stack.MaxPP {
		v.Reasons = append(v.Reasons, fmt.Sprintf("%s supports tp ≤ %d and pp ≤ %d", j.Stack.Kind, j.Stack.MaxTP, j.Stack.MaxPP))
	}
	base := Config{TP: tp, PP: pp, VP: 1, DP: max(dp, 1), MicroBatch: 1}
	if err := base.Validate(j); err != nil {
		v.Reasons = append(v.Reasons, err.Error())
	}
	if len(v.Reasons) > 0 {
		return v, nil
	}
	var best, smallest *Estimate
	zeros := []int{0, 1}
	if j.Stack.Kind == FSDP {
		zeros = []int{3}
	}
	perDP := j.GlobalBatch / dp
	for _, mbs := range powersOfTwo(perDP) {
		if perDP%mbs != 0 {
			continue
		}
		for _, rc := range []Recompute{RecomputeNone, RecomputeSelective, RecomputeFull} {
			for _, z := range zeros {
				cfg := base
				cfg.MicroBatch, cfg.Recompute, cfg.ZeRO = mbs, rc, z
				cfg.SP = tp > 1 && j.Stack.Kind == Megatron
				if z > 0 && dp == 1 && z < 3 {
					continue
				}
				e := Predict(j, cfg)
				if smallest == nil || e.Memory.TotalBytes < smallest.Memory.TotalBytes {
					smallest = &e
				}
				if e.Fits && (best == nil || better(e, *best)) {
					best = &e
				}
			}
		}
	}
	if best == nil {
		s := smallest
		v.Reasons = append(v.Reasons, fmt.Sprintf(
			"does not fit in memory: the smallest footprint (%s) needs %.1f GiB per GPU on the %s pipeline stage (weights %.1f, gradients %.1f, optimizer %.1f, activations %.1f, other %.1f) and %s has %.1f GiB usable",
			s.Config, float64(s.Memory.TotalBytes)/gib, s.Memory.Stage, float64(s.Memory.WeightsBytes)/gib,
			float64(s.Memory.GradsBytes)/gib, float64(s.Memory.OptimizerBytes)/gib, float64(s.Memory.ActivationBytes)/gib,
			float64(s.Memory.OtherBytes)/gib, j.Cluster.GPU.Name, float64(s.UsableBytes)/gib))
		return v, nil
	}
	p := planOf(*best)
	v.OK, v.Plan = true, &p
	return v, nil
}
