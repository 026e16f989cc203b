package planner

import (
	"errors"
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
)

// Metrics a vector can check.
const (
	MetricTokensPerGPU = "tokens_per_s_per_gpu"
	MetricStep         = "step_s"
	MetricMFU          = "mfu"
	MetricHWTFLOPs     = "hw_TFLOPs_per_gpu"
	MetricTokensTotal  = "tokens_per_s"
	MetricSamples      = "samples_per_s"
	MetricSpeedup      = "speedup"
	MetricPeakMemory   = "peak_memory_GiB"
	MetricStates       = "model_states_GiB"
	MetricActNone      = "activations_none_GiB"
	MetricActSeqSel    = "activations_sp_selective_GiB"
)

// throughputMetric reports whether a metric counts toward the mean
// absolute error on tokens/s per GPU or step time.
func throughputMetric(m string) bool {
	switch m {
	case MetricTokensPerGPU, MetricStep, MetricMFU, MetricHWTFLOPs, MetricTokensTotal, MetricSamples:
		return true
	}
	return false
}

// Result is one checked figure of one vector.
type Result struct {
	ID     string `json:"id"`
	Case   string `json:"case,omitempty"`
	Metric string `json:"metric"`
	// Predicted and Measured are in the metric's unit.
	Predicted float64 `json:"predicted"`
	Measured  float64 `json:"measured"`
	// Error is (predicted − measured) / measured.
	Error float64 `json:"error"`
	// Tolerance describes the bound checked: a relative error ("±10%"), an
	// absolute one ("±0.05") or a range.
	Tolerance       string `json:"tolerance"`
	WithinTolerance bool   `json:"within_tolerance"`
	Config          string `json:"config,omitempty"`
	// Stack names the stack and the fitted efficiencies the prediction
	// used.
	Stack      string `json:"stack,omitempty"`
	Bottleneck string `json:"bottleneck,omitempty"`
}

// Report is the evaluation of a vector file.
type Report struct {
	Vectors []Result `json:"vectors"`
	// MeanAbsError is the mean |error| over the throughput figures
	// (tokens/s per GPU or step time); MaxAbsError their largest.
	MeanAbsError float64 `json:"mean_abs_error"`
	MaxAbsError  float64 `json:"max_abs_error"`
	// MemoryMeanAbsError is the mean |error| over memory figures.
	MemoryMeanAbsError float64 `json:"memory_mean_abs_error"`
	AllWithinTolerance bool    `json:"all_within_tolerance"`
	// Stacks are the stacks and fitted efficiencies the predictions used.
	Stacks []string `json:"stacks"`
	// Evaluated counts the vectors with at least one row.
	Evaluated int `json:"evaluated"`
	// NotEvaluated lists every vector, or figure of one, that could not be
	// evaluated, and why; nothing is skipped silently.
	NotEvaluated []Skip `json:"not_evaluated"`
}

// vectorRun is a vector made ready to predict.
type vectorRun struct {
	job           Job
	cfg           Config
	autoRecompute bool
	autoSP        bool
	// autoVP: pipelined without a stated vp; autoZeRO: a Megatron run on
	// Hopper or newer that does not say whether it used the distributed
	// optimizer (Megatron-Core and NeMo recipes default to it).
	autoVP, autoZeRO bool
}

