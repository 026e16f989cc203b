package planner

import (
	"math"
	"sort"
)

// maxEfficiency bounds fitted efficiencies: neither tensor cores nor NICs
// sustain more than about 90% of their peak in practice.
const maxEfficiency = 0.9

// FitResult is the outcome of fitting one stack.
type FitResult struct {
	Stack Stack `json:"stack"`
	// Figures is the number of throughput figures the fit used, and
	// MeanAbsError their mean |relative error| at the fitted values.
	Figures      int     `json:"figures"`
	MeanAbsError float64 `json:"mean_abs_error"`
}

// Fit fits each stack's ComputeEfficiency and NetworkEfficiency to the
// throughput figures (tokens/s per GPU or step time) of the given vectors
// that ran on it, minimising the mean absolute relative error (ties broken
// by the largest error) by a grid search refined twice. It is
// deterministic. A stack with no vectors takes Megatron-LM's fitted
// efficiencies (or keeps its own when Megatron-LM has none); DeepSpeed, which
// one vector cannot pin on two parameters, takes Megatron-LM's fitted
// network efficiency and fits only its compute efficiency. Values are
// rounded to three decimals.
//
// Only development vectors may be passed here: the fitted values are what
// every later prediction uses.
func Fit(vectors []Vector, cat *Catalog, base map[StackKind]Stack) (map[StackKind]Stack, []FitResult) {
	out := map[StackKind]Stack{}
	for k, s := range base {
		out[k] = s
	}
	var results []FitResult
	fittedMegatron := false
	for _, kind := range []StackKind{Megatron, FSDP, DeepSpeed} {
		var mine []Vector
		var ids []string
		for _, v := range vectors {
			if memoryOnly(v) {
				continue
			}
			k, err := v.inferStack()
			if err != nil || k != kind {
				continue
			}
			mine = append(mine, v)
			ids = append(ids, v.ID)
		}
		if len(mine) == 0 {
			// No vector of its own: borrow Megatron-LM's fit rather than
			// keep a value fitted on data that may have been left out.
			if m := out[Megatron]; kind != Megatron && fittedMegatron {
				st := out[kind]
				st.ComputeEfficiency, st.NetworkEfficiency = m.ComputeEfficiency, m.NetworkEfficiency
				st.FittedOn = append([]string{"(megatron-lm's)"}, m.FittedOn...)
				out[kind] = st
			}
			continue
		}
		if kind == Megatron {
			fittedMegatron = true
		}
		st := out[kind]
		fitNetwork := kind != DeepSpeed
		if !fitNetwork {
			st.NetworkEfficiency = out[Megatron].NetworkEfficiency
		}
		objective := func(ce, ne float64) (mean, worst float64, n int) {
			s := st
			s.ComputeEfficiency, s.NetworkEfficiency = ce, ne
			stacks := map[StackKind]Stack{}
			for k, v := range out {
				stacks[k] = v
			}
			stacks[kind] = s
			rep := Evaluate(mine, cat, stacks)
			for _, r := range rep.Vectors {
				if throughputMetric(r.Metric) {
					n++
					worst = math.Max(worst, math.Abs(r.Error))
				}
			}
			return rep.MeanAbsError, worst, n
		}
		// Start from nothing so the result does not depend on the values
		// passed in.
		bestC, bestN := 0.0, st.NetworkEfficiency
		bestMean, bestWorst := math.Inf(1), math.Inf(1)
		_, _, n := objective(maxEfficiency/2, bestN)
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
		steps := []struct{ lo, hi, dc, dn float64 }{{0.2, 1.0, 0.02, 0.05}}
		for _, st := range steps {
			for ce := st.lo; ce <= st.hi+1e-9; ce += st.dc {
				if !fitNetwork {
					try(ce, bestN)
					continue
				}
				for ne := 0.05; ne <= maxEfficiency+1e-9; ne += st.dn {
					try(ce, ne)
				}
			}
		}
		for _, d := range []struct{ dc, dn float64 }{{0.002, 0.005}, {0.001, 0.001}} {
			c0, n0 := bestC, bestN
			for i := -12; i <= 12; i++ {
				ce := c0 + float64(i)*d.dc
				if !fitNetwork {
					try(ce, bestN)
					continue
				}
				for k := -12; k <= 12; k++ {
					try(ce, n0+float64(k)*d.dn)
				}
			}
		}
		st.ComputeEfficiency = math.Round(bestC*1000) / 1000
		st.NetworkEfficiency = math.Round(bestN*1000) / 1000
		sort.Strings(ids)
		st.FittedOn = ids
		out[kind] = st
		mean, _, _ := objective(st.ComputeEfficiency, st.NetworkEfficiency)
		results = append(results, FitResult{Stack: st, Figures: n, MeanAbsError: mean})
	}
	return out, results
}
