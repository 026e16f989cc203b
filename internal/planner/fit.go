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
	MoEHostOpSeconds  float64  `json:"moe_host_op_s"`
	FittedOn          []string `json:"fitted_on"`
	// Figures is the number of throughput figures the fit used, and
	// MeanAbsError their mean |relative error| at the fitted values.
	Figures      int     `json:"figures"`
	MeanAbsError float64 `json:"mean_abs_error"`
}

// Fit fits one ComputeEfficiency, one NetworkEfficiency and one
// MoEHostOpSeconds, shared by every stack, to the throughput figures
// (tokens/s per GPU or step time) of the given vectors, minimising the
// mean absolute relative error (ties broken by the largest error): the
// efficiencies by a grid search refined twice, the host time per MoE
// kernel (which only mixture-of-experts vectors depend on) by
// coordinate descent around it — efficiencies at 0, host time on a 5 µs
// grid, efficiencies again, host time to 1 µs, efficiencies once more.
// With no MoE vector the host time is 0: nothing was fitted to it. What
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
	host   float64 // 0 for vectors without experts, which do not depend on it
}

func newFitCache() *fitCache { return &fitCache{errs: map[fitKey][]float64{}} }

// fitCached is Fit over vectors[use[0]], vectors[use[1]], …, reusing and
// filling cache (keyed by index into vectors).
func fitCached(vectors []Vector, use []int, cat *Catalog, base map[StackKind]Stack, cache *fitCache) (map[StackKind]Stack, []FitResult) {
	var mine []int
	var ids []string
	moe := map[int]bool{}
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
		moe[i] = v.Model.Experts > 0
	}
	with := func(ce, ne, host float64) map[StackKind]Stack {
		out := map[StackKind]Stack{}
		for k, s := range base {
			s.ComputeEfficiency, s.NetworkEfficiency, s.MoEHostOpSeconds = ce, ne, host
			out[k] = s
		}
		return out
	}
	// objective is Evaluate(mine).MeanAbsError and the largest throughput
	// error, summed in Evaluate's order so the result is bit-identical.
	objective := func(ce, ne, host float64) (mean, worst float64, n int) {
		var stacks map[StackKind]Stack
		var sum float64
		for _, i := range mine {
			k := fitKey{i, ce, ne, 0}
			if moe[i] {
				k.host = host
			}
			errs, ok := cache.errs[k]
			if !ok {
				if stacks == nil {
					stacks = with(ce, ne, host)
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
	host := base[Megatron].MoEHostOpSeconds
	if _, _, n := objective(maxEfficiency/2, maxEfficiency/2, host); n == 0 {
		return with(base[Megatron].ComputeEfficiency, base[Megatron].NetworkEfficiency, host), nil
	}
	anyMoE := false
	for _, i := range mine {
		anyMoE = anyMoE || moe[i]
	}
	better := func(mean, worst, bestMean, bestWorst float64) bool {
		return mean < bestMean-1e-12 || (math.Abs(mean-bestMean) <= 1e-12 && worst < bestWorst)
	}
	// efficiencies fits the two efficiencies at a host time: a coarse
	// grid, then two refinements around the best point. It starts from
	// nothing so the result does not depend on the values passed in.
	efficiencies := func(host float64) (bestC, bestN float64) {
		bestMean, bestWorst := math.Inf(1), math.Inf(1)
		try := func(ce, ne float64) {
			if ce <= 0 || ce > maxEfficiency || ne <= 0 || ne > maxEfficiency {
				return
			}
			if mean, worst, _ := objective(ce, ne, host); better(mean, worst, bestMean, bestWorst) {
				bestC, bestN, bestMean, bestWorst = ce, ne, mean, worst
			}
		}
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
		return bestC, bestN
	}
	// hostTime fits the host time per MoE kernel at given efficiencies,
	// in whole µs: steps of step µs over [lo, hi].
	hostTime := func(ce, ne float64, lo, hi, step int) float64 {
		best, bestMean, bestWorst := 0.0, math.Inf(1), math.Inf(1)
		for us := max(lo, 0); us <= hi; us += step {
			h := float64(us) * 1e-6
			if mean, worst, _ := objective(ce, ne, h); better(mean, worst, bestMean, bestWorst) {
				best, bestMean, bestWorst = h, mean, worst
			}
		}
		return best
	}
	// With no MoE vector nothing informs the host time: it is 0 (not
	// modelled), never a value fitted elsewhere, so a leave-one-out fold
	// without the MoE vectors does not predict them with their own fit.
	host = 0
	var ce, ne float64
	if anyMoE {
		ce, ne = efficiencies(0)
		host = hostTime(ce, ne, 0, maxMoEHostOpMicros, 5)
		ce, ne = efficiencies(host)
		us := int(math.Round(host * 1e6))
		host = hostTime(ce, ne, us-4, us+4, 1)
	}
	ce, ne = efficiencies(host)
	ce = math.Round(ce*1000) / 1000
	ne = math.Round(ne*1000) / 1000
	sort.Strings(ids)
	out := with(ce, ne, host)
	for k, s := range out {
		s.FittedOn = ids
		out[k] = s
	}
	mean, _, n := objective(ce, ne, host)
	return out, []FitResult{{ComputeEfficiency: ce, NetworkEfficiency: ne, MoEHostOpSeconds: host, FittedOn: ids, Figures: n, MeanAbsError: mean}}
}

// maxMoEHostOpMicros bounds the fitted host time per MoE kernel, in µs:
// ten times the slowest eager operator the cited range gives (25 µs).
const maxMoEHostOpMicros = 250
