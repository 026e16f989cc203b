package simcli

import (
	"context"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/gangway/gangway/internal/base/cmdkit"
	"github.com/gangway/gangway/internal/sim"
	"github.com/gangway/gangway/internal/sim/experiments"
	"github.com/gangway/gangway/internal/sim/trace"
)

func runParity(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := cmdkit.NewFlags(stderr, "simulate parity", "[flags]")
	tracePath := fs.String("trace", "../shared/data/traces/philly/philly-2017-09-10.csv", "Philly trace (Pollux CSV)")
	ref := fs.String("reference", "../shared/data/traces/reference", "directory of the Helios reference job logs")
	output := cmdkit.OutputFlag(fs)
	if code, ok := cmdkit.ParseNoArgs(fs, args); !ok {
		return code
	}
	opt, _ := window("2017-10-01", "2017-10-07")
	tr, err := readTrace(*tracePath, trace.FormatPhilly, opt)
	if err != nil {
		return fail(stderr, err)
	}
	rows, err := experiments.Parity(ctx, tr.Jobs, *ref, experiments.ParityCases())
	if err != nil {
		return fail(stderr, err)
	}
	if *output != cmdkit.Table {
		return printItems(stdout, stderr, *output, rows)
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "nodes\tpolicy\tref avg JCT\tours\tΔ\tsame starts\tours, Helios order\tΔ\tsame starts\tref p99\tours p99\t")
	for _, r := range rows {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%+.2f%%\t%d/%d\t%s\t%+.2f%%\t%d\t%s\t%s\t\n", r.Nodes, r.Policy,
			sim.Thousands(r.Ref.AvgJCT), sim.Thousands(r.Plain.AvgJCT), 100*(r.Plain.AvgJCT/r.Ref.AvgJCT-1), r.PlainSame, r.Jobs,
			sim.Thousands(r.Helios.AvgJCT), 100*(r.Helios.AvgJCT/r.Ref.AvgJCT-1), r.HeliosSame,
			sim.Thousands(r.Ref.P99JCT), sim.Thousands(r.Plain.P99JCT))
	}
	if err := tw.Flush(); err != nil {
		return fail(stderr, err)
	}
	fmt.Fprintln(stdout, "\"Helios order\": same-second submissions in the order the reference queued them (recovered from its 64-node FIFO log), SRTF with its one-second completion step.")
	return 0
}

func runOpenb(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := cmdkit.NewFlags(stderr, "simulate openb", "[flags]")
	nodesPath := fs.String("nodes-file", "../shared/data/traces/openb/openb_node_list_gpu_node.csv", "openb GPU node list")
	podsPath := fs.String("pods", "../shared/data/traces/openb/openb_pod_list_default.csv", "openb pod list")
	published := fs.String("published", "../shared/data/traces/published/analysis_allo_discrete.csv", "FGD's published curves (\"\" to skip)")
	seeds := fs.String("seeds", "42-51", "seeds, as a range or a comma list")
	arrive := fs.Float64("arrive", 1.3, "arrive pods up to this multiple of the cluster's GPUs")
	packers := fs.String("packer", "scheduler,fgd-exact,fgd,bestfit,random", "packers: scheduler, fgd, fgd-exact, bestfit, random")
	output := cmdkit.OutputFlag(fs)
	outDir := fs.String("out", "", "directory for allocation.csv and allocation.svg")
	if code, ok := cmdkit.ParseNoArgs(fs, args); !ok {
		return code
	}
	if err := openb(ctx, *nodesPath, *podsPath, *published, *seeds, *arrive, *packers, *output, *outDir, stdout, stderr); err != nil {
		return fail(stderr, err)
	}
	return 0
}

