package experiments

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/gangway/gangway/internal/base/testenv"
	"github.com/gangway/gangway/internal/sim"
	"github.com/gangway/gangway/internal/sim/trace"
)

// BenchmarkTwoMonths replays the whole Philly trace (September and
// October 2017, 52,849 jobs) on 64 × 8 GPUs with each policy: the speed
// figures of docs/simulation.md §5. One iteration takes seconds, so run
// it once, alone, and read CPU time rather than wall time on a shared
// machine:
//
//	go test -run '^$' -bench 'TwoMonths/live' -benchtime 1x ./internal/sim/experiments/
//
// (with -cpuprofile to see where the time goes).
func BenchmarkTwoMonths(b *testing.B) {
	dir := testenv.SharedData(b, "traces")
	f, err := os.Open(filepath.Join(dir, "philly", "philly-2017-09-10.csv"))
	if err != nil {
		b.Skipf("Philly trace absent: %v", err)
	}
	defer f.Close()
	tr, err := trace.ReadPhilly(f, "philly.csv", trace.Options{})
	if err != nil {
		b.Fatal(err)
	}
	for _, name := range sim.PolicyNames() {
		b.Run(name, func(b *testing.B) {
			pol := mustPolicy(b, name)
			for b.Loop() {
				cfg := sim.Config{Shape: sim.Shape{Pools: []sim.Pool{{Nodes: 64, GPUsPerNode: 8}}}, Policy: pol, Placement: sim.GangwayPlacement}
				if _, err := sim.Run(context.Background(), cfg, tr.Jobs); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
