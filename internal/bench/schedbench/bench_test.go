package schedbench

import (
	"context"
	"os"
	"path/filepath"
	"testing"
)

func loadPhilly(tb testing.TB) ([]TraceJob, string) {
	tb.Helper()
	wd, err := os.Getwd()
	if err != nil {
		tb.Fatal(err)
	}
	path, err := FindPhilly(wd)
	if err != nil {
		tb.Skipf("Philly trace not found (%v); it belongs in ../shared/%s beside the repository", err, PhillyPath)
	}
	f, err := os.Open(path)
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	jobs, err := LoadTrace(f, filepath.Base(path))
	if err != nil {
		tb.Fatal(err)
	}
	return jobs, filepath.Base(path)
}

// BenchmarkSchedulerPasses runs passes of the benchmark (4,096
// nodes, 50,000 jobs) and reports placements per second of scheduler time
// and decision latencies.
func BenchmarkSchedulerPasses(b *testing.B) {
	trace, name := loadPhilly(b)
	cfg := DefaultConfig()
	cfg.Trace, cfg.TraceName = trace, name
	cfg.MaxPasses = 20
	var res Result
	for b.Loop() {
		var err error
		if res, err = Run(context.Background(), cfg); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(res.PlacementsPerS, "placements/s")
	b.ReportMetric(res.P99DecisionMs, "p99-decision-ms")
	b.ReportMetric(res.P99Gang1024PlacedMs, "p99-1024-placed-ms")
	b.ReportMetric(float64(res.PeakHeapBytes)/(1<<20), "peak-heap-MiB")
}
