// Package plancli is the `gangway plan` command: it parses flags, calls
// internal/planner and prints tables or JSON; cmd/gangway wires `plan` to
// Main.
//
// It imports the standard library, internal/planner and
// internal/base/cmdkit.
package plancli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/gangway/gangway/internal/base/cmdkit"
	"github.com/gangway/gangway/internal/planner"
)

// Exit codes.
const (
	exitOK      = 0
	exitFailure = 1 // I/O failures; --strict evaluations outside tolerance
	exitUsage   = 2 // bad flags or arguments
)

const usage = `usage:
  gangway plan --model M --gpus N --gpu G --seq S --global-batch B [flags]
      search TP/PP/VP/DP, micro-batch, recomputation and ZeRO stage
  gangway plan --model M --gpus N --gpu G --seq S --global-batch B --tp T --pp P [--dp D]
      check an explicit layout
  gangway plan --evaluate VECTORS.json [--evaluate MORE.json ...] [--cross-validate] [-o json|table] [--strict]
      predict every vector of a file and compare with its measurement;
      --cross-validate: leave-one-out (fit on all vectors but one, predict it)
  gangway plan --fit VECTORS.json [--fit MORE.json ...] [-o json|table]
      fit the efficiencies every stack shares to development vectors
  gangway plan serve --model M --gpu G --precision bf16|fp8|int8|int4 [flags]
      weights memory, KV-cache capacity and minimum TP for inference

flags:
`

// usageError is a bad invocation: printed with a hint, exit 2.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return usageError{fmt.Sprintf(format, args...)} }

// Main runs `gangway plan` with args (without "plan") and returns the exit
// code. It writes results to stdout and errors to stderr, and reads only
// the files its flags name.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var err error
	if len(args) > 0 && args[0] == "serve" {
		err = runServe(ctx, args[1:], stdout, stderr)
	} else {
		err = runPlan(ctx, args, stdout, stderr)
	}
	var ue usageError
	switch {
	case err == nil:
		return exitOK
	case errors.Is(err, flag.ErrHelp):
		return exitOK
	case errors.As(err, &ue):
		fmt.Fprintf(stderr, "gangway plan: %s\nRun 'gangway plan --help' for usage.\n", ue.msg)
		return exitUsage
	case errors.Is(err, errOutsideTolerance):
		fmt.Fprintf(stderr, "gangway plan: %v\n", err)
		return exitFailure
	default:
		fmt.Fprintf(stderr, "gangway plan: %v\n", err)
		return exitFailure
	}
}

var errOutsideTolerance = errors.New("some vectors are outside their tolerance")

// common are the flags every form shares.
type common struct {
	output  cmdkit.Format
	catalog string
}

func (c *common) register(fs *flag.FlagSet) {
	c.output = cmdkit.Table
	fs.Var(&c.output, "o", "output format: table, json or yaml")
	fs.Var(&c.output, "output", "output format: table, json or yaml (same as -o)")
	fs.StringVar(&c.catalog, "catalog", "", "YAML file of extra GPUs and models (see internal/planner README)")
}

func (c *common) loadCatalog() (*planner.Catalog, error) {
	cat := planner.DefaultCatalog()
	if c.catalog == "" {
		return cat, nil
	}
	f, err := os.Open(c.catalog)
	if err != nil {
		return nil, fmt.Errorf("open catalog: %w", err)
	}
	defer f.Close()
	if err := cat.Load(f); err != nil {
		return nil, fmt.Errorf("%s: %w", c.catalog, err)
	}
	return cat, nil
}

func newFlagSet(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {} // parse prints usage for -help only
	return fs
}

func printUsage(fs *flag.FlagSet, w io.Writer) {
	fmt.Fprint(w, usage)
	fs.SetOutput(w)
	fs.PrintDefaults()
}

// parse parses flags, turning flag errors into usage errors.
func parse(fs *flag.FlagSet, args []string) error {
	// The flag package prints its own message for bad flags; silence it and
	// report through usageError instead.
	out := fs.Output()
	fs.SetOutput(io.Discard)
	err := fs.Parse(args)
	if errors.Is(err, flag.ErrHelp) {
		printUsage(fs, out)
		return err
	}
	if err != nil {
		return usageError{err.Error()}
	}
	if fs.NArg() > 0 {
		return usagef("unexpected argument %q", fs.Arg(0))
	}
	return nil
}

