// Package stats holds the order statistics gangway reports: the one
// nearest-rank quantile every benchmark uses (so two harnesses that report
// the p99 of the same samples agree), and the interpolated percentile the
// simulator reports beside peers computed with numpy.
//
// It imports only the standard library.
package stats

import "math"

// Quantile is the nearest-rank q-quantile (0 ≤ q ≤ 1) of sorted xs: the
// smallest sample with at least a q share of the samples at or below it.
// q = 0 gives the minimum and q = 1 the maximum. An empty slice gives 0, so
// that a report with no samples still encodes as JSON.
func Quantile(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	k := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[min(max(k, 0), len(sorted)-1)]
}

// Percentile is the p-th percentile (0..100) of sorted xs by linear
// interpolation between closest ranks, numpy.percentile's default: the
// definition the published simulator results use. An empty slice gives NaN.
func Percentile(sorted []float64, p float64) float64 {
	n := len(sorted)
	if n == 0 {
		return math.NaN()
	}
	if n == 1 {
		return sorted[0]
	}
	h := (float64(n) - 1) * p / 100
	lo := math.Floor(h)
	i := int(lo)
	if i >= n-1 {
		return sorted[n-1]
	}
	return sorted[i] + (h-lo)*(sorted[i+1]-sorted[i])
}

// Mean is the arithmetic mean of xs (NaN when empty).
func Mean(xs []float64) float64 {
	var s float64
	for _, x := range xs {
		s += x
	}
	return s / float64(len(xs))
}
