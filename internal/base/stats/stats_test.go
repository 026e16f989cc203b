package stats

import (
	"math"
	"testing"
)

func TestQuantile(t *testing.T) {
	xs := []float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	tests := []struct {
		name string
		xs   []float64
		q    float64
		want float64
	}{
		{"empty", nil, 0.5, 0},
		{"one", []float64{7}, 0.99, 7},
		{"median of ten is the 5th", xs, 0.5, 5},
		{"p90 of ten is the 9th", xs, 0.9, 9},
		{"p99 of ten is the 10th", xs, 0.99, 10},
		{"max", xs, 1, 10},
		{"zero is the min", xs, 0, 1},
		{"tiny q is the first", xs, 0.001, 1},
		{"p99 of 1000 is the 990th", seq(1000), 0.99, 990},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := Quantile(tc.xs, tc.q); got != tc.want {
				t.Errorf("Quantile(%v, %v) = %v, want %v", tc.name, tc.q, got, tc.want)
			}
		})
	}
}

func TestPercentileMatchesNumpy(t *testing.T) {
	xs := []float64{1, 2, 3, 4}
	// numpy.percentile([1,2,3,4], [0,50,95,99,100]) = [1, 2.5, 3.85, 3.97, 4]
	for p, want := range map[float64]float64{0: 1, 50: 2.5, 95: 3.85, 99: 3.97, 100: 4} {
		if got := Percentile(xs, p); math.Abs(got-want) > 1e-12 {
			t.Errorf("Percentile(%v) = %v, want %v", p, got, want)
		}
	}
	if got := Percentile(nil, 50); !math.IsNaN(got) {
		t.Errorf("Percentile(nil) = %v, want NaN", got)
	}
	if got := Percentile([]float64{7}, 99); got != 7 {
		t.Errorf("Percentile([7]) = %v, want 7", got)
	}
}

func seq(n int) []float64 {
	xs := make([]float64, n)
	for i := range xs {
		xs[i] = float64(i + 1)
	}
	return xs
}
