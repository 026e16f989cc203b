package scheduler

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/gangway/gangway/internal/topology"
)

// benchSpec is the benchmark cluster: 4,096 nodes × 8 GPUs,
// leaves of 32 nodes, 16 leaves per spine, 8 rails.
var benchSpec = topology.UniformSpec{Nodes: 4096, GPUsPerNode: 8, NodesPerLeaf: 32, LeavesPerSpine: 16, Rails: 8, NVLink: true}

// busyCluster returns the benchmark cluster with share of its GPUs held by
// random one- to eight-GPU jobs, spread so that many nodes are partly
// used.
func busyCluster(b *testing.B, share float64) Snapshot {
	b.Helper()
	topo, err := topology.Uniform(benchSpec)
	if err != nil {
		b.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 1))
	var running []Running
	for n := range topo.NumNodes() {
		node := topo.NodeName(topology.NodeID(n))
		for g := 0; g < 8; {
			size := min(8-g, []int{1, 1, 2, 4, 8}[rng.IntN(5)])
			if rng.Float64() < share {
				running = append(running, Running{JobID: fmt.Sprintf("r%d-%d", n, g), Queue: "q", Preemptible: true,
					EstimatedEnd: int64(1 + rng.IntN(1000)), Ranks: []Slot{{Node: node, GPUs: gpus(g, g+size)}}})
			}
			g += size
		}
	}
	return withRunningOn(topo, running)
}

// BenchmarkPlace1024 times one decision that places a 1,024-GPU gang (tp
// 8) on the benchmark cluster, half busy.
func BenchmarkPlace1024(b *testing.B) {
	snap := busyCluster(b, 0.5)
	reqs := []Request{{JobID: "gang", Queue: "q", Ranks: 1024, TP: 8}}
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		p := NewPass(snap, reqs, Options{})
		b.StartTimer()
		if d, _ := p.Step(); !d.Placed {
			b.Fatalf("not placed: %+v", p.Plan().Pending)
		}
	}
}

// BenchmarkPlaceOne times one decision that places a one-GPU job.
func BenchmarkPlaceOne(b *testing.B) {
	snap := busyCluster(b, 0.5)
	var reqs []Request
	for i := range 4096 {
		reqs = append(reqs, Request{JobID: fmt.Sprintf("j%d", i), Queue: "q", Ranks: 1, Order: int64(i)})
	}
	b.ReportAllocs()
	var p *Pass
	for i := 0; b.Loop(); i++ {
		if i%4096 == 0 {
			b.StopTimer()
			p = NewPass(snap, reqs, Options{})
			b.StartTimer()
		}
		if d, _ := p.Step(); !d.Placed {
			b.Fatal("not placed")
		}
	}
}

// BenchmarkReserve1024 times the decision that gives a blocked 1,024-GPU
// gang its backfill reservation on a cluster 95% busy.
func BenchmarkReserve1024(b *testing.B) {
	snap := busyCluster(b, 0.95)
	reqs := []Request{{JobID: "gang", Queue: "q", Ranks: 1024, TP: 8}}
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		p := NewPass(snap, reqs, Options{Mode: Backfill})
		b.StartTimer()
		if d, _ := p.Step(); d.Kind != PendingReserved {
			b.Fatalf("not reserved: %+v", p.Plan().Pending)
		}
	}
}

// BenchmarkNewPass times building the counters from a snapshot of the
// benchmark cluster, half busy (about 12,000 running jobs).
func BenchmarkNewPass(b *testing.B) {
	snap := busyCluster(b, 0.5)
	b.ReportAllocs()
	for b.Loop() {
		NewPass(snap, nil, Options{})
	}
}

// BenchmarkPlaceOneHost is BenchmarkPlaceOne where nodes limit CPU and
// each job asks for some: the fragmentation-aware choice scans the nodes.
func BenchmarkPlaceOneHost(b *testing.B) {
	snap := busyCluster(b, 0.5)
	for i := range snap.Nodes {
		snap.Nodes[i].CPUMillis, snap.Nodes[i].CPUMillisUsed = 128000, int64(i%64)*1000
	}
	var reqs []Request
	for i := range 4096 {
		reqs = append(reqs, Request{JobID: fmt.Sprintf("j%d", i), Queue: "q", Ranks: 1, Order: int64(i), CPUMillisPerRank: 8000})
	}
	benchSteps(b, snap, reqs)
}

// BenchmarkPlaceShare times one decision placing a half-GPU rank beside
// others on the benchmark cluster.
func BenchmarkPlaceShare(b *testing.B) {
	snap := busyCluster(b, 0.5)
	var reqs []Request
	for i := range 4096 {
		reqs = append(reqs, Request{JobID: fmt.Sprintf("j%d", i), Queue: "q", Ranks: 1, Order: int64(i), GPUMilli: []int{250, 500, 750}[i%3]})
	}
	benchSteps(b, snap, reqs)
}

// benchSteps times Step over reqs, starting a new pass every len(reqs)
// decisions (outside the timer); every decision must place its gang.
func benchSteps(b *testing.B, snap Snapshot, reqs []Request) {
	b.ReportAllocs()
	var p *Pass
	for i := 0; b.Loop(); i++ {
		if i%len(reqs) == 0 {
			b.StopTimer()
			p = NewPass(snap, reqs, Options{})
			b.StartTimer()
		}
		if d, _ := p.Step(); !d.Placed {
			b.Fatal("not placed")
		}
	}
}