func parseSeeds(s string) ([]uint64, error) {
	var out []uint64
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if lo, hi, ok := strings.Cut(part, "-"); ok {
			a, err1 := strconv.ParseUint(lo, 10, 64)
			b, err2 := strconv.ParseUint(hi, 10, 64)
			if err1 != nil || err2 != nil || b < a || b-a > 1000 {
				return nil, usageError{fmt.Errorf("-seeds %q: want a range like 42-51", s)}
			}
			for v := a; v <= b; v++ {
				out = append(out, v)
			}
			continue
		}
		v, err := strconv.ParseUint(part, 10, 64)
		if err != nil {
			return nil, usageError{fmt.Errorf("-seeds %q: want numbers", s)}
		}
		out = append(out, v)
	}
	return out, nil
}

func openb(ctx context.Context, nodesPath, podsPath, published, seedList string, arrive float64, packerList string, output cmdkit.Format, outDir string, stdout, stderr io.Writer) error {
	seeds, err := parseSeeds(seedList)
	if err != nil {
		return err
	}
	var packers []experiments.Packer
	for _, name := range strings.Split(packerList, ",") {
		p, err := experiments.ParsePacker(name)
		if err != nil {
			return usageError{err}
		}
		packers = append(packers, p)
	}
	nf, err := os.Open(nodesPath)
	if err != nil {
		return err
	}
	defer nf.Close()
	nodes, err := trace.ReadOpenbNodes(nf, filepath.Base(nodesPath))
	if err != nil {
		return err
	}
	var gpuNodes []trace.Node
	for _, n := range nodes {
		if n.GPUs > 0 {
			gpuNodes = append(gpuNodes, n)
		}
	}
	pf, err := os.Open(podsPath)
	if err != nil {
		return err
	}
	defer pf.Close()
	pods, err := trace.ReadOpenbPods(pf, filepath.Base(podsPath), trace.Options{KeepCPUJobs: true})
	if err != nil {
		return err
	}
	workload := strings.TrimSuffix(filepath.Base(podsPath), ".csv")
	var pub map[string][]float64
	if published != "" {
		f, err := os.Open(published)
		if err != nil {
			return err
		}
		pub, err = experiments.ReadPublishedAllocation(f, filepath.Base(published), workload)
		f.Close()
		if err != nil {
			return err
		}
	}
	fmt.Fprintf(stderr, "openb: %d GPU nodes, %d pods (%s), seeds %v\n", len(gpuNodes), len(pods.Jobs), workload, seeds)
	means := map[string][]float64{}
	type summary struct {
		Packer   string  `json:"packer"`
		Seeds    int     `json:"seeds"`
		At90     float64 `json:"allocated_pct_at_90"`
		At100    float64 `json:"allocated_pct_at_100"`
		At120    float64 `json:"allocated_pct_at_120"`
		Min100   float64 `json:"min_at_100"`
		Max100   float64 `json:"max_at_100"`
		Seconds  float64 `json:"seconds"`
		Workload string  `json:"workload"`
	}
	var sums []summary
	for _, p := range packers {
		start := time.Now()
		var cs []*experiments.AllocCurve
		s := summary{Packer: string(p), Seeds: len(seeds), Min100: 101, Max100: -1, Workload: workload}
		for _, seed := range seeds {
			c, err := experiments.Allocate(ctx, experiments.AllocConfig{Nodes: gpuNodes, Pods: pods.Jobs, Seed: seed, ArriveTo: arrive, Packer: p})
			if err != nil {
				return fmt.Errorf("packer %s seed %d: %w", p, seed, err)
			}
			cs = append(cs, c)
			s.Min100, s.Max100 = min(s.Min100, c.At(100)), max(s.Max100, c.At(100))
		}
		m := experiments.MeanCurve(cs)
		means[string(p)] = m
		s.At90, s.At100, s.At120 = at(m, 90), at(m, 100), at(m, 120)
		s.Seconds = time.Since(start).Seconds()
		sums = append(sums, s)
		if err := cmdkit.PrintItem(stdout, output, s); err != nil {
			return err
		}
	}
	if output == cmdkit.Table {
		tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "packer\tat 90%\tat 100%\tmin–max at 100%\tat 120%\t")
		for _, s := range sums {
			fmt.Fprintf(tw, "%s\t%.2f\t%.2f\t%.2f–%.2f\t%.2f\t\n", s.Packer, s.At90, s.At100, s.Min100, s.Max100, s.At120)
		}
		names := slices.Sorted(maps.Keys(pub))
		for _, k := range names {
			fmt.Fprintf(tw, "%s (published)\t%.2f\t%.2f\t\t%.2f\t\n", k, at(pub[k], 90), at(pub[k], 100), at(pub[k], 120))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if outDir != "" {
		if err := os.MkdirAll(outDir, 0o755); err != nil {
			return err
		}
		f, err := os.Create(filepath.Join(outDir, "allocation.csv"))
		if err != nil {
			return err
		}
		fmt.Fprint(f, "arrived_pct")
		names := slices.Sorted(maps.Keys(means))
		for _, k := range names {
			fmt.Fprintf(f, ",%s", k)
		}
		fmt.Fprintln(f)
		for i := 0; i < len(means[names[0]]); i++ {
			fmt.Fprintf(f, "%d", i)
			for _, k := range names {
				fmt.Fprintf(f, ",%.4f", means[k][i])
			}
			fmt.Fprintln(f)
		}
		if err := f.Close(); err != nil {
			return err
		}
		g, err := os.Create(filepath.Join(outDir, "allocation.svg"))
		if err != nil {
			return err
		}
		ch := experiments.AllocationChart(fmt.Sprintf("GPU allocation ratio, %s, mean of %d seeds", workload, len(seeds)), means, pub)
		if err := ch.WriteSVG(g); err != nil {
			g.Close()
			return err
		}
		if err := g.Close(); err != nil {
			return err
		}
	}
	return nil
}

func at(xs []float64, k int) float64 {
	if k < 0 || k >= len(xs) {
		return 0
	}
	return xs[k]
}

func runGoodput(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := cmdkit.NewFlags(stderr, "simulate goodput", "[flags]")
	gpus := fs.Int("gpus", 16384, "GPUs of the training job")
	perNode := fs.Int("gpus-per-node", 8, "GPUs per node")
	spares := fs.Int("spares", 32, "hot spare nodes")
	days := fs.Float64("days", 54, "simulated days")
	ckptCost := fs.String("ckpt-cost", "2s", "how long one checkpoint stalls training (in-memory asynchronous checkpoints stall for about a second)")
	restart := fs.String("restart", "60s", "time lost per interruption besides lost work: detect, swap in a spare, relaunch, load the checkpoint")
	repair := fs.String("repair", "8h", "mean repair time of a failed GPU or node")
	scales := fs.String("scales", "0.25,0.5,1,2,4", "multiples of the recommended interval to run")
	fixed := fs.String("fixed", "10m,30m,1h", "fixed intervals to compare")
	seeds := fs.String("seeds", "1-3", "seeds")
	output := cmdkit.OutputFlag(fs)
	outDir := fs.String("out", "", "directory for goodput.csv and goodput.svg")
	if code, ok := cmdkit.ParseNoArgs(fs, args); !ok {
		return code
	}
	cfg := experiments.GoodputConfig{JobGPUs: *gpus, GPUsPerNode: *perNode, SpareNodes: *spares, Days: *days, Failures: sim.Llama3Failures()}
	for _, x := range []struct {
		name string
		s    string
		dst  *float64
	}{{"ckpt-cost", *ckptCost, &cfg.CkptCost}, {"restart", *restart, &cfg.Failures.RestartCost}, {"repair", *repair, &cfg.Failures.RepairGPU}} {
		d, err := parseDuration(x.s)
		if err != nil || d < 0 {
			return fail(stderr, usageError{fmt.Errorf("-%s %q: want a duration", x.name, x.s)})
		}
		*x.dst = d.Seconds()
	}
	cfg.Failures.RepairHost = cfg.Failures.RepairGPU
	for _, s := range strings.Split(*scales, ",") {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		v, err := strconv.ParseFloat(s, 64)
		if err != nil || v <= 0 {
			return fail(stderr, usageError{fmt.Errorf("-scales: %q is not a positive number", s)})
		}
		cfg.Scales = append(cfg.Scales, v)
	}
	for _, s := range strings.Split(*fixed, ",") {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		d, err := parseDuration(s)
		if err != nil || d <= 0 {
			return fail(stderr, usageError{fmt.Errorf("-fixed: %q is not a positive duration", s)})
		}
		cfg.Fixed = append(cfg.Fixed, d.Seconds())
	}
	var err error
	if cfg.Seeds, err = parseSeeds(*seeds); err != nil {
		return fail(stderr, err)
	}
	start := time.Now()
	res, err := experiments.Goodput(ctx, cfg)
	if err != nil {
		return fail(stderr, err)
	}
	fmt.Fprintf(stderr, "goodput: %d-GPU job + %d spare nodes, %g days, %d runs in %s\n", cfg.JobGPUs, cfg.SpareNodes, cfg.Days,
		len(res.Rows)*len(cfg.Seeds), time.Since(start).Round(100*time.Millisecond))
	if *output != cmdkit.Table {
		if err := cmdkit.PrintItem(stdout, *output, res); err != nil {
			return fail(stderr, err)
		}
	} else {
		fmt.Fprintf(stdout, "job MTBF %s; checkpoint cost %s; recommended interval (Young/Daly) %s\n",
			experiments.FormatSeconds(res.MTBF), experiments.FormatSeconds(cfg.CkptCost), experiments.FormatSeconds(res.Recommended))
		tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "interval\tseconds\tETTR\tmin–max\tmodel\tinterruptions\tGPU-h lost: work\tcheckpoints\trestarts\t")
		for _, r := range res.Rows {
			lostWork := 0.0
			for k, v := range r.GPUHoursLost {
				if strings.HasPrefix(k, "lost_work_") {
					lostWork += v
				}
			}
			fmt.Fprintf(tw, "%s\t%.0f\t%.2f%%\t%.2f–%.2f\t%.2f%%\t%.0f\t%s\t%s\t%s\t\n", r.Label, r.Interval, 100*r.ETTR, 100*r.ETTRMin, 100*r.ETTRMax,
				100*r.Expected, r.Interruptions, sim.Thousands(lostWork), sim.Thousands(r.GPUHoursLost["checkpoint"]), sim.Thousands(r.GPUHoursLost["restart"]))
		}
		if err := tw.Flush(); err != nil {
			return fail(stderr, err)
		}
	}
	if *outDir != "" {
		if err := writeGoodput(*outDir, res); err != nil {
			return fail(stderr, err)
		}
	}
	return 0
}