// run turns a vector into a job and layout.
func (v Vector) run(cat *Catalog, stacks map[StackKind]Stack) (vectorRun, error) {
	if v.Invalid != "" {
		return vectorRun{}, errors.New(v.Invalid)
	}
	kind, err := v.inferStack()
	if err != nil {
		return vectorRun{}, err
	}
	st, ok := stacks[kind]
	if !ok {
		return vectorRun{}, fmt.Errorf("no stack %q", kind)
	}
	gpu, err := v.Hardware.gpu(cat)
	if err != nil {
		return vectorRun{}, err
	}
	cl := Cluster{GPU: gpu, GPUs: v.Hardware.Count.Int(0), GPUsPerNode: v.Hardware.GPUsPerNode,
		NVLinkDomain: v.Hardware.NVLinkDomain}
	if cl.NVLinkDomain == 0 && cl.GPUsPerNode > 0 && gpu.NVLinkDomain <= gpu.GPUsPerNode {
		cl.NVLinkDomain = cl.GPUsPerNode
	}
	if nic := nicBitsPerGPU(v.Hardware.InterNode, cl.gpusPerNode()); nic > 0 {
		cl.NICBytesPerSec = nic / 8
	}
	m := v.Model.model(v.ID, kind)
	if err := m.Validate(); err != nil {
		return vectorRun{}, err
	}
	if v.Model.Seq <= 0 {
		return vectorRun{}, fmt.Errorf("model.seq must be positive")
	}
	j := Job{Model: m, Cluster: cl, Stack: st, Seq: v.Model.Seq, GlobalBatch: v.Training.GBS.Int(0),
		Precision: precisionOf(v.Training.Precision), OverlapDP: v.Training.DPOverlap,
		CapacityFactor: v.Training.CapacityFactor}
	if j.FP8Scaling, err = ParseFP8Scaling(v.Training.FP8Scaling); err != nil {
		return vectorRun{}, fmt.Errorf("training.fp8_scaling: %w", err)
	}
	if j.Precision == FP8 && gpu.FP8FLOPS <= 0 {
		return vectorRun{}, fmt.Errorf("training.precision fp8 needs FP8 tensor cores; %s has none in the catalog", gpu.Name)
	}
	c := Config{TP: max(v.Parallel.TP, 1), PP: max(v.Parallel.PP, 1), VP: max(v.Parallel.VP, 1),
		DP: max(v.Parallel.DP, 1), MicroBatch: v.Training.MBS.Int(1), ZeRO: v.zeroOf(kind),
		CP: max(v.Parallel.CP, 1), EP: max(v.Parallel.EP, 1), FirstStageLayers: v.Parallel.FirstStageLayers, LastStageLayers: v.Parallel.LastStageLayers,
		EmbeddingInSplit: v.Parallel.AccountForEmbedding != nil && *v.Parallel.AccountForEmbedding,
		LossInSplit:      v.Parallel.AccountForLoss != nil && *v.Parallel.AccountForLoss}
	if mp := c.TP * c.PP * c.cp(); c.DP == 1 && cl.GPUs > mp {
		c.DP = cl.GPUs / mp
	}
	j.TPCommOverlap = kind == Megatron && c.TP > 1 && gpu.FP8FLOPS > 0 &&
		(v.mentions("nemo") || v.mentions("megatron-bridge") || v.mentions("tp_comm_overlap"))
	if j.OverlapDP == nil && kind == Megatron && (v.mentions("nemo") || v.mentions("megatron-bridge")) {
		// NeMo's and Megatron-Bridge's recipes build their
		// DistributedDataParallelConfig with overlap_grad_reduce and
		// overlap_param_gather on (and the distributed optimizer), e.g.
		// src/megatron/bridge/recipes/qwen/qwen3_30b_a3b.py.
		on := true
		j.OverlapDP = &on
	}
	switch normaliseName(v.Parallel.CPCommType) {
	case "", "p2p", "ring":
	case "all-gather", "allgather":
		j.CPAllGather = true
	default:
		return vectorRun{}, fmt.Errorf("parallel.cp_comm_type %q: accepted p2p (ring) or all_gather; a2a and a2a+p2p are not modelled", v.Parallel.CPCommType)
	}
	fused := v.fusedAttention(kind, gpu)
	j.FlashAttention = &fused
	if err := c.Validate(j); err != nil {
		return vectorRun{}, fmt.Errorf("layout: %w", err)
	}
	r := vectorRun{job: j, cfg: c}
	if v.Parallel.SP != nil {
		c.SP = *v.Parallel.SP
	} else {
		r.autoSP = c.TP > 1 && kind == Megatron
	}
	r.autoVP = c.PP > 1 && v.Parallel.VP == 0 && !st.BalancedPipeline
	r.autoZeRO = kind == Megatron && gpu.FP8FLOPS > 0 && c.ZeRO == 0 && c.dpGroup() > 1 &&
		v.Parallel.ZeRO.Int(-1) < 0 && v.Training.ZeROStage.Int(-1) < 0 && v.Parallel.DistributedOptimizer == nil &&
		strings.TrimSpace(v.Training.Optimizer) == ""
	rcText := strings.TrimSpace(v.Training.Recompute)
	if rc, err := ParseRecompute(rcText); err == nil && rcText != "" && !strings.Contains(strings.ToLower(rcText), "unknown") {
		c.Recompute = rc
	} else {
		r.autoRecompute = true
	}
	r.cfg = c
	return r, nil
}

