// Package simcli is the `gangway simulate` command: it reads a trace and
// a cluster shape from flags or files, runs the simulator with one or more
// policies, and prints a table (with a progress bar on stderr) or one JSON
// object per policy, writing JSON, CSV and SVG results on request. Its
// subcommands run the validation experiments: parity with the Helios
// reference runs, the openb allocation-ratio experiment and the goodput
// experiment under failures.
//
// Service is the same replay for the server's POST /v1/simulate (the
// dashboard's Simulate page): the server defines the interface, and the
// cli, which may import the simulator, hands this in.
//
// With -policy live it runs the controller's configuration: the queues of
// a server (-from-server) or of a file (-queues), else the default.
//
// It imports the standard library, internal/sim, internal/sim/trace,
// internal/sim/experiments, internal/scheduler/policy (the lane settings
// of simulate overload), internal/base/cmdkit, internal/api and
// internal/api/client (the queues of -from-server and -queues) and
// github.com/goccy/go-yaml.
package simcli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/gangway/gangway/internal/base/cmdkit"
	"github.com/gangway/gangway/internal/sim"
	"github.com/gangway/gangway/internal/sim/experiments"
	"github.com/gangway/gangway/internal/sim/trace"
)

const usage = `usage: gangway simulate [flags]            replay a trace
       gangway simulate parity [flags]     compare with the Helios reference runs
       gangway simulate openb [flags]      openb GPU allocation ratio (FGD setup)
       gangway simulate goodput [flags]    goodput under failures, checkpoint intervals
       gangway simulate overload [flags]   policies on Philly slices and overload shapes at several loads

Run a subcommand with -h for its flags.
`

// Main runs `gangway simulate` with args (after "simulate") and returns the
// exit code: 0 on success, 2 for bad usage, 1 for anything else.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 {
		switch args[0] {
		case "parity":
			return runParity(ctx, args[1:], stdout, stderr)
		case "openb":
			return runOpenb(ctx, args[1:], stdout, stderr)
		case "goodput":
			return runGoodput(ctx, args[1:], stdout, stderr)
		case "overload":
			return runOverload(ctx, args[1:], stdout, stderr)
		case "help", "-h", "-help", "--help":
			fmt.Fprint(stdout, usage)
			fs, _ := replayFlags(stdout)
			fs.PrintDefaults()
			return 0
		}
	}
	return runReplay(ctx, args, stdout, stderr)
}

type replayOpts struct {
	trace, format, from, to          string
	cluster, nodesFile               string
	nodes, gpusPerNode, nodesPerLeaf int
	gpuModel                         string
	load                             float64
	policies, placement, preemptCost string
	fromServer, queuesFile           string
	failures, repair, restart        string
	ckptInterval, ckptCost, horizon  string
	output                           cmdkit.Format
	outDir                           string
	gpuScale                         int
	seed                             uint64
	progress                         bool
}

