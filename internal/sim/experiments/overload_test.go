package experiments

import (
	"context"
	"math"
	"testing"

	"github.com/gangway/gangway/internal/sim"
	"github.com/gangway/gangway/internal/sim/trace"
)

// TestReshape: jobs keep their order, durations and span, and land
// where the weighted time says: with a first half twice as dense, two
// thirds of evenly spread jobs arrive in it.
func TestReshape(t *testing.T) {
	var jobs []trace.Job
	for i := range 301 {
		jobs = append(jobs, trace.Job{ID: "j", Submit: float64(i) * 86400 / 100, Duration: float64(i), GPUs: 1})
	}
	out, err := Reshape(jobs, []Segment{{1.5, 2}, {100, 1}})
	if err != nil {
		t.Fatal(err)
	}
	first := 0
	for i, j := range out {
		if i > 0 && j.Submit < out[i-1].Submit {
			t.Fatalf("job %d moved before job %d", i, i-1)
		}
		if j.Duration != jobs[i].Duration || j.GPUs != jobs[i].GPUs {
			t.Fatalf("job %d changed: %+v", i, j)
		}
		if j.Submit < 1.5*86400 {
			first++
		}
	}
	if out[0].Submit != 0 || math.Abs(out[len(out)-1].Submit-3*86400) > 1e-6 {
		t.Errorf("span %v..%v; want 0..3 days", out[0].Submit, out[len(out)-1].Submit)
	}
	if first < 195 || first > 205 {
		t.Errorf("%d of 301 jobs in the dense half; want about 200", first)
	}
	if _, err := Reshape(jobs, []Segment{{0, 1}}); err == nil {
		t.Error("a zero-length segment was accepted")
	}
}

// TestSweepCompares: the sweep runs every policy and reports each
// against SRTF and FIFO with backfill on the same slice and load.
func TestSweepCompares(t *testing.T) {
	var jobs []trace.Job
	for i := range 200 {
		d := 600.0
		if i%10 == 0 {
			d = 40000
		}
		jobs = append(jobs, trace.Job{ID: "j", Submit: float64(i) * 300, Duration: d, GPUs: 1 << (i % 4)})
	}
	names := []string{"srtf", "fifo-backfill", "gangway"}
	var pols []func() sim.Policy
	for _, n := range names {
		pols = append(pols, func() sim.Policy { p, _ := sim.ParsePolicy(n); return p })
	}
	rows, err := Sweep(context.Background(), SweepConfig{Slices: []Slice{{Name: "s", Jobs: jobs}}, Loads: []float64{0.9, 1.2}, Policies: pols})
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 6 {
		t.Fatalf("%d rows; want 6", len(rows))
	}
	for _, r := range rows {
		if r.Policy == "srtf" && r.JCTvsSRTF != 1 || r.Policy == "fifo-backfill" && (r.P99vsFIFO != 1 || r.MaxWait > 0 && r.MaxWaitvsFIFO != 1) {
			t.Errorf("%s at %g: ratios %v %v %v against itself", r.Policy, r.Load, r.JCTvsSRTF, r.P99vsFIFO, r.MaxWaitvsFIFO)
		}
		if r.JCTvsSRTF <= 0 || r.P50Slowdown < 1 || r.P99Slowdown < r.P50Slowdown {
			t.Errorf("%s at %g: avg/SRTF %v, slowdown p50 %v p99 %v", r.Policy, r.Load, r.JCTvsSRTF, r.P50Slowdown, r.P99Slowdown)
		}
	}
}
