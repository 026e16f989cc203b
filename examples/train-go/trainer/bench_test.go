package trainer

import (
	"context"
	"fmt"
	"sync"
	"testing"
)

// BenchmarkAllReduce measures one all-reduce of the default model's
// gradient (2,692 parameters and the loss) over a loopback ring.
func BenchmarkAllReduce(b *testing.B) {
	n := mlp{hidden: 128}.numParams() + 1
	for _, world := range []int{2, 4} {
		b.Run(fmt.Sprintf("W=%d", world), func(b *testing.B) {
			rings := connectRings(b, context.Background(), world)
			vs := make([][]float64, world)
			for r := range vs {
				vs[r] = make([]float64, n)
			}
			b.SetBytes(int64(8 * n))
			for b.Loop() {
				var wg sync.WaitGroup
				for r := range world {
					wg.Go(func() {
						if err := rings[r].allReduce(context.Background(), vs[r]); err != nil {
							b.Error(err)
						}
					})
				}
				wg.Wait()
			}
		})
	}
}

// BenchmarkLocalGrad measures one rank's forward and backward pass over a
// default global batch of 256 on one rank.
func BenchmarkLocalGrad(b *testing.B) {
	m := mlp{hidden: 128}
	d := newDataset(1)
	order := &batchOrder{seed: 1}
	params := m.init(1)
	buf := make([]float64, m.numParams()+1)
	s := m.scratch()
	step := 0
	for b.Loop() {
		step++
		m.localGrad(params, buf, d, order, step, 256, 0, 1, s)
	}
}