func replayFlags(w io.Writer) (*flag.FlagSet, *replayOpts) {
	o := &replayOpts{}
	fs := flag.NewFlagSet("simulate", flag.ContinueOnError)
	fs.SetOutput(w)
	fs.StringVar(&o.trace, "trace", "", "trace file (required)")
	fs.StringVar(&o.format, "format", "", "trace format: "+formatNames()+" (default: from the header)")
	fs.StringVar(&o.from, "from", "", "keep jobs submitted on or after this date (YYYY-MM-DD or a time)")
	fs.StringVar(&o.to, "to", "", "keep jobs submitted up to the end of this date")
	fs.StringVar(&o.cluster, "cluster", "", "cluster file (YAML or JSON pools); overrides the node flags")
	fs.StringVar(&o.nodesFile, "nodes-file", "", "explicit node list (openb node CSV)")
	fs.IntVar(&o.nodes, "nodes", 0, "nodes in one pool (or size it with -load)")
	fs.IntVar(&o.gpusPerNode, "gpus-per-node", 8, "GPUs per node")
	fs.StringVar(&o.gpuModel, "gpu-model", "", "GPU model of the pool")
	fs.IntVar(&o.nodesPerLeaf, "nodes-per-leaf", 0, "nodes under one leaf switch (0: one leaf)")
	fs.IntVar(&o.gpuScale, "gpu-scale", 1, "multiply every job's GPU count (to replay a trace on a bigger cluster)")
	fs.Float64Var(&o.load, "load", 0, "size the pool so the trace's GPU-time is this share of capacity over its submission span")
	fs.StringVar(&o.policies, "policy", "gangway", "policies to compare, comma-separated, or all: "+strings.Join(sim.PolicyNames(), ", ")+"; live:P is the controller with a default queue of policy P (e.g. live:backfill)")
	fs.StringVar(&o.fromServer, "from-server", "", "`URL` of a gangway server whose queues' policies the live policy runs ($GANGWAY_TOKEN, $GANGWAY_CA_FILE apply)")
	fs.StringVar(&o.queuesFile, "queues", "", "`file` of queue specs (YAML or JSON, as gangway get queues -o yaml writes) whose policies the live policy runs")
	fs.StringVar(&o.placement, "placement", "gangway", "placement: "+strings.Join(sim.PlacementNames(), ", "))
	fs.StringVar(&o.preemptCost, "preempt-cost", "helios", "checkpoint-and-restore cost of a preemption: helios (7 s for 1 GPU, 30 s to 8, 60 s beyond) or a duration")
	fs.StringVar(&o.failures, "failures", "none", "failure model: none or llama3 (466 interruptions in 54 days on 16,384 GPUs, 78% hardware)")
	fs.StringVar(&o.repair, "repair", "", "mean repair time of a failed GPU or node (default 8h)")
	fs.StringVar(&o.restart, "restart", "", "time a job loses restarting after an interruption (default 3m)")
	fs.StringVar(&o.ckptInterval, "ckpt-interval", "auto", "checkpoint interval: auto (Young/Daly per job), none, or a duration")
	fs.StringVar(&o.ckptCost, "ckpt-cost", "10s", "how long one checkpoint stalls training")
	fs.StringVar(&o.horizon, "horizon", "", "stop after this much simulated time (e.g. 54d)")
	fs.Uint64Var(&o.seed, "seed", 1, "seed for failures and random placement")
	o.output = cmdkit.Table
	fs.Var(&o.output, "o", "output on stdout: table, json (a line per policy) or yaml (a document per policy)")
	fs.StringVar(&o.outDir, "out", "", "directory for results.json, results.csv, per-policy job and series CSVs and SVG charts")
	fs.BoolVar(&o.progress, "progress", true, "show a progress bar on stderr (table output only)")
	return fs, o
}

func formatNames() string {
	var s []string
	for _, f := range trace.Formats() {
		s = append(s, string(f))
	}
	return strings.Join(s, ", ")
}

// usageError is bad command-line input: exit code 2.
type usageError struct{ error }

func fail(stderr io.Writer, err error) int {
	fmt.Fprintf(stderr, "gangway simulate: %v\n", err)
	var ue usageError
	if errors.As(err, &ue) {
		return 2
	}
	return 1
}

func runReplay(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs, o := replayFlags(stderr)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		return fail(stderr, usageError{fmt.Errorf("unexpected argument %q (subcommands: parity, openb, goodput)", fs.Arg(0))})
	}
	if err := replay(ctx, o, stdout, stderr); err != nil {
		return fail(stderr, err)
	}
	return 0
}