func writeGoodput(dir string, res *experiments.GoodputResult) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	f, err := os.Create(filepath.Join(dir, "goodput.csv"))
	if err != nil {
		return err
	}
	fmt.Fprintln(f, "label,scale,interval_s,ettr,ettr_min,ettr_max,expected,interruptions")
	var l, m experiments.Line
	l.Name, m.Name = "simulated", "first-order model"
	m.Dashed = true
	for _, r := range res.Rows {
		fmt.Fprintf(f, "%q,%g,%.1f,%.5f,%.5f,%.5f,%.5f,%.1f\n", r.Label, r.Scale, r.Interval, r.ETTR, r.ETTRMin, r.ETTRMax, r.Expected, r.Interruptions)
		if r.Scale > 0 {
			l.X, l.Y = append(l.X, r.Interval), append(l.Y, 100*r.ETTR)
			m.X, m.Y = append(m.X, r.Interval), append(m.Y, 100*r.Expected)
		}
	}
	if err := f.Close(); err != nil {
		return err
	}
	ch := experiments.Chart{Title: fmt.Sprintf("Effective training time vs checkpoint interval (recommended %s)", experiments.FormatSeconds(res.Recommended)),
		XLabel: "checkpoint interval (log scale)", YLabel: "effective training time, %", LogX: true, XFormat: experiments.FormatSeconds, DurationTicks: true,
		Lines: []experiments.Line{l, m}}
	g, err := os.Create(filepath.Join(dir, "goodput.svg"))
	if err != nil {
		return err
	}
	if err := ch.WriteSVG(g); err != nil {
		g.Close()
		return err
	}
	return g.Close()
}