func (h VectorHardware) gpu(cat *Catalog) (GPU, error) {
	g, err := cat.GPU(h.GPU)
	if err != nil {
		if h.BF16TFLOPs <= 0 || h.HBMGB <= 0 || h.NVLinkGBps <= 0 {
			return GPU{}, fmt.Errorf("gpu %q is not in the catalog and the vector lacks hbm_GB, bf16_dense_TFLOPs or nvlink_GBps_bidir", h.GPU)
		}
		g = GPU{Name: h.GPU, HBMBytesPerSec: 2 * tera, NVLinkDomain: 8, GPUsPerNode: 8, NICBitsPerSec: 200e9}
	}
	if h.HBMGB > 0 {
		g.MemoryBytes = int64(h.HBMGB * gib)
	}
	if h.BF16TFLOPs > 0 {
		g.BF16FLOPS = h.BF16TFLOPs * tera
	}
	if h.FP8TFLOPs > 0 {
		g.FP8FLOPS = h.FP8TFLOPs * tera
	}
	if h.NVLinkGBps > 0 {
		g.NVLinkBytesPerSec = h.NVLinkGBps * gbs
	}
	return g, nil
}

// resolve picks the fastest recomputation and sequence-parallel setting
// that fits where the vector leaves them unknown (as a practitioner would).
func (r vectorRun) resolve() (Config, Estimate) {
	recs := []Recompute{r.cfg.Recompute}
	if r.autoRecompute {
		recs = []Recompute{RecomputeNone, RecomputeSelective, RecomputeFull}
	}
	sps := []bool{r.cfg.SP}
	if r.autoSP {
		sps = []bool{false, true}
	}
	vps := []int{r.cfg.vp()}
	if r.autoVP {
		vps = nil
		for v := 1; v*r.cfg.PP <= r.job.Model.Layers && v <= 16; v++ {
			vps = append(vps, v)
		}
	}
	zeros := []int{r.cfg.ZeRO}
	if r.autoZeRO {
		zeros = []int{0, 1}
	}
	var best Estimate
	found := false
	for _, rc := range recs {
		for _, sp := range sps {
			for _, vp := range vps {
				for _, z := range zeros {
					c := r.cfg
					c.Recompute, c.SP, c.VP, c.ZeRO = rc, sp, vp, z
					e := Predict(r.job, c)
					better := !found ||
						(e.Fits && !best.Fits) ||
						(e.Fits == best.Fits && e.StepSeconds < best.StepSeconds)
					if better {
						best, found = e, true
					}
				}
			}
		}
	}
	return best.Config, best
}

// predicted returns the estimate's value of a metric.
func predicted(e Estimate, j Job, metric string) (float64, bool) {
	switch metric {
	case MetricTokensPerGPU:
		return e.TokensPerSecPerGPU, true
	case MetricStep:
		return e.StepSeconds, true
	case MetricMFU:
		return e.MFU, true
	case MetricHWTFLOPs:
		return e.HFU * matmulPeak(j) / tera, true
	case MetricTokensTotal:
		return e.TokensPerSecPerGPU * float64(e.Config.GPUs()), true
	case MetricSamples:
		return float64(e.MicroBatches*e.Config.MicroBatch*e.Config.DP) / e.StepSeconds, true
	}
	return 0, false
}

// measuredValue finds a metric's measured value: measured, then derived.
func measuredValue(metric string, figs ...Figures) (float64, bool) {
	for _, f := range figs {
		if v, ok := f[metric]; ok && v > 0 {
			return v, true
		}
	}
	return 0, false
}

