package trainer

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"testing"
	"time"
)

// connectRings builds a real loopback ring of `world` ranks through
// rendezvous, one goroutine per rank.
func connectRings(t testing.TB, ctx context.Context, world int) []*ring {
	t.Helper()
	port := freePort(t)
	rings := make([]*ring, world)
	errs := make([]error, world)
	var wg sync.WaitGroup
	for r := range world {
		wg.Go(func() {
			l, err := parseLaunch(launchEnv(r, world, port, nil))
			if err != nil {
				errs[r] = err
				return
			}
			rings[r], errs[r] = rendezvous(ctx, l, 10*time.Second, 10*time.Second)
		})
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: rendezvous: %v", r, err)
		}
	}
	t.Cleanup(func() {
		for _, rg := range rings {
			rg.close()
		}
	})
	return rings
}

func TestAllReduceSumsOverLoopbackTCP(t *testing.T) {
	t.Parallel()
	for _, world := range []int{1, 2, 3, 4} {
		t.Run(fmt.Sprintf("W=%d", world), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			rings := connectRings(t, ctx, world)
			// Lengths below, at and not divisible by the world size, used
			// one after another on the same ring.
			for _, n := range []int{0, 1, 2, 3, 5, 7, 64, 1001} {
				inputs := make([][]float64, world)
				want := make([]float64, n)
				for r := range world {
					rng := rand.New(rand.NewPCG(uint64(r), uint64(n)))
					inputs[r] = make([]float64, n)
					for i := range n {
						inputs[r][i] = rng.NormFloat64() * math.Pow(10, float64(rng.IntN(7)-3))
						want[i] += inputs[r][i]
					}
				}
				var wg sync.WaitGroup
				errs := make([]error, world)
				for r := range world {
					wg.Go(func() { errs[r] = rings[r].allReduce(ctx, inputs[r]) })
				}
				wg.Wait()
				for r := range world {
					if errs[r] != nil {
						t.Fatalf("n=%d rank %d: %v", n, r, errs[r])
					}
					for i := range n {
						// Sums of up to 4 terms reordered: a few ulps of the
						// largest term.
						scale := 0.0
						for q := range world {
							scale = max(scale, abs(inputs[0][i]), abs(inputs[q][i]))
						}
						if d := abs(inputs[r][i] - want[i]); d > 1e-14*max(scale, abs(want[i])) {
							t.Errorf("n=%d rank %d element %d: got %v, want %v", n, r, i, inputs[r][i], want[i])
						}
						// Every rank must hold the very same bits, or the
						// replicas' weights would drift apart.
						if inputs[r][i] != inputs[0][i] {
							t.Errorf("n=%d element %d: rank %d has %v, rank 0 has %v", n, i, r, inputs[r][i], inputs[0][i])
						}
					}
				}
			}
		})
	}
}

