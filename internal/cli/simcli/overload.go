package simcli

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/gangway/gangway/internal/base/cmdkit"
	"github.com/gangway/gangway/internal/scheduler/policy"
	"github.com/gangway/gangway/internal/sim"
	"github.com/gangway/gangway/internal/sim/experiments"
	"github.com/gangway/gangway/internal/sim/trace"
)

// runOverload is `gangway simulate overload`: every policy on every
// slice of Philly at every load, against the targets of
// docs/simulation.md §6.
func runOverload(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := cmdkit.NewFlags(stderr, "simulate overload", "[flags]")
	tracePath := fs.String("trace", "../shared/data/traces/philly/philly-2017-09-10.csv", "Philly trace (Pollux CSV, September and October 2017)")
	slicesFlag := fs.String("slices", "all", "slices: sep, oct, sep-oct, long-overload, bursts, busy-then-quiet, or all")
	loadsFlag := fs.String("loads", "0.6,0.9,1.1", "loads (the slice's GPU-time over the pool's capacity across its submission span)")
	pols := fs.String("policy", "srtf,fifo-backfill,gangway-4h,gangway", "policies (srtf and fifo-backfill are the targets' references)")
	shares := fs.String("lane-shares", "", "also run gangway with these lane shares (sensitivity), e.g. 0.15,0.35,0.5")
	after := fs.String("overdue-after", "", "also run gangway with these overdue bounds (sensitivity), e.g. 2h,8h")
	turns := fs.String("lane-turns", "", "also run gangway with these lane turns (sensitivity; 0: a lane job runs until it ends), e.g. 0,1h,12h")
	workers := fs.Int("workers", 0, "simulations at once (default: the CPUs)")
	output := cmdkit.OutputFlag(fs)
	if code, ok := cmdkit.ParseNoArgs(fs, args); !ok {
		return code
	}
	loads, err := floats("loads", *loadsFlag)
	if err != nil {
		return fail(stderr, err)
	}
	cfg := experiments.SweepConfig{Loads: loads, Workers: *workers}
	for _, name := range strings.Split(*pols, ",") {
		name = strings.TrimSpace(name)
		if name == "" {
			continue
		}
		if _, err := sim.ParsePolicy(name); err != nil {
			return fail(stderr, usageError{fmt.Errorf("-policy: %w", err)})
		}
		cfg.Policies = append(cfg.Policies, func() sim.Policy { p, _ := sim.ParsePolicy(name); return p })
		cfg.Labels = append(cfg.Labels, name)
	}
	// lane adds gangway with one setting changed, for sensitivity.
	lane := func(label string, set func(*policy.LanePolicy)) {
		cfg.Policies = append(cfg.Policies, func() sim.Policy { p := policy.Lane(); set(p); return sim.FromPolicy(p) })
		cfg.Labels = append(cfg.Labels, "gangway "+label)
	}
	vs, err := floats("lane-shares", *shares)
	if err != nil {
		return fail(stderr, err)
	}
	for _, v := range vs {
		if v <= 0 || v > 1 {
			return fail(stderr, usageError{fmt.Errorf("-lane-shares: %v is not a share in (0, 1]", v)})
		}
		lane(fmt.Sprintf("share=%g", v), func(p *policy.LanePolicy) { p.LaneShare = v })
	}
	for _, f := range []struct {
		flag, list, label string
		zeroOK            bool // 0 is a value: a lane job runs until it ends
		set               func(*policy.LanePolicy, float64)
	}{
		{"overdue-after", *after, "overdue=", false, func(p *policy.LanePolicy, v float64) { p.OverdueAfter = v }},
		{"lane-turns", *turns, "turn=", true, func(p *policy.LanePolicy, v float64) { p.LaneTurn = v }},
	} {
		for _, s := range strings.Split(f.list, ",") {
			if s = strings.TrimSpace(s); s == "" {
				continue
			}
			d, err := parseDuration(s)
			if err != nil || d < 0 || (d == 0 && !f.zeroOK) {
				want := "a positive duration"
				if f.zeroOK {
					want = "a duration (0: until the job ends)"
				}
				return fail(stderr, usageError{fmt.Errorf("-%s: %q is not %s", f.flag, s, want)})
			}
			lane(f.label+s, func(p *policy.LanePolicy) { f.set(p, d.Seconds()) })
		}
	}
	if len(cfg.Policies) == 0 {
		return fail(stderr, usageError{fmt.Errorf("-policy: none given")})
	}
	tr, err := readTrace(*tracePath, trace.FormatPhilly, trace.Options{})
	if err != nil {
		return fail(stderr, err)
	}
	all, err := experiments.Slices(tr)
	if err != nil {
		return fail(stderr, err)
	}
	want := map[string]bool{}
	for _, s := range strings.Split(*slicesFlag, ",") {
		want[strings.TrimSpace(s)] = true
	}
	var names []string
	for _, s := range all {
		names = append(names, s.Name)
		if want["all"] || want[s.Name] {
			cfg.Slices = append(cfg.Slices, s)
			delete(want, s.Name)
		}
	}
	delete(want, "all")
	for s := range want {
		return fail(stderr, usageError{fmt.Errorf("-slices: unknown slice %q (known: %s, all)", s, strings.Join(names, ", "))})
	}
	cfg.Progress = func(done, total int, r experiments.SweepRow) {
		fmt.Fprintf(stderr, "%d/%d  %s at %g: %s\n", done, total, r.Slice, r.Load, r.Policy)
	}
	rows, err := experiments.Sweep(ctx, cfg)
	if err != nil {
		return fail(stderr, err)
	}
	if *output != cmdkit.Table {
		return printItems(stdout, stderr, *output, rows)
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "slice\tload\tpolicy\tavg JCT s\t÷ SRTF\tp99 JCT s\t÷ FIFO+bf\tmax wait h\t÷ FIFO+bf\tslowdown p50\tp99\twaited >24h\tpreemptions\ttargets\t")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%g\t%s\t%.0f\t%.2f\t%.0f\t%.2f\t%.1f\t%.2f\t%.2f\t%.1f\t%.1f%%\t%d\t%s\t\n", r.Slice, r.Load, r.Policy,
			r.AvgJCT, r.JCTvsSRTF, r.P99JCT, r.P99vsFIFO, r.MaxWait/3600, r.MaxWaitvsFIFO, r.P50Slowdown, r.P99Slowdown, 100*r.WaitedOver24h, r.Preemptions, targets(r))
	}
	return failIf(stderr, tw.Flush())
}