func runPlan(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("plan", stderr)
	var c common
	c.register(fs)
	var (
		model, gpu, stack, precision string
		fp8Scaling                   string
		evaluate, fit                fileList
		gpus, seq, gbs, top          int
		perNode, domain              int
		tp, pp, dp                   int
		strict, crossValidate        bool
	)
	fs.StringVar(&model, "model", "", "model name from the catalog (e.g. llama3-70b)")
	fs.StringVar(&gpu, "gpu", "", "GPU name from the catalog (e.g. H100)")
	fs.IntVar(&gpus, "gpus", 0, "number of GPUs")
	fs.IntVar(&seq, "seq", 0, "sequence length in tokens")
	fs.IntVar(&gbs, "global-batch", 0, "global batch in sequences per step")
	fs.StringVar(&stack, "stack", "megatron-lm", "training stack: megatron-lm, deepspeed or pytorch-fsdp")
	fs.StringVar(&precision, "precision", "bf16", "matmul precision: bf16 or fp8")
	fs.StringVar(&fp8Scaling, "fp8-scaling", "", "FP8 scaling recipe with --precision fp8: delayed (default) or current")
	fs.IntVar(&perNode, "gpus-per-node", 0, "GPUs per node (default: the GPU's catalog value)")
	fs.IntVar(&domain, "nvlink-domain", 0, "GPUs per NVLink domain (default: the GPU's catalog value)")
	fs.IntVar(&top, "top", 5, "number of layouts to list")
	fs.IntVar(&tp, "tp", 0, "check this tensor-parallel degree instead of searching")
	fs.IntVar(&pp, "pp", 0, "pipeline stages for --tp (default 1)")
	fs.IntVar(&dp, "dp", 0, "data-parallel degree for --tp (default: the remaining GPUs)")
	fs.Var(&evaluate, "evaluate", "evaluate a vector `file` (shared/data/planner format); repeat it to evaluate several as one set")
	fs.Var(&fit, "fit", "fit stack efficiencies to development vector `file`s (repeat it for several)")
	fs.BoolVar(&strict, "strict", false, "with --evaluate: exit 1 when a vector is outside its tolerance")
	fs.BoolVar(&crossValidate, "cross-validate", false, "with --evaluate: leave-one-out error beside the in-sample one")
	if err := parse(fs, args); err != nil {
		return err
	}
	if len(evaluate) > 0 && len(fit) > 0 {
		return usagef("--evaluate and --fit are exclusive")
	}
	cat, err := c.loadCatalog()
	if err != nil {
		return err
	}
	if crossValidate && len(evaluate) == 0 {
		return usagef("--cross-validate needs --evaluate FILE")
	}
	if crossValidate {
		return runCrossValidate(ctx, evaluate, cat, c.output, stdout)
	}
	if len(evaluate) > 0 {
		return runEvaluate(ctx, evaluate, cat, c.output, strict, stdout)
	}
	if len(fit) > 0 {
		return runFit(ctx, fit, cat, c.output, stdout)
	}
	var missing []string
	for _, f := range []struct {
		name string
		ok   bool
	}{{"--model", model != ""}, {"--gpu", gpu != ""}, {"--gpus", gpus != 0}, {"--seq", seq != 0}, {"--global-batch", gbs != 0}} {
		if !f.ok {
			missing = append(missing, f.name)
		}
	}
	if len(missing) > 0 {
		return usagef("missing %s", strings.Join(missing, ", "))
	}
	for _, f := range []struct {
		name string
		v    int
	}{{"--gpus", gpus}, {"--seq", seq}, {"--global-batch", gbs}, {"--top", top}} {
		if f.v <= 0 {
			return usagef("%s must be positive, got %d", f.name, f.v)
		}
	}
	for _, f := range []struct {
		name string
		v    int
	}{{"--gpus-per-node", perNode}, {"--nvlink-domain", domain}, {"--tp", tp}, {"--pp", pp}, {"--dp", dp}} {
		if f.v < 0 {
			return usagef("%s must not be negative, got %d", f.name, f.v)
		}
	}
	if tp == 0 && (pp != 0 || dp != 0) {
		return usagef("--pp and --dp need --tp")
	}
	req := planner.Request{Model: model, GPU: gpu, GPUs: gpus, GPUsPerDomain: domain, GPUsPerNode: perNode,
		Seq: seq, GlobalBatch: gbs, Stack: stack, Precision: precision, FP8Scaling: fp8Scaling}
	job, err := cat.Job(req)
	if err != nil {
		return usageError{err.Error()}
	}
	if tp > 0 {
		return runCheck(cat, req, job, tp, max(pp, 1), dp, c.output, stdout)
	}
	res := planner.Search(planner.SearchRequest{Job: job, Top: top})
	if c.output != cmdkit.Table {
		return writeAs(stdout, c.output, struct {
			Request planner.Request `json:"request"`
			planner.SearchResult
		}{req, res})
	}
	return writeSearchTable(stdout, job, res)
}