func replay(ctx context.Context, o *replayOpts, stdout, stderr io.Writer) error {
	if o.trace == "" {
		return usageError{errors.New("-trace is required")}
	}
	opt, err := window(o.from, o.to)
	if err != nil {
		return err
	}
	tr, err := readTrace(o.trace, trace.Format(o.format), opt)
	if err != nil {
		return err
	}
	if o.gpuScale < 1 {
		return usageError{fmt.Errorf("-gpu-scale %d: want at least 1", o.gpuScale)}
	}
	for i := range tr.Jobs {
		tr.Jobs[i].GPUs *= o.gpuScale
	}
	shape, err := buildShape(o, tr.Jobs)
	if err != nil {
		return err
	}
	pols, err := parsePolicies(o.policies)
	if err != nil {
		return err
	}
	if pols, err = withLive(ctx, pols, o, stderr); err != nil {
		return err
	}
	placement, err := sim.ParsePlacement(o.placement)
	if err != nil {
		return usageError{err}
	}
	cfg := sim.Config{Shape: shape, Placement: placement, Seed: o.seed}
	if cfg.PreemptCost, err = parsePreemptCost(o.preemptCost); err != nil {
		return err
	}
	if cfg.Failures, err = parseFailures(o.failures, o.repair, o.restart); err != nil {
		return err
	}
	if cfg.Checkpoint, err = parseCheckpoint(o.ckptInterval, o.ckptCost); err != nil {
		return err
	}
	if o.horizon != "" {
		h, err := parseDuration(o.horizon)
		if err != nil {
			return usageError{fmt.Errorf("-horizon: %w", err)}
		}
		cfg.Horizon = h.Seconds()
	}
	fmt.Fprintf(stderr, "trace %s: %d jobs (%d skipped); cluster %s, %d GPUs; placement %s\n",
		filepath.Base(o.trace), len(tr.Jobs), tr.Skipped, shape, shape.GPUs(), placement)
	var results []*sim.Result
	var sums []sim.Summary
	if len(pols) > 1 {
		fmt.Fprintf(stderr, "%d policies, one after another, each over all %d jobs: this takes %d times as long as one; an estimate follows the first\n",
			len(pols), len(tr.Jobs), len(pols))
	}
	for i, p := range pols {
		c := cfg
		c.Policy = p
		var bar *progressBar
		start := time.Now()
		if o.progress && o.output == cmdkit.Table {
			bar = &progressBar{w: stderr, name: p.Name(), start: start}
			c.Progress = bar.update
		} else if len(pols) > 1 {
			fmt.Fprintf(stderr, "policy %d/%d: %s\n", i+1, len(pols), p.Name())
		}
		r, err := sim.Run(ctx, c, tr.Jobs)
		if bar != nil {
			bar.finish()
		}
		if err != nil {
			return fmt.Errorf("policy %s: %w", p.Name(), err)
		}
		if i == 0 && len(pols) > 1 {
			took := time.Since(start)
			fmt.Fprintf(stderr, "%s took %s; the other %d: about %s more (preemptive policies, srtf and tiresias, take longer)\n",
				p.Name(), took.Round(100*time.Millisecond), len(pols)-1, (took * time.Duration(len(pols)-1)).Round(time.Second))
		}
		results = append(results, r)
		sums = append(sums, r.Summary)
		if err := cmdkit.PrintItem(stdout, o.output, r.Summary); err != nil {
			return err
		}
	}
	if o.output == cmdkit.Table {
		if err := sim.WriteTable(stdout, sums); err != nil {
			return err
		}
	}
	if o.outDir != "" {
		label := fmt.Sprintf("%s on %s GPUs", filepath.Base(o.trace), shape)
		if o.from != "" || o.to != "" {
			label = fmt.Sprintf("%s %s..%s on %s GPUs", filepath.Base(o.trace), o.from, o.to, shape)
		}
		if err := writeResults(o.outDir, label, results); err != nil {
			return err
		}
		fmt.Fprintf(stderr, "results in %s\n", o.outDir)
	}
	return nil
}

// window turns -from and -to dates into a submit-time filter; a bare
// date in -to means the end of that day.
func window(from, to string) (trace.Options, error) {
	var opt trace.Options
	var err error
	if from != "" {
		if opt.From, err = parseWhen(from, false); err != nil {
			return opt, usageError{fmt.Errorf("-from %w", err)}
		}
	}
	if to != "" {
		if opt.To, err = parseWhen(to, true); err != nil {
			return opt, usageError{fmt.Errorf("-to %w", err)}
		}
	}
	return opt, nil
}

// parseWhen reads a date, "YYYY-MM-DD HH:MM:SS" or an RFC 3339 time, in
// UTC; with end, a bare date is the end of that day.
func parseWhen(s string, end bool) (time.Time, error) {
	for _, layout := range []string{"2006-01-02 15:04:05", time.RFC3339, "2006-01-02"} {
		if t, err := time.Parse(layout, s); err == nil {
			if end && layout == "2006-01-02" {
				t = t.Add(24*time.Hour - time.Second)
			}
			return t.UTC(), nil
		}
	}
	return time.Time{}, fmt.Errorf("%q: want YYYY-MM-DD, \"YYYY-MM-DD HH:MM:SS\" or RFC 3339", s)
}