// measuredConverted is measuredValue, falling back to converting another
// throughput figure of the same run (step time, tokens/s per GPU, tokens/s,
// samples/s) with the run's batch, sequence and GPU count.
func measuredConverted(metric string, j Job, e Estimate, figs ...Figures) (float64, bool) {
	if v, ok := measuredValue(metric, figs...); ok {
		return v, true
	}
	gpus := float64(e.Config.GPUs())
	seqs := float64(e.MicroBatches * e.Config.MicroBatch * e.Config.DP)
	tokens := seqs * float64(j.Seq)
	if gpus <= 0 || tokens <= 0 {
		return 0, false
	}
	// Everything as step seconds first.
	var step float64
	for _, f := range figs {
		switch {
		case f[MetricStep] > 0:
			step = f[MetricStep]
		case f[MetricTokensPerGPU] > 0:
			step = tokens / gpus / f[MetricTokensPerGPU]
		case f[MetricTokensTotal] > 0:
			step = tokens / f[MetricTokensTotal]
		case f[MetricSamples] > 0:
			step = seqs / f[MetricSamples]
		}
		if step > 0 {
			break
		}
	}
	if step <= 0 {
		return 0, false
	}
	switch metric {
	case MetricStep:
		return step, true
	case MetricTokensPerGPU:
		return tokens / gpus / step, true
	case MetricTokensTotal:
		return tokens / step, true
	case MetricSamples:
		return seqs / step, true
	}
	return 0, false
}

var (
	speedupRe = regexp.MustCompile(`(?i)speedup\s+(\w+)\s*/\s*(\w+)\s*=\s*([\d.]+)\s*(?:\+/-|±)\s*([\d.]+)`)
	rangeRe   = regexp.MustCompile(`(?i)\[\s*([\d.]+)\s*,\s*([\d.]+)\s*\]\s*GB`)
	fitsRe    = regexp.MustCompile(`(?i)fits\s+([\d.]+)\s*GB`)
)

func relErr(pred, meas float64) float64 { return (pred - meas) / meas }

// Evaluate predicts every figure each vector checks and compares it with
// the measurement. Vectors or figures it cannot interpret are listed in
// Report.NotEvaluated with the reason rather than failing the whole file.
func Evaluate(vectors []Vector, cat *Catalog, stacks map[StackKind]Stack) Report {
	rep := Report{AllWithinTolerance: true, NotEvaluated: []Skip{}}
	used := map[StackKind]bool{}
	for _, v := range vectors {
		var res []Result
		var skipped []Skip
		if memoryOnly(v) && v.Invalid != "" {
			skipped = []Skip{{ID: v.ID, Reason: v.Invalid}}
		} else if memoryOnly(v) {
			res, skipped = evaluateMemoryCases(v, stacks)
			used[Megatron] = true
		} else if r, err := v.run(cat, stacks); err != nil {
			skipped = []Skip{{ID: v.ID, Reason: err.Error()}}
		} else {
			used[r.job.Stack.Kind] = true
			res, skipped = evaluateRun(v, r)
		}
		if len(res) > 0 {
			rep.Evaluated++
		} else if len(skipped) == 0 {
			skipped = []Skip{{ID: v.ID, Reason: "no figure to check"}}
		}
		rep.Vectors = append(rep.Vectors, res...)
		rep.NotEvaluated = append(rep.NotEvaluated, skipped...)
	}
	var n, nm int
	for _, r := range rep.Vectors {
		if !r.WithinTolerance {
			rep.AllWithinTolerance = false
		}
		a := math.Abs(r.Error)
		switch {
		case throughputMetric(r.Metric):
			rep.MeanAbsError += a
			rep.MaxAbsError = math.Max(rep.MaxAbsError, a)
			n++
		case r.Metric != MetricSpeedup:
			rep.MemoryMeanAbsError += a
			nm++
		}
	}
	if n > 0 {
		rep.MeanAbsError /= float64(n)
	}
	if nm > 0 {
		rep.MemoryMeanAbsError /= float64(nm)
	}
	for _, k := range []StackKind{Megatron, DeepSpeed, FSDP} {
		if used[k] {
			rep.Stacks = append(rep.Stacks, stacks[k].String())
		}
	}
	return rep
}

func withinRel(err, tol float64) bool { return math.Abs(err) <= tol+1e-12 }

