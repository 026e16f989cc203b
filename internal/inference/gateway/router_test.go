package gateway

import (
	"bytes"
	"container/list"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

var t0 = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

func testCapacity() Capacity { return CapacityFromConfig(mustConfig("Qwen3-32B", "H100", 2, "bf16")) }

func newTestRouter(t *testing.T, p Policy, ids ...string) *Router {
	t.Helper()
	r, err := NewRouter(p, RouterOptions{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	var reps []Replica
	for _, id := range ids {
		reps = append(reps, Replica{ID: id, Capacity: testCapacity()})
	}
	r.SetReplicas(reps)
	return r
}

func prompt(prefix, n int) []uint32 {
	out := make([]uint32, n)
	for i := range out {
		out[i] = uint32(prefix*1_000_000 + i)
	}
	return out
}

func TestSimplePolicies(t *testing.T) {
	cands := []Candidate{{ID: "a", InFlight: 3}, {ID: "b", InFlight: 1}, {ID: "c", InFlight: 2}}
	rng := rand.New(rand.NewPCG(1, 2))
	rr := &RoundRobin{}
	var got []int
	for range 4 {
		got = append(got, rr.Pick(nil, cands, rng))
	}
	if d := cmp.Diff([]int{0, 1, 2, 0}, got); d != "" {
		t.Errorf("round-robin (-want +got):\n%s", d)
	}
	if i := (LeastRequest{}).Pick(nil, cands, rng); i != 1 {
		t.Errorf("least-request picked %d, want 1", i)
	}
	for range 50 {
		if i := (PowerOfTwo{}).Pick(nil, cands, rng); i == 0 {
			t.Fatal("power-of-two picked the most loaded of three: it never can")
		}
	}
}

func TestPrefixAffinityFollowsCache(t *testing.T) {
	r := newTestRouter(t, NewPrefixAffinity(), "a", "b", "c", "d")
	req := RequestFor(prompt(1, 6000), 100)
	first, err := r.Pick(t0, req, nil)
	if err != nil {
		t.Fatal(err)
	}
	first.Done(t0.Add(time.Second), Success)
	for i := range 5 {
		tk, _ := r.Pick(t0.Add(time.Duration(i+2)*time.Second), RequestFor(append(prompt(1, 6000), prompt(9+i, 50)...), 100), nil)
		if tk.Replica != first.Replica {
			t.Fatalf("request %d with the same 6000-token prefix went to %s, not %s", i, tk.Replica, first.Replica)
		}
		if tk.HitBlocks != 6000/BlockSize {
			t.Errorf("hit blocks = %d, want %d", tk.HitBlocks, 6000/BlockSize)
		}
		tk.Done(t0.Add(time.Duration(i+3)*time.Second), Success)
	}
}

func TestPrefixAffinityBoundedByLoad(t *testing.T) {
	r := newTestRouter(t, NewPrefixAffinity(), "a", "b")
	warm, _ := r.Pick(t0, RequestFor(prompt(1, 2000), 10), nil)
	warm.Done(t0, Success)
	home, other := warm.Replica, "a"
	if home == "a" {
		other = "b"
	}
	// Queue long unrelated prefills on the home replica only.
	var held []*Ticket
	for i := range 4 {
		tk, _ := r.Pick(t0, RequestFor(prompt(100+i, 8000), 10), []string{other})
		held = append(held, tk)
	}
	// The home replica now has ~2 s of prefill queued; recomputing 2000
	// tokens elsewhere (~0.1 s) is cheaper than waiting for the cache.
	tk, _ := r.Pick(t0, RequestFor(prompt(1, 2000), 10), nil)
	if tk.Replica == home {
		t.Errorf("request stuck to its cached replica behind %d long prefills", len(held))
	}
	// Once the queue drains it comes back to the cache.
	for _, h := range held {
		h.Done(t0, Success)
	}
	tk.Done(t0, Success)
	back, _ := r.Pick(t0, RequestFor(prompt(1, 2000), 10), nil)
	if back.Replica != home && back.Replica != tk.Replica {
		t.Errorf("went to %s, want a replica that caches the prefix", back.Replica)
	}
}

func TestPrefixAffinityRespectsKVCapacity(t *testing.T) {
	r := newTestRouter(t, NewPrefixAffinity(), "a", "b")
	cp := testCapacity()
	// Fill replica a's KV with in-flight tokens.
	var held []*Ticket
	for r.Snapshot(t0)[0].InFlightTokens < cp.KVTokens-10_000 {
		tk, _ := r.Pick(t0, RequestFor(prompt(len(held), 100), 30_000), []string{"b"})
		held = append(held, tk)
	}
	// A request whose prefix a caches still goes to b: a has no room.
	tk, _ := r.Pick(t0, RequestFor(prompt(0, 100), 20_000), nil)
	if tk.Replica != "b" {
		t.Errorf("picked %s with %d of %d KV tokens in flight there", tk.Replica, r.Snapshot(t0)[0].InFlightTokens, cp.KVTokens)
	}
}

func TestRouterCountersReleaseOnDone(t *testing.T) {
	r := newTestRouter(t, &RoundRobin{}, "a")
	tk, _ := r.Pick(t0, RequestFor(prompt(1, 1000), 50), nil)
	c := r.Snapshot(t0)[0]
	if c.InFlight != 1 || c.InFlightTokens != 1050 || c.Prefilling != 1 || c.PendingPrefill <= 0 {
		t.Fatalf("after pick: %+v", c)
	}
	tk.FirstToken(t0)
	if c := r.Snapshot(t0)[0]; c.Prefilling != 0 || c.PendingPrefill != 0 || c.InFlight != 1 {
		t.Fatalf("after first token: %+v", c)
	}
	tk.Done(t0, Success)
	tk.Done(t0, Success) // idempotent
	if c := r.Snapshot(t0)[0]; c.InFlight != 0 || c.InFlightTokens != 0 {
		t.Fatalf("after done: %+v", c)
	}
}

func TestEjectionAndRecovery(t *testing.T) {
	r := newTestRouter(t, &RoundRobin{}, "a", "b")
	for range 3 {
		tk, _ := r.Pick(t0, RequestFor(prompt(1, 10), 1), []string{"b"})
		tk.Done(t0, Failure)
	}
	if !r.Ejected("a", t0) {
		t.Fatal("a not ejected after 3 consecutive failures")
	}
	for range 4 {
		tk, _ := r.Pick(t0.Add(time.Second), RequestFor(prompt(1, 10), 1), nil)
		if tk.Replica != "b" {
			t.Fatalf("routed to ejected replica %s", tk.Replica)
		}
		tk.Done(t0, Success)
	}
	// The last healthy replica is never ejected.
	for range 5 {
		tk, _ := r.Pick(t0, RequestFor(prompt(1, 10), 1), []string{"a"})
		tk.Done(t0, Failure)
	}
	if r.Ejected("b", t0.Add(time.Second)) {
		t.Error("ejected more than half the replicas")
	}
	// Ejection expires.
	if r.Ejected("a", t0.Add(10*time.Second)) {
		t.Error("a still ejected after its ejection time")
	}
	if got := r.Stats().Ejections; got != 1 {
		t.Errorf("ejections = %d, want 1", got)
	}
}

func TestPickSkipsTriedAndUnhealthy(t *testing.T) {
	r := newTestRouter(t, &RoundRobin{}, "a", "b", "c")
	r.Observe("c", EngineLoad{}, false)
	seen := map[string]bool{}
	var tried []string
	for range 2 {
		tk, err := r.Pick(t0, RequestFor(prompt(1, 10), 1), tried)
		if err != nil {
			t.Fatal(err)
		}
		seen[tk.Replica] = true
		tried = append(tried, tk.Replica)
	}
	if seen["c"] || !seen["a"] || !seen["b"] {
		t.Errorf("picked %v; want a and b, never the unhealthy c", seen)
	}
	// With a and b tried, the unhealthy c is better than nothing.
	tk, err := r.Pick(t0, RequestFor(prompt(1, 10), 1), tried)
	if err != nil || tk.Replica != "c" {
		t.Errorf("third pick = %v, %v; want c", tk, err)
	}
	if _, err := r.Pick(t0, RequestFor(prompt(1, 10), 1), []string{"a", "b", "c"}); err != ErrNoReplica {
		t.Errorf("all tried: err = %v, want ErrNoReplica", err)
	}
}

func TestPreciseNeedsOracle(t *testing.T) {
	p, _ := NewPolicy(PolicyPrecisePrefix)
	if _, err := NewRouter(p, RouterOptions{}); err == nil {
		t.Error("precise-prefix without an oracle should be refused")
	}
}

func TestLRUSetKeepsPrefixes(t *testing.T) {
	s := newLRUSet(10)
	a := []uint64{1, 2, 3, 4, 5, 6}
	b := []uint64{11, 12, 13, 14, 15, 16}
	s.addChain(a)
	s.addChain(b) // 12 blocks > 10: a's tail goes first
	if got := s.prefixLen(a); got != 4 {
		t.Errorf("a keeps %d leading blocks, want 4 (its last two evicted)", got)
	}
	if got := s.prefixLen(b); got != 6 {
		t.Errorf("b keeps %d, want 6", got)
	}
	s.resize(3)
	if s.len() != 3 || s.prefixLen(b) != 3 {
		t.Errorf("after resize: len %d, b prefix %d", s.len(), s.prefixLen(b))
	}
}

// The index evicts exactly as a linked-list LRU would, and its binary
// search for a chain's cached prefix agrees with a linear scan, on
// chains that share prefixes of random lengths.
func TestLRUSetMatchesAListLRU(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, capacity := range []int{1, 7, 64, 300} {
		s := newLRUSet(capacity)
		ref := list.New()
		elems := map[uint64]*list.Element{}
		var chains [][]uint64
		for step := range 3000 {
			// A new chain: a prefix of an earlier one, then new blocks.
			var c []uint64
			if len(chains) > 0 && rng.IntN(4) > 0 {
				old := chains[rng.IntN(len(chains))]
				c = append(c, old[:rng.IntN(len(old)+1)]...)
			}
			prev := uint64(step)
			if len(c) > 0 {
				prev = c[len(c)-1]
			}
			for range rng.IntN(20) {
				prev = prev*6364136223846793005 + 1442695040888963407
				c = append(c, prev)
			}
			if len(c) == 0 {
				continue
			}
			chains = append(chains, c)
			for _, probe := range []int{rng.IntN(len(chains)), len(chains) - 1} {
				q := chains[probe]
				lin := 0
				for lin < len(q) && elems[q[lin]] != nil {
					lin++
				}
				if got := s.prefixLen(q); got != lin {
					t.Fatalf("cap %d step %d: prefixLen %d, linear scan %d", capacity, step, got, lin)
				}
			}
			s.addChain(c)
			for i := len(c) - 1; i >= 0; i-- {
				if e := elems[c[i]]; e != nil {
					ref.MoveToFront(e)
				} else {
					elems[c[i]] = ref.PushFront(c[i])
				}
				for ref.Len() > capacity {
					delete(elems, ref.Remove(ref.Back()).(uint64))
				}
			}
			if step%700 == 699 {
				capacity = 1 + rng.IntN(2*capacity)
				s.resize(capacity)
				for ref.Len() > capacity {
					delete(elems, ref.Remove(ref.Back()).(uint64))
				}
			}
			if s.len() != ref.Len() {
				t.Fatalf("cap %d step %d: %d blocks, list LRU %d", capacity, step, s.len(), ref.Len())
			}
			for h := range elems {
				if !s.contains(h) {
					t.Fatalf("cap %d step %d: %x evicted early", capacity, step, h)
				}
			}
		}
		if len(s.slots) > s.cap+1 {
			t.Errorf("cap %d: %d slots", s.cap, len(s.slots))
		}
	}
}

func TestTextHashesChainPrefixes(t *testing.T) {
	text := []byte(strings.Repeat("0123456789abcdef", 40)) // 10 blocks
	h := AppendTextHashes(nil, text)
	if len(h) != 10 || len(AppendTextHashes(nil, text[:BlockBytes*3+63])) != 3 {
		t.Fatalf("%d hashes for 10 blocks; a partial block must get none", len(h))
	}
	other := bytes.Clone(text)
	other[4*BlockBytes+7] ^= 1
	o := AppendTextHashes(nil, other)
	if !slices.Equal(h[:4], o[:4]) {
		t.Error("equal leading blocks hash differently")
	}
	for i := 4; i < 10; i++ {
		if h[i] == o[i] {
			t.Errorf("block %d: same hash after a differing block", i)
		}
	}
	if slices.Equal(AppendTextHashes(nil, text[BlockBytes:2*BlockBytes]), h[1:2]) {
		t.Error("a block's hash does not depend on the blocks before it")
	}
	seen := map[uint64]bool{}
	for _, x := range h {
		if seen[x] {
			t.Error("repeated blocks of one prompt share a hash")
		}
		seen[x] = true
	}
}

func TestSetReplicasKeepsState(t *testing.T) {
	r := newTestRouter(t, NewPrefixAffinity(), "a", "b")
	tk, _ := r.Pick(t0, RequestFor(prompt(1, 1000), 10), nil)
	r.SetReplicas([]Replica{{ID: tk.Replica, Capacity: testCapacity()}, {ID: "z", Capacity: testCapacity()}})
	if got := r.Replicas(); len(got) != 2 || (got[0] != tk.Replica && got[1] != tk.Replica) {
		t.Fatalf("replicas = %v", got)
	}
	if c := r.Snapshot(t0); c[0].InFlight+c[1].InFlight != 1 {
		t.Errorf("in-flight lost across SetReplicas: %+v", c)
	}
	tk2, _ := r.Pick(t0, RequestFor(prompt(1, 1000), 10), nil)
	if tk2.Replica != tk.Replica || tk2.HitBlocks == 0 {
		t.Errorf("index lost across SetReplicas: %s hit %d", tk2.Replica, tk2.HitBlocks)
	}
}

func BenchmarkPrefixAffinityPick(b *testing.B) {
	r, _ := NewRouter(NewPrefixAffinity(), RouterOptions{Seed: 1})
	var reps []Replica
	for i := range 8 {
		reps = append(reps, Replica{ID: string(rune('a' + i)), Capacity: testCapacity()})
	}
	r.SetReplicas(reps)
	reqs := make([]*Request, 150)
	for i := range reqs {
		reqs[i] = RequestFor(prompt(i, 7200), 200)
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		tk, _ := r.Pick(t0, reqs[i%len(reqs)], nil)
		tk.Done(t0, Success)
	}
}