func readTrace(path string, f trace.Format, opt trace.Options) (*trace.Trace, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	tr, err := trace.Read(fh, filepath.Base(path), f, opt)
	if err != nil {
		return nil, err
	}
	return tr, nil
}

func buildShape(o *replayOpts, jobs []trace.Job) (sim.Shape, error) {
	switch {
	case o.cluster != "":
		data, err := os.ReadFile(o.cluster)
		if err != nil {
			return sim.Shape{}, err
		}
		return sim.ParseShape(data)
	case o.nodesFile != "":
		fh, err := os.Open(o.nodesFile)
		if err != nil {
			return sim.Shape{}, err
		}
		defer fh.Close()
		nodes, err := trace.ReadOpenbNodes(fh, filepath.Base(o.nodesFile))
		if err != nil {
			return sim.Shape{}, err
		}
		var gpuNodes []trace.Node
		for _, n := range nodes {
			if n.GPUs > 0 {
				gpuNodes = append(gpuNodes, n)
			}
		}
		return sim.Shape{Nodes: gpuNodes}, nil
	}
	n := o.nodes
	if o.load > 0 {
		if n > 0 {
			return sim.Shape{}, usageError{errors.New("give -nodes or -load, not both")}
		}
		var err error
		if n, err = sim.NodesForLoad(jobs, o.load, o.gpusPerNode); err != nil {
			return sim.Shape{}, err
		}
	}
	if n <= 0 {
		return sim.Shape{}, usageError{errors.New("the cluster has no nodes: give -nodes, -load, -cluster or -nodes-file")}
	}
	s := sim.Shape{Pools: []sim.Pool{{Nodes: n, GPUsPerNode: o.gpusPerNode, GPUModel: o.gpuModel, NodesPerLeaf: o.nodesPerLeaf}}}
	if err := s.Validate(); err != nil {
		return sim.Shape{}, usageError{err}
	}
	return s, nil
}

func parsePolicies(s string) ([]sim.Policy, error) {
	if strings.TrimSpace(s) == "all" {
		s = strings.Join(sim.PolicyNames(), ",")
	}
	var out []sim.Policy
	seen := map[string]bool{}
	for _, name := range strings.Split(s, ",") {
		if strings.TrimSpace(name) == "" {
			continue
		}
		p, err := sim.ParsePolicy(name)
		if err != nil {
			return nil, usageError{fmt.Errorf("-policy: %w", err)}
		}
		if !seen[p.Name()] {
			seen[p.Name()] = true
			out = append(out, p)
		}
	}
	if len(out) == 0 {
		return nil, usageError{errors.New("-policy: none given")}
	}
	return out, nil
}

func parsePreemptCost(s string) (func(int) float64, error) {
	if s == "helios" || s == "" {
		return sim.HeliosPreemptCost, nil
	}
	d, err := parseDuration(s)
	if err != nil || d < 0 {
		return nil, usageError{fmt.Errorf("-preempt-cost %q: want helios or a duration", s)}
	}
	secs := d.Seconds()
	return func(int) float64 { return secs }, nil
}

func parseFailures(model, repair, restart string) (*sim.Failures, error) {
	switch model {
	case "none", "":
		if repair != "" || restart != "" {
			return nil, usageError{errors.New("-repair and -restart need -failures llama3")}
		}
		return nil, nil
	case "llama3":
	default:
		return nil, usageError{fmt.Errorf("-failures %q: want none or llama3", model)}
	}
	f := sim.Llama3Failures()
	if repair != "" {
		d, err := parseDuration(repair)
		if err != nil || d < 0 {
			return nil, usageError{fmt.Errorf("-repair %q: want a duration", repair)}
		}
		f.RepairGPU, f.RepairHost = d.Seconds(), d.Seconds()
	}
	if restart != "" {
		d, err := parseDuration(restart)
		if err != nil || d < 0 {
			return nil, usageError{fmt.Errorf("-restart %q: want a duration", restart)}
		}
		f.RestartCost = d.Seconds()
	}
	return &f, nil
}