func evaluateRun(v Vector, r vectorRun) ([]Result, []Skip) {
	var out []Result
	var skipped []Skip
	metric := v.Tolerance.Metric
	if metric == "" {
		metric = MetricTokensPerGPU
	}
	tol := v.Tolerance.Rel
	if tol <= 0 {
		tol = 0.1
	}
	row := func(caseName string, c Config, e Estimate, meas float64) Result {
		p, _ := predicted(e, r.job, metric)
		er := relErr(p, meas)
		return Result{ID: v.ID, Case: caseName, Metric: metric, Predicted: p, Measured: meas, Error: er,
			Tolerance: fmt.Sprintf("±%g%%", tol*100), WithinTolerance: withinRel(er, tol),
			Config: c.String(), Stack: e.Stack, Bottleneck: e.Bottleneck}
	}
	if _, ok := predicted(Estimate{}, r.job, metric); !ok {
		return nil, []Skip{{ID: v.ID, Reason: fmt.Sprintf("unknown tolerance metric %q", metric)}}
	}
	steps := map[string]float64{} // case recompute → predicted step
	measuredSteps := map[string]float64{}
	if len(v.Cases) > 0 {
		for i, cs := range v.Cases {
			rc := r
			if cs.SP != nil {
				rc.cfg.SP, rc.autoSP = *cs.SP, false
			}
			if cs.Recompute != "" {
				if x, err := ParseRecompute(cs.Recompute); err == nil {
					rc.cfg.Recompute, rc.autoRecompute = x, false
				}
			}
			c, e := rc.resolve()
			name := cs.Variant
			if name == "" {
				name = fmt.Sprintf("case %d", i)
			}
			steps[string(c.Recompute)] = e.StepSeconds
			if s, ok := cs.Measured[MetricStep]; ok {
				measuredSteps[string(c.Recompute)] = s
			}
			meas, ok := measuredConverted(metric, rc.job, e, cs.Measured)
			if !ok {
				skipped = append(skipped, Skip{ID: v.ID, Case: name, Reason: "no measured " + metric})
				continue
			}
			out = append(out, row(name, c, e, meas))
		}
	} else {
		c, e := r.resolve()
		steps[string(c.Recompute)] = e.StepSeconds
		meas, ok := measuredConverted(metric, r.job, e, v.Measured, v.Derived)
		if !ok {
			skipped = append(skipped, Skip{ID: v.ID, Reason: "no measured " + metric})
		} else {
			out = append(out, row("", c, e, meas))
		}
		if v.Tolerance.Memory != "" {
			if res, ok := memoryRangeRow(v, c, e); ok {
				out = append(out, res)
			} else {
				skipped = append(skipped, Skip{ID: v.ID, Case: "peak memory", Reason: fmt.Sprintf("cannot read memory tolerance %q", v.Tolerance.Memory)})
			}
		}
	}
	if v.Tolerance.Also != "" {
		if res, ok := speedupRow(v, steps); ok {
			out = append(out, res)
		} else {
			skipped = append(skipped, Skip{ID: v.ID, Reason: fmt.Sprintf("cannot check %q", v.Tolerance.Also)})
		}
	}
	return out, skipped
}

// recomputeNamed maps "sel", "selective", "full", "none" to a policy.
func recomputeNamed(s string) string {
	l := strings.ToLower(s)
	switch {
	case strings.HasPrefix(l, "sel"):
		return string(RecomputeSelective)
	case strings.HasPrefix(l, "full"):
		return string(RecomputeFull)
	case strings.HasPrefix(l, "no"):
		return string(RecomputeNone)
	}
	return l
}

// speedupRow checks "predicted speedup sel/full = 1.318 +/- 0.05": the
// step time of the second policy over the first.
func speedupRow(v Vector, steps map[string]float64) (Result, bool) {
	m := speedupRe.FindStringSubmatch(v.Tolerance.Also)
	if m == nil {
		return Result{}, false
	}
	a, b := steps[recomputeNamed(m[1])], steps[recomputeNamed(m[2])]
	want, _ := strconv.ParseFloat(m[3], 64)
	tol, _ := strconv.ParseFloat(m[4], 64)
	if a <= 0 || b <= 0 || want <= 0 {
		return Result{}, false
	}
	p := b / a
	return Result{ID: v.ID, Case: m[1] + "/" + m[2], Metric: MetricSpeedup, Predicted: p, Measured: want,
		Error: relErr(p, want), Tolerance: fmt.Sprintf("±%g", tol), WithinTolerance: math.Abs(p-want) <= tol+1e-12}, true
}