func describeJob(j planner.Job) string {
	return fmt.Sprintf("%s (%.1fB params) on %d × %s, seq %d, global batch %d sequences, %s",
		j.Model.Name, float64(j.Model.Params())/1e9, j.Cluster.GPUs, j.Cluster.GPU.Name, j.Seq, j.GlobalBatch, j.Precision)
}

func gib(b int64) float64 { return float64(b) / (1 << 30) }

func yes(b bool) string {
	if b {
		return "y"
	}
	return "-"
}

func writeSearchTable(w io.Writer, j planner.Job, res planner.SearchResult) error {
	fmt.Fprintln(w, describeJob(j))
	fmt.Fprintf(w, "stack: %s\n\n", res.Stack)
	if res.BubbleOverLimit {
		fmt.Fprintln(w, "warning: every layout that fits has a pipeline bubble over the limit; these are the least bad.")
	}
	if len(res.Best) == 0 {
		fmt.Fprintln(w, "no layout fits.")
	} else {
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		// A mixture of experts adds the expert-parallel degree.
		moe := j.Model.MoE()
		epHead := ""
		if moe {
			epHead = "EP\t"
		}
		fmt.Fprintln(tw, "#\tTP\tSP\tPP\tVP\tDP\t"+epHead+"MBS\tRECOMPUTE\tZERO\tMEM GiB\tWEIGHTS\tGRADS\tOPTIM\tACTIV\tOTHER\tSTEP s\tTOK/s/GPU\tMFU\tBOTTLENECK")
		for i, e := range res.Best {
			c, m := e.Config, e.Memory
			ep := ""
			if moe {
				ep = fmt.Sprintf("%d\t", max(c.EP, 1))
			}
			fmt.Fprintf(tw, "%d\t%d\t%s\t%d\t%d\t%d\t%s%d\t%s\t%d\t%.1f\t%.1f\t%.1f\t%.1f\t%.1f\t%.1f\t%.2f\t%.0f\t%.1f%%\t%s\n",
				i+1, c.TP, yes(c.SP), c.PP, c.VP, c.DP, ep, c.MicroBatch, c.Recompute, c.ZeRO,
				gib(m.TotalBytes), gib(m.WeightsBytes), gib(m.GradsBytes), gib(m.OptimizerBytes), gib(m.ActivationBytes), gib(m.OtherBytes),
				e.StepSeconds, e.TokensPerSecPerGPU, 100*e.MFU, e.Bottleneck)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		t := res.Best[0].Time
		tot := t.Total()
		epPart := ""
		if t.EPComm > 0 {
			epPart = fmt.Sprintf(", EP all-to-all %.0f%%", 100*t.EPComm/tot)
		}
		if t.MoEHost > 0 {
			epPart += fmt.Sprintf(", host-bound MoE %.0f%%", 100*t.MoEHost/tot)
		}
		fmt.Fprintf(w, "\n#1 step time: compute %.0f%%, memory-bound kernels %.0f%%, TP comm %.0f%%%s, PP comm %.0f%%, bubble %.0f%%, DP comm %.0f%%, optimizer %.0f%%; %.1f GiB usable per GPU\n",
			100*t.Compute/tot, 100*t.MemoryBound/tot, 100*t.TPComm/tot, epPart, 100*t.PPComm/tot, 100*t.Bubble/tot, 100*t.DPComm/tot, 100*t.Optimizer/tot,
			gib(res.Best[0].UsableBytes))
	}
	fmt.Fprintf(w, "\n%d layouts considered; rejected:\n", res.Considered)
	if len(res.Rejected) == 0 {
		fmt.Fprintln(w, "  none")
	}
	for _, r := range res.Rejected {
		fmt.Fprintf(w, "  %s: %d, closest: %s\n", r.Kind, r.Count, r.Example)
	}
	return nil
}

func runCheck(cat *planner.Catalog, req planner.Request, j planner.Job, tp, pp, dp int, output cmdkit.Format, w io.Writer) error {
	v, err := cat.Check(req, tp, pp, dp)
	if err != nil {
		return usageError{err.Error()}
	}
	if output != cmdkit.Table {
		return writeAs(w, output, v)
	}
	fmt.Fprintln(w, describeJob(j))
	if !v.OK {
		fmt.Fprintf(w, "tp=%d pp=%d dp=%d cannot run:\n", v.TP, v.PP, v.DP)
		for _, r := range v.Reasons {
			fmt.Fprintf(w, "  - %s\n", r)
		}
		return nil
	}
	p := v.Plan
	fmt.Fprintf(w, "tp=%d pp=%d dp=%d fits: best with micro-batch %d, recompute %s, zero %d, sp %v\n",
		p.TP, p.PP, p.DP, p.MicroBatch, p.Recompute, p.ZeRO, p.SP)
	fmt.Fprintf(w, "  %.1f GiB per GPU, step %.2f s, %.0f tokens/s/GPU, MFU %.1f%%, bottleneck %s\n  stack: %s\n",
		gib(p.PeakMemoryBytes), p.StepSeconds, p.TokensPerSecPerGPU, 100*p.MFU, p.Bottleneck, p.Stack)
	return nil
}

func readVectors(path string) ([]planner.Vector, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read vectors: %w", err)
	}
	vs, err := planner.ParseVectors(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return vs, nil
}

// fileList is a flag that may be given several times.
type fileList []string

func (l *fileList) String() string { return strings.Join(*l, ",") }
func (l *fileList) Set(s string) error {
	if s == "" {
		return errors.New("empty file name")
	}
	*l = append(*l, s)
	return nil
}

// readVectorSets reads every file's vectors as one set, refusing an ID
// two of them use (the leave-one-out folds and the report are by ID).
func readVectorSets(paths []string) ([]planner.Vector, error) {
	var all []planner.Vector
	from := map[string]string{}
	for _, p := range paths {
		vs, err := readVectors(p)
		if err != nil {
			return nil, err
		}
		for _, v := range vs {
			if prev, dup := from[v.ID]; dup {
				return nil, fmt.Errorf("%s: vector %s is also in %s: IDs must be unique across the files evaluated together", p, v.ID, prev)
			}
			from[v.ID] = p
		}
		all = append(all, vs...)
	}
	return all, nil
}

func runEvaluate(ctx context.Context, paths []string, cat *planner.Catalog, output cmdkit.Format, strict bool, w io.Writer) error {
	vs, err := readVectorSets(paths)
	if err != nil {
		return err
	}
	rep := planner.Evaluate(vs, cat, planner.DefaultStacks())
	if output != cmdkit.Table {
		err = writeAs(w, output, rep)
	} else {
		err = writeEvaluationTable(w, rep)
	}
	if err != nil {
		return err
	}
	if strict && !rep.AllWithinTolerance {
		return errOutsideTolerance
	}
	return nil
}

// WriteEvaluationMarkdown writes a report as the Markdown table the
// planner README carries.
func WriteEvaluationMarkdown(w io.Writer, rep planner.Report) error {
	fmt.Fprintln(w, "| id | case | metric | predicted | measured | error | tolerance | ok |")
	fmt.Fprintln(w, "| --- | --- | --- | ---: | ---: | ---: | --- | --- |")
	for _, r := range rep.Vectors {
		fmt.Fprintf(w, "| %s | %s | %s | %.4g | %.4g | %+.1f%% | %s | %s |\n",
			r.ID, r.Case, r.Metric, r.Predicted, r.Measured, 100*r.Error, r.Tolerance, yes(r.WithinTolerance))
	}
	_, err := fmt.Fprintf(w, "\nMean absolute error on tokens/s per GPU or step time: %.2f%% (max %.2f%%); on memory figures: %.2f%%.\n",
		100*rep.MeanAbsError, 100*rep.MaxAbsError, 100*rep.MemoryMeanAbsError)
	return err
}

func writeEvaluationTable(w io.Writer, rep planner.Report) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tCASE\tMETRIC\tPREDICTED\tMEASURED\tERROR\tTOLERANCE\tOK")
	for _, r := range rep.Vectors {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%.4g\t%.4g\t%+.1f%%\t%s\t%s\n",
			r.ID, r.Case, r.Metric, r.Predicted, r.Measured, 100*r.Error, r.Tolerance, yes(r.WithinTolerance))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(w, "\nmean absolute error (tokens/s per GPU or step time): %.2f%%, max %.2f%%\nmemory mean absolute error: %.2f%%\nall within tolerance: %v\n",
		100*rep.MeanAbsError, 100*rep.MaxAbsError, 100*rep.MemoryMeanAbsError, rep.AllWithinTolerance)
	for _, s := range rep.Stacks {
		fmt.Fprintf(w, "stack: %s\n", s)
	}
	fmt.Fprintf(w, "vectors evaluated: %d, not evaluated: %d\n", rep.Evaluated, notEvaluatedVectors(rep.NotEvaluated, rep.Vectors))
	for _, s := range rep.NotEvaluated {
		fmt.Fprintf(w, "not evaluated: %s\n", s)
	}
	return nil
}