// targets says which of issue 22's targets a row meets: average JCT at
// most 1.3× SRTF's, p99 JCT and the longest wait at most FIFO with
// backfill's.
func targets(r experiments.SweepRow) string {
	if r.JCTvsSRTF == 0 || r.P99vsFIFO == 0 {
		return "-"
	}
	var miss []string
	if r.JCTvsSRTF > 1.3 {
		miss = append(miss, "avg")
	}
	if r.P99vsFIFO > 1.0005 {
		miss = append(miss, "p99")
	}
	if r.MaxWaitvsFIFO > 1.0005 {
		miss = append(miss, "wait")
	}
	if len(miss) == 0 {
		return "met"
	}
	return "missed " + strings.Join(miss, ",")
}

func floats(flag, s string) ([]float64, error) {
	var out []float64
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		v, err := strconv.ParseFloat(f, 64)
		if err != nil || v <= 0 {
			return nil, usageError{fmt.Errorf("-%s: %q is not a positive number", flag, f)}
		}
		out = append(out, v)
	}
	return out, nil
}

func failIf(stderr io.Writer, err error) int {
	if err != nil {
		return fail(stderr, err)
	}
	return 0
}

// printItems writes rows as JSON lines or YAML documents.
func printItems[T any](stdout, stderr io.Writer, output cmdkit.Format, rows []T) int {
	for _, r := range rows {
		if err := cmdkit.PrintItem(stdout, output, r); err != nil {
			return fail(stderr, err)
		}
	}
	return 0
}