func TestAllReduceIsReproducible(t *testing.T) {
	t.Parallel()
	// The same inputs give bit-identical sums on a fresh ring of the same
	// size: resumed runs depend on it.
	const world, n = 3, 100
	run := func() []float64 {
		rings := connectRings(t, context.Background(), world)
		vs := make([][]float64, world)
		for r := range vs {
			vs[r] = make([]float64, n)
			for i := range vs[r] {
				vs[r][i] = 1 / float64(3*i+r+1)
			}
		}
		var wg sync.WaitGroup
		for r := range world {
			wg.Go(func() {
				if err := rings[r].allReduce(context.Background(), vs[r]); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
		return vs[0]
	}
	a, b := run(), run()
	for i := range a {
		if math.Float64bits(a[i]) != math.Float64bits(b[i]) {
			t.Fatalf("element %d: %v then %v", i, a[i], b[i])
		}
	}
}

func TestChunksCoverTheVector(t *testing.T) {
	t.Parallel()
	for _, n := range []int{0, 1, 3, 7, 10} {
		for w := 1; w <= 4; w++ {
			next := 0
			for c := range w {
				lo, hi := chunk(n, c, w)
				if lo != next || hi < lo || hi-lo > n/w+1 {
					t.Fatalf("n=%d w=%d chunk %d = [%d,%d), previous ended at %d", n, w, c, lo, hi, next)
				}
				next = hi
			}
			if next != n {
				t.Fatalf("n=%d w=%d: chunks end at %d", n, w, next)
			}
		}
	}
}

func TestRingMessageRejectsMismatches(t *testing.T) {
	t.Parallel()
	buf := make([]byte, ringHeaderLen+8*3)
	msg := encodeRingMsg(buf, 7, []float64{1, 2, 3})
	tests := []struct {
		name string
		seq  uint64
		dst  int
		mut  func([]byte)
	}{
		{name: "wrong sequence", seq: 8, dst: 3},
		{name: "wrong length", seq: 7, dst: 2},
		{name: "bad magic", seq: 7, dst: 3, mut: func(b []byte) { b[0] ^= 0xff }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := append([]byte(nil), msg...)
			if tt.mut != nil {
				tt.mut(m)
			}
			if err := decodeRingMsg(m[:ringHeaderLen+8*tt.dst], tt.seq, make([]float64, tt.dst), true); err == nil {
				t.Fatal("accepted a bad message")
			}
		})
	}
	dst := []float64{10, 20, 30}
	if err := decodeRingMsg(msg, 7, dst, true); err != nil {
		t.Fatal(err)
	}
	if dst[0] != 11 || dst[1] != 22 || dst[2] != 33 {
		t.Fatalf("add: got %v", dst)
	}
}

func TestHelloCheck(t *testing.T) {
	t.Parallel()
	l := launch{Rank: 0, WorldSize: 3, JobID: "j", Attempt: 2}
	ok := hello{Rank: 1, WorldSize: 3, JobID: "j", Attempt: 2, Addr: "10.0.0.2:4000"}
	tests := []struct {
		name    string
		mut     func(*hello)
		wantErr bool
	}{
		{name: "valid", mut: func(*hello) {}},
		{name: "other world size", mut: func(h *hello) { h.WorldSize = 4 }, wantErr: true},
		{name: "rank 0", mut: func(h *hello) { h.Rank = 0 }, wantErr: true},
		{name: "rank out of range", mut: func(h *hello) { h.Rank = 3 }, wantErr: true},
		{name: "other job", mut: func(h *hello) { h.JobID = "k" }, wantErr: true},
		{name: "earlier attempt", mut: func(h *hello) { h.Attempt = 1 }, wantErr: true},
		{name: "unspecified address", mut: func(h *hello) { h.Addr = "0.0.0.0:4000" }, wantErr: true},
		{name: "hostname", mut: func(h *hello) { h.Addr = "node-1:4000" }, wantErr: true},
		{name: "no port", mut: func(h *hello) { h.Addr = "10.0.0.2" }, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := ok
			tt.mut(&h)
			if err := h.check(l); (err != nil) != tt.wantErr {
				t.Fatalf("check(%+v) = %v, want error %v", h, err, tt.wantErr)
			}
		})
	}
}

func TestHandshakeNamesSender(t *testing.T) {
	t.Parallel()
	l := launch{Rank: 2, WorldSize: 4, JobID: "j", Attempt: 3}
	b := encodeHandshake(l)
	if err := checkHandshake(b, launch{Rank: 3, WorldSize: 4, JobID: "j", Attempt: 3}, 2); err != nil {
		t.Fatal(err)
	}
	for name, receiver := range map[string]launch{
		"other attempt": {Rank: 3, WorldSize: 4, JobID: "j", Attempt: 4},
		"other job":     {Rank: 3, WorldSize: 4, JobID: "k", Attempt: 3},
		"other world":   {Rank: 3, WorldSize: 5, JobID: "j", Attempt: 3},
	} {
		if err := checkHandshake(b, receiver, 2); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if err := checkHandshake(b, launch{Rank: 0, WorldSize: 4, JobID: "j", Attempt: 3}, 3); err == nil {
		t.Error("accepted a handshake from the wrong rank")
	}
}

func FuzzDecodeHello(f *testing.F) {
	f.Add([]byte(`{"rank":1,"world_size":2,"job_id":"j","attempt":1,"addr":"127.0.0.1:5000"}`))
	f.Add([]byte(`{"rank":-1}`))
	f.Add([]byte(`{"rank":1,"extra":true}`))
	f.Add([]byte(`[`))
	l := launch{Rank: 0, WorldSize: 2, JobID: "j", Attempt: 1}
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := decodeHello(bytes.NewReader(b))
		if err != nil {
			return
		}
		if h.check(l) == nil && (h.Rank != 1 || h.WorldSize != 2) {
			t.Fatalf("check accepted %+v", h)
		}
	})
}