// notEvaluatedVectors counts the vectors named in skips that have no row
// at all.
func notEvaluatedVectors(skips []planner.Skip, rows []planner.Result) int {
	has := map[string]bool{}
	for _, r := range rows {
		has[r.ID] = true
	}
	seen := map[string]bool{}
	n := 0
	for _, s := range skips {
		if !has[s.ID] && !seen[s.ID] {
			seen[s.ID] = true
			n++
		}
	}
	return n
}

func runCrossValidate(ctx context.Context, paths []string, cat *planner.Catalog, output cmdkit.Format, w io.Writer) error {
	vs, err := readVectorSets(paths)
	if err != nil {
		return err
	}
	cv := planner.CrossValidate(vs, cat, planner.DefaultStacks())
	if output != cmdkit.Table {
		return writeAs(w, output, cv)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tCASE\tMETRIC\tMEASURED\tIN-SAMPLE\tERROR\tLEAVE-ONE-OUT\tERROR")
	for _, r := range cv.Rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%.4g\t%.4g\t%+.1f%%\t%.4g\t%+.1f%%\n",
			r.ID, r.Case, r.Metric, r.Measured, r.InSample, 100*r.InError, r.HeldOut, 100*r.HeldError)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(w, "\nmean absolute error over %d figures: in-sample %.2f%%, leave-one-out %.2f%% (max %.2f%%)\n",
		len(cv.Rows), 100*cv.InSampleMeanAbsError, 100*cv.LOOMeanAbsError, 100*cv.LOOMaxAbsError)
	fmt.Fprintf(w, "not evaluated: %d\n", len(cv.NotEvaluated))
	for _, s := range cv.NotEvaluated {
		fmt.Fprintf(w, "not evaluated: %s\n", s)
	}
	return nil
}