// memoryRangeRow checks "predicted peak in [45, 69] GB and fits 80 GB".
func memoryRangeRow(v Vector, c Config, e Estimate) (Result, bool) {
	m := rangeRe.FindStringSubmatch(v.Tolerance.Memory)
	if m == nil {
		return Result{}, false
	}
	lo, _ := strconv.ParseFloat(m[1], 64)
	hi, _ := strconv.ParseFloat(m[2], 64)
	p := float64(e.Memory.TotalBytes) / gib
	ok := p >= lo && p <= hi
	if f := fitsRe.FindStringSubmatch(v.Tolerance.Memory); f != nil {
		capGB, _ := strconv.ParseFloat(f[1], 64)
		ok = ok && p <= capGB && e.Fits
	}
	meas := (lo + hi) / 2
	for k, x := range v.Measured {
		if strings.Contains(strings.ToLower(k), "mem") {
			meas = x
		}
	}
	return Result{ID: v.ID, Case: "peak memory", Metric: MetricPeakMemory, Predicted: p, Measured: meas,
		Error: relErr(p, meas), Tolerance: fmt.Sprintf("in [%g, %g]", lo, hi), WithinTolerance: ok,
		Config: c.String(), Stack: e.Stack}, true
}

// evaluateMemoryCases checks Korthikanti et al. 2022 Fig. 1 cases: model
// states of a stage of transformer layers (Megatron, 18 bytes/param), and
// first-stage activations with TP only and with SP + selective recompute.
func evaluateMemoryCases(v Vector, stacks map[StackKind]Stack) ([]Result, []Skip) {
	var out []Result
	var skipped []Skip
	actTol, stTol := v.Tolerance.ActRel, v.Tolerance.StatesRel
	if actTol <= 0 {
		actTol = 0.03
	}
	if stTol <= 0 {
		stTol = 0.05
	}
	for i, cs := range v.Cases {
		if cs.Cfg == nil {
			continue
		}
		name := cs.Name
		if name == "" {
			name = fmt.Sprintf("case %d", i)
		}
		m := cs.Cfg.model(name, Megatron)
		off := false // Korthikanti's equations are for unfused attention
		j := Job{Model: m, Stack: stacks[Megatron], Seq: cs.Cfg.Seq, FlashAttention: &off}
		c := Config{TP: max(cs.TP, 1), PP: max(cs.PP, 1), VP: max(cs.VP, 1), DP: 1, MicroBatch: max(cs.MBS, 1)}
		if err := m.Validate(); err != nil {
			skipped = append(skipped, Skip{ID: v.ID, Case: name, Reason: err.Error()})
			continue
		}
		if err := c.Validate(j); err != nil || j.Seq <= 0 {
			skipped = append(skipped, Skip{ID: v.ID, Case: name, Reason: fmt.Sprintf("layout %s or seq %d unusable: %v", c, j.Seq, err)})
			continue
		}
		add := func(metric string, pred, meas, tol float64, cfg Config) {
			if meas <= 0 {
				return
			}
			er := relErr(pred, meas)
			out = append(out, Result{ID: v.ID, Case: name, Metric: metric, Predicted: pred, Measured: meas,
				Error: er, Tolerance: fmt.Sprintf("±%g%%", tol*100), WithinTolerance: withinRel(er, tol),
				Config: cfg.String(), Stack: string(Megatron)})
		}
		add(MetricStates, LayerStatesBytes(j, c)/gib, cs.StatesGiB, stTol, c)
		none := c
		none.Recompute, none.SP = RecomputeNone, false
		add(MetricActNone, FirstStageLayerActivationBytes(j, none)/gib, cs.ActNone, actTol, none)
		sel := c
		sel.Recompute, sel.SP = RecomputeSelective, true
		add(MetricActSeqSel, FirstStageLayerActivationBytes(j, sel)/gib, cs.ActSeqSel, actTol, sel)
	}
	return out, skipped
}
