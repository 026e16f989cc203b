package topology

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
)

// benchCluster is the scheduler benchmark's cluster: 4,096 nodes × 8 GPUs,
// leaves of 32 nodes, 16 leaves per spine, 8 rails.
func benchCluster(b *testing.B) *Topology {
	b.Helper()
	topo, err := Uniform(UniformSpec{Nodes: 4096, GPUsPerNode: 8, NodesPerLeaf: 32, LeavesPerSpine: 16, Rails: 8, NVLink: true, NUMAPerNode: 2})
	if err != nil {
		b.Fatal(err)
	}
	return topo
}

func BenchmarkDistance(b *testing.B) {
	topo := benchCluster(b)
	rng := rand.New(rand.NewPCG(1, 1))
	const pairs = 1 << 16
	as, bs := make([]GPURef, pairs), make([]GPURef, pairs)
	for i := range as {
		as[i] = GPURef{NodeID(rng.IntN(4096)), int32(rng.IntN(8))}
		bs[i] = GPURef{NodeID(rng.IntN(4096)), int32(rng.IntN(8))}
	}
	sum := 0
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		sum += topo.Distance(as[i&(pairs-1)], bs[i&(pairs-1)])
	}
	if sum < 0 {
		b.Fatal(sum)
	}
}

func BenchmarkNodeDistance(b *testing.B) {
	topo := benchCluster(b)
	sum := 0
	for i := 0; b.Loop(); i++ {
		sum += topo.NodeDistance(NodeID(i&4095), NodeID((i*7919)&4095))
	}
	if sum < 0 {
		b.Fatal(sum)
	}
}

func BenchmarkOrderRanks(b *testing.B) {
	topo := benchCluster(b)
	for _, bc := range []struct {
		nodes int
		size  Parallelism
	}{
		{128, Parallelism{TP: 8, PP: 4}},   // a 1,024-GPU gang
		{4096, Parallelism{TP: 8, PP: 8}},  // the whole 32,768-GPU cluster
		{4096, Parallelism{TP: 4, PP: 16}}, // TP smaller than a node
	} {
		b.Run(fmt.Sprintf("gpus=%d/tp=%d/pp=%d", bc.nodes*8, bc.size.TP, bc.size.PP), func(b *testing.B) {
			// Spread the gang over the cluster: every 4096/nodes-th node.
			var gpus []GPURef
			step := 4096 / bc.nodes
			for n := 0; n < 4096 && len(gpus) < bc.nodes*8; n += step {
				for g := range 8 {
					gpus = append(gpus, GPURef{NodeID(n), int32(g)})
				}
			}
			rand.New(rand.NewPCG(2, 2)).Shuffle(len(gpus), func(i, j int) { gpus[i], gpus[j] = gpus[j], gpus[i] })
			b.ReportAllocs()
			for b.Loop() {
				if _, err := topo.OrderRanks(gpus, bc.size, OrderTPPPDP); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkUniform4096(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		benchCluster(b)
	}
}

func BenchmarkParseSlurmTree4096(b *testing.B) {
	var sb strings.Builder
	for l := range 128 {
		fmt.Fprintf(&sb, "SwitchName=leaf%03d Nodes=node[%04d-%04d] LinkSpeed=400\n", l+1, l*32+1, l*32+32)
	}
	for s := range 8 {
		fmt.Fprintf(&sb, "SwitchName=spine%d Switches=leaf[%03d-%03d]\n", s+1, s*16+1, s*16+16)
	}
	input := sb.String()
	b.SetBytes(int64(len(input)))
	b.ReportAllocs()
	for b.Loop() {
		tr, err := ParseSlurmTree(strings.NewReader(input), "bench.conf")
		if err != nil {
			b.Fatal(err)
		}
		bl := NewBuilder()
		if err := bl.AddSlurmTree(tr); err != nil {
			b.Fatal(err)
		}
		if _, err := bl.Build(); err != nil {
			b.Fatal(err)
		}
	}
}