func runFit(ctx context.Context, paths []string, cat *planner.Catalog, output cmdkit.Format, w io.Writer) error {
	vs, err := readVectorSets(paths)
	if err != nil {
		return err
	}
	_, res := planner.Fit(vs, cat, planner.DefaultStacks())
	if output != cmdkit.Table {
		return writeAs(w, output, res)
	}
	for _, r := range res {
		fmt.Fprintf(w, "every stack: compute_efficiency=%.3f network_efficiency=%.3f moe_host_op_us=%.0f, fitted on %s: %d figures, mean absolute error %.2f%%\n",
			r.ComputeEfficiency, r.NetworkEfficiency, r.MoEHostOpSeconds*1e6, strings.Join(r.FittedOn, ","), r.Figures, 100*r.MeanAbsError)
	}
	return nil
}

func runServe(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("plan serve", stderr)
	var c common
	c.register(fs)
	var model, gpu, precision, kvPrecision string
	var maxSeq, domain int
	var util float64
	fs.StringVar(&model, "model", "", "model name from the catalog")
	fs.StringVar(&gpu, "gpu", "", "GPU name from the catalog")
	fs.StringVar(&precision, "precision", "bf16", "weight precision: bf16, fp16, fp8, int8 or int4")
	fs.StringVar(&kvPrecision, "kv-precision", "bf16", "KV-cache precision: bf16, fp16 or fp8")
	fs.IntVar(&maxSeq, "max-seq", 8192, "longest request context the minimum TP must hold")
	fs.IntVar(&domain, "nvlink-domain", 0, "GPUs per NVLink domain (default: the GPU's)")
	fs.Float64Var(&util, "memory-utilization", planner.DefaultMemoryUtilization, "share of GPU memory the engine may use")
	if err := parse(fs, args); err != nil {
		return err
	}
	if model == "" || gpu == "" {
		return usagef("plan serve needs --model and --gpu")
	}
	prec, err := planner.ParsePrecision(precision)
	if err != nil {
		return usagef("--precision: %v", err)
	}
	kvp, err := planner.ParsePrecision(kvPrecision)
	if err != nil || kvp == planner.INT4 || kvp == planner.INT8 {
		return usagef("--kv-precision must be bf16, fp16 or fp8, got %q", kvPrecision)
	}
	if maxSeq <= 0 {
		return usagef("--max-seq must be positive, got %d", maxSeq)
	}
	if util <= 0 || util > 1 {
		return usagef("--memory-utilization must be in (0, 1], got %v", util)
	}
	if domain < 0 {
		return usagef("--nvlink-domain must not be negative, got %d", domain)
	}
	cat, err := c.loadCatalog()
	if err != nil {
		return err
	}
	m, err := cat.Model(model)
	if err != nil {
		return usageError{err.Error()}
	}
	g, err := cat.GPU(gpu)
	if err != nil {
		return usageError{err.Error()}
	}
	est := planner.Serve(planner.ServeRequest{Model: m, GPU: g, Precision: prec, KVPrecision: kvp,
		MaxSeq: maxSeq, MemoryUtilization: util, NVLinkDomain: domain})
	if c.output != cmdkit.Table {
		return writeAs(stdout, c.output, est)
	}
	fmt.Fprintf(stdout, "%s on %s, %s weights, %s KV cache\n", est.Model, est.GPU, est.Precision, est.KVPrecision)
	fmt.Fprintf(stdout, "weights: %.1f GiB in all; KV cache: %.0f KiB per token (all layers)\n",
		gib(est.WeightsBytes), float64(est.KVBytesPerToken)/1024)
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TP\tWEIGHTS GiB/GPU\tKV CACHE GiB/GPU\tKV CAPACITY (tokens)\tFITS")
	for _, o := range est.Options {
		fmt.Fprintf(tw, "%d\t%.1f\t%.1f\t%d\t%s\n", o.TP, gib(o.WeightsBytesPerGPU), gib(o.KVCacheBytesPerGPU), o.KVCapacityTokens, yes(o.Fits))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if est.MinTP > 0 {
		fmt.Fprintf(stdout, "minimum TP: %d (holds at least one %d-token sequence)\n", est.MinTP, est.MaxSeq)
	} else {
		fmt.Fprintf(stdout, "does not fit: %s\n", est.Reason)
	}
	return nil
}

// writeAs writes v as json or yaml.
func writeAs(w io.Writer, f cmdkit.Format, v any) error {
	if err := cmdkit.Print(w, f, v, nil); err != nil {
		return fmt.Errorf("write %s: %w", f, err)
	}
	return nil
}