func parseCheckpoint(interval, cost string) (sim.Checkpointing, error) {
	var c sim.Checkpointing
	d, err := parseDuration(cost)
	if err != nil || d < 0 {
		return c, usageError{fmt.Errorf("-ckpt-cost %q: want a duration", cost)}
	}
	c.Cost = d.Seconds()
	switch interval {
	case "auto", "":
		c.Auto = true
	case "none":
	default:
		d, err := parseDuration(interval)
		if err != nil || d <= 0 {
			return c, usageError{fmt.Errorf("-ckpt-interval %q: want auto, none or a positive duration", interval)}
		}
		c.Every = d.Seconds()
	}
	return c, nil
}

// parseDuration is time.ParseDuration with days ("54d", "1d12h").
func parseDuration(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	if i := strings.Index(s, "d"); i > 0 {
		days, err := strconv.ParseFloat(s[:i], 64)
		if err != nil {
			return 0, fmt.Errorf("%q is not a duration", s)
		}
		rest := time.Duration(0)
		if s[i+1:] != "" {
			if rest, err = time.ParseDuration(s[i+1:]); err != nil {
				return 0, fmt.Errorf("%q is not a duration", s)
			}
		}
		return time.Duration(days*24*float64(time.Hour)) + rest, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("%q is not a duration (like 90s, 2h30m or 54d)", s)
	}
	return d, nil
}

// progressBar draws one line on stderr, redrawn in place.
type progressBar struct {
	w     io.Writer
	name  string
	start time.Time
	last  int
}

func (b *progressBar) update(done, total int) {
	if total == 0 {
		return
	}
	pct := done * 100 / total
	if pct == b.last && done != total {
		return
	}
	b.last = pct
	const width = 30
	fill := pct * width / 100
	fmt.Fprintf(b.w, "\r%-14s [%s%s] %3d%% %d/%d jobs %s", b.name, strings.Repeat("#", fill), strings.Repeat(".", width-fill),
		pct, done, total, time.Since(b.start).Round(100*time.Millisecond))
}

func (b *progressBar) finish() {
	fmt.Fprintf(b.w, "\r%-14s done in %s%s\n", b.name, time.Since(b.start).Round(100*time.Millisecond), strings.Repeat(" ", 40))
}

// writeResults writes every result file into dir.
func writeResults(dir, traceName string, results []*sim.Result) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var sums []sim.Summary
	for _, r := range results {
		sums = append(sums, r.Summary)
	}
	write := func(name string, fn func(io.Writer) error) error {
		f, err := os.Create(filepath.Join(dir, name))
		if err != nil {
			return err
		}
		if err := fn(f); err != nil {
			f.Close()
			return fmt.Errorf("write %s: %w", name, err)
		}
		return f.Close()
	}
	if err := write("results.json", func(w io.Writer) error { return sim.WriteJSONLines(w, sums) }); err != nil {
		return err
	}
	if err := write("results.csv", func(w io.Writer) error { return sim.WriteSummaryCSV(w, sums) }); err != nil {
		return err
	}
	for _, r := range results {
		r := r
		if err := write("jobs-"+r.Summary.Policy+".csv", func(w io.Writer) error { return sim.WriteJobsCSV(w, r.Jobs) }); err != nil {
			return err
		}
		if err := write("series-"+r.Summary.Policy+".csv", func(w io.Writer) error { return sim.WriteSeriesCSV(w, r) }); err != nil {
			return err
		}
	}
	charts := map[string]experiments.Chart{
		"jct-cdf.svg":     experiments.JCTCDF("JCT distribution, "+traceName, results),
		"queue.svg":       experiments.QueueChart("Jobs waiting, "+traceName, results),
		"utilization.svg": experiments.UtilizationChart("GPU utilization (3-hour means), "+traceName, results),
	}
	for name, c := range charts {
		if err := write(name, c.WriteSVG); err != nil {
			return err
		}
	}
	return nil
}
