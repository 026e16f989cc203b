package planner

import (
	"math"
	"sort"
)

// maxEfficiency bounds fitted efficiencies: neither tensor cores nor NICs
// sustain more than about 90% of their peak in practice.
const maxEfficiency = 0.9

// FitResult is the outcome of a fit.
type FitResult struct {
	// ComputeEfficiency and NetworkEfficiency are the values every stack
	// now uses; FittedOn the vectors they were fitted on.
	ComputeEfficiency float64  `json:"compute_efficiency"`
	NetworkEfficiency float64  `json:"network_efficiency"`
	FittedOn          []string `json:"fitted_on"`
	// Figures is the number of throughput figures the fit used, and
	// MeanAbsError their mean |relative error| at the fitted values.
	Figures      int     `json:"figures"`
	MeanAbsError float64 `json:"mean_abs_error"`
}

// Fit fits one ComputeEfficiency and one NetworkEfficiency, shared by
// every stack, to the throughput figures (tokens/s per GPU or step time)
// of the given vectors, minimising the mean absolute relative error (ties
// broken by the largest error) by a grid search refined twice. What
// differs between stacks is what they do (stack.go), not a number fitted
// to one or two of their runs: per-stack fits on one or two vectors did
// not transfer (leave-one-out error 28% on FSDP). It is deterministic;
// values are rounded to three decimals. With no throughput figure the
// stacks are returned unchanged.
//
// Only development vectors may be passed here: the fitted values are what
// every later prediction uses.
func Fit(vectors []Vector, cat *Catalog, base map[StackKind]Stack) (map[StackKind]Stack, []FitResult) {
	var mine []Vector
	var ids []string
	for _, v := range vectors {
		if memoryOnly(v) {
			continue
		}
		if _, err := v.run(cat, base); err != nil {
			continue // not evaluated (its reason is in Evaluate's report): nothing to fit
		}
		mine = append(mine, v)
		ids = append(ids, v.ID)
	}
	with := func(ce, ne float64) map[StackKind]Stack {
		out := map[StackKind]Stack{}
		for k, s := range base {
			s.ComputeEfficiency, s.NetworkEfficiency = ce, ne
			out[k] = s
		}
		return out
	}
	objective := func(ce, ne float64) (mean, worst float64, n int) {
		rep := Evaluate(mine, cat, with(ce, ne))
		for _, r := range rep.Vectors {
			if throughputMetric(r.Metric) {
				n++
				worst = math.Max(worst, math.Abs(r.Error))
			}
		}
		return rep.MeanAbsError, worst, n
	}
	if _, _, n := objective(maxEfficiency/2, maxEfficiency/2); n == 0 {
		return with(base[Megatron].ComputeEfficiency, base[Megatron].NetworkEfficiency), nil
	}
	// Start from nothing so the result does not depend on the values
	// passed in.
	var bestC, bestN float64
	bestMean, bestWorst := math.Inf(1), math.Inf(1)
	try := func(ce, ne float64) {
		if ce <= 0 || ce > maxEfficiency || ne <= 0 || ne > maxEfficiency {
			return
		}
		mean, worst, _ := objective(ce, ne)
		if mean < bestMean-1e-12 || (math.Abs(mean-bestMean) <= 1e-12 && worst < bestWorst) {
			bestC, bestN, bestMean, bestWorst = ce, ne, mean, worst
		}
	}
	// Coarse grid, then two refinements around the best point.
	for ce := 0.2; ce <= maxEfficiency+1e-9; ce += 0.02 {
		for ne := 0.05; ne <= maxEfficiency+1e-9; ne += 0.05 {
			try(ce, ne)
		}
	}
	for _, d := range []struct{ dc, dn float64 }{{0.002, 0.005}, {0.001, 0.001}} {
		c0, n0 := bestC, bestN
		for i := -12; i <= 12; i++ {
			for k := -12; k <= 12; k++ {
				try(c0+float64(i)*d.dc, n0+float64(k)*d.dn)
			}
		}
	}
	ce := math.Round(bestC*1000) / 1000
	ne := math.Round(bestN*1000) / 1000
	sort.Strings(ids)
	out := with(ce, ne)
	for k, s := range out {
		s.FittedOn = ids
		out[k] = s
	}
	mean, _, n := objective(ce, ne)
	return out, []FitResult{{ComputeEfficiency: ce, NetworkEfficiency: ne, FittedOn: ids, Figures: n, MeanAbsError: mean}}
}
