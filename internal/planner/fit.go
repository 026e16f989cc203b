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
	all := make([]int, len(vectors))
	for i := range all {
		all[i] = i
	}
	return fitCached(vectors, all, cat, base, newFitCache())
}

// fitCache holds each vector's absolute throughput errors at each pair
// of efficiencies it was evaluated at, so that the leave-one-out folds,
// which walk the same grid over nearly the same vectors, evaluate each
// (vector, pair) once. A vector's prediction depends only on itself and
// the pair, so the cached errors are the ones Evaluate would return. Not
// safe for concurrent use.
type fitCache struct {
	errs map[fitKey][]float64
}

type fitKey struct {
	vector int // index into the vectors passed to fitCached
	ce, ne float64
}

func newFitCache() *fitCache { return &fitCache{errs: map[fitKey][]float64{}} }

// fitCached is Fit over vectors[use[0]], vectors[use[1]], …, reusing and
// filling cache (keyed by index into vectors).
func fitCached(vectors []Vector, use []int, cat *Catalog, base map[StackKind]Stack, cache *fitCache) (map[StackKind]Stack, []FitResult) {
	var mine []int
	var ids []string
	for _, i := range use {
		v := vectors[i]
		if memoryOnly(v) {
			continue
		}
		if _, err := v.run(cat, base); err != nil {
			continue // not evaluated (its reason is in Evaluate's report): nothing to fit
		}
		mine = append(mine, i)
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
	// objective is Evaluate(mine).MeanAbsError and the largest throughput
	// error, summed in Evaluate's order so the result is bit-identical.
	objective := func(ce, ne float64) (mean, worst float64, n int) {
		var stacks map[StackKind]Stack
		var sum float64
		for _, i := range mine {
			k := fitKey{i, ce, ne}
			errs, ok := cache.errs[k]
			if !ok {
				if stacks == nil {
					stacks = with(ce, ne)
				}
				errs = []float64{}
				for _, r := range Evaluate(vectors[i:i+1], cat, stacks).Vectors {
					if throughputMetric(r.Metric) {
						errs = append(errs, math.Abs(r.Error))
					}
				}
				cache.errs[k] = errs
			}
			for _, a := range errs {
				sum += a
				worst = math.Max(worst, a)
				n++
			}
		}
		if n > 0 {
			mean = sum / float64(n)
		}
		return mean, worst, n
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
