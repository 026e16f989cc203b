package gateway

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"strings"
	"sync/atomic"
)

// Policy names.
const (
	PolicyPrefixAffinity = "prefix-affinity" // gangway's default
	PolicyRoundRobin     = "round-robin"
	PolicyRandom         = "random"
	PolicyLeastRequest   = "least-request"
	PolicyPowerOfTwo     = "power-of-two"
	PolicyLoad           = "load"           // llm-d load-aware: queue + KV-usage scorers
	PolicyApproxPrefix   = "approx-prefix"  // llm-d approximate prefix scorer + load scorers
	PolicyPrecisePrefix  = "precise-prefix" // llm-d precise (KV-event) prefix scorer + load scorers
)

// PolicyNames lists every policy, default first.
func PolicyNames() []string {
	return []string{PolicyPrefixAffinity, PolicyRoundRobin, PolicyRandom, PolicyLeastRequest, PolicyPowerOfTwo, PolicyLoad, PolicyApproxPrefix, PolicyPrecisePrefix}
}

// NewPolicy returns the named policy.
func NewPolicy(name string) (Policy, error) {
	switch name {
	case "", PolicyPrefixAffinity:
		return NewPrefixAffinity(), nil
	case PolicyRoundRobin:
		return &RoundRobin{}, nil
	case PolicyRandom:
		return Random{}, nil
	case PolicyLeastRequest:
		return LeastRequest{}, nil
	case PolicyPowerOfTwo:
		return PowerOfTwo{}, nil
	case PolicyLoad:
		return NewScorer(PolicyLoad, 0, false), nil
	case PolicyApproxPrefix:
		return NewScorer(PolicyApproxPrefix, 3, false), nil
	case PolicyPrecisePrefix:
		return NewScorer(PolicyPrecisePrefix, 3, true), nil
	}
	return nil, fmt.Errorf("unknown policy %q (want one of %s)", name, strings.Join(PolicyNames(), ", "))
}

// RoundRobin cycles through the candidates.
type RoundRobin struct{ next atomic.Uint64 }

func (*RoundRobin) Name() string { return PolicyRoundRobin }
func (p *RoundRobin) Pick(_ *Request, cands []Candidate, _ *rand.Rand) int {
	return int((p.next.Add(1) - 1) % uint64(len(cands)))
}

// Random picks uniformly.
type Random struct{}

func (Random) Name() string { return PolicyRandom }
func (Random) Pick(_ *Request, cands []Candidate, rng *rand.Rand) int {
	return rng.IntN(len(cands))
}

// LeastRequest picks the fewest in-flight requests (gateway-counted),
// ties at random.
type LeastRequest struct{}

func (LeastRequest) Name() string { return PolicyLeastRequest }
func (LeastRequest) Pick(_ *Request, cands []Candidate, rng *rand.Rand) int {
	return argmin(cands, rng, func(c *Candidate) float64 { return float64(c.InFlight) })
}

// PowerOfTwo samples two candidates and keeps the one with fewer
// in-flight requests.
type PowerOfTwo struct{}

func (PowerOfTwo) Name() string { return PolicyPowerOfTwo }
func (PowerOfTwo) Pick(_ *Request, cands []Candidate, rng *rand.Rand) int {
	if len(cands) == 1 {
		return 0
	}
	a := rng.IntN(len(cands))
	b := rng.IntN(len(cands) - 1)
	if b >= a {
		b++
	}
	if cands[b].InFlight < cands[a].InFlight {
		return b
	}
	return a
}

// argmin returns the index of the smallest f, ties broken at random.
func argmin(cands []Candidate, rng *rand.Rand, f func(*Candidate) float64) int {
	best, n := 0, 0
	bv := math.Inf(1)
	for i := range cands {
		v := f(&cands[i])
		switch {
		case v < bv:
			best, bv, n = i, v, 1
		case v == bv:
			n++
			if rng.IntN(n) == 0 {
				best = i
			}
		}
	}
	return best
}

// Scorer is llm-d's scheduler as its guides configure it: a weighted sum
// of scorers, each in [0, 1], and the highest total wins (ties at
// random). Queue and KV-usage scores read the engines' scraped metrics,
// so they are as stale as the scrape. The prefix score is the share of
// the prompt's blocks found: in the router's own index (approximate:
// blocks are recorded when a request is routed and forgotten only by a
// fixed-size LRU, 31,250 blocks per server and 256 blocks matched at
// most, llm-d's defaults) or in the engines' real caches (precise: what
// vLLM's KV events report).
type Scorer struct {
	name                            string
	prefixW, queueW, kvW            float64
	precise                         bool
	indexBlocksPerServer, maxBlocks int
}

// NewScorer returns llm-d's weighting: prefix prefixW (0 for none),
// queue 2, KV usage 2.
func NewScorer(name string, prefixW float64, precise bool) *Scorer {
	return &Scorer{name: name, prefixW: prefixW, queueW: 2, kvW: 2, precise: precise, indexBlocksPerServer: 31250, maxBlocks: 256}
}

func (s *Scorer) Name() string     { return s.name }
func (s *Scorer) UsesOracle() bool { return s.precise && s.prefixW > 0 }

// IndexLimits implements Indexed for the approximate variant; precise
// and load-only scorers keep no index.
func (s *Scorer) IndexLimits(Capacity) (int, int) {
	if s.prefixW == 0 || s.precise {
		return 0, 0
	}
	return s.indexBlocksPerServer, s.maxBlocks
}

func (s *Scorer) Pick(req *Request, cands []Candidate, rng *rand.Rand) int {
	minQ, maxQ := math.MaxInt, 0
	for _, c := range cands {
		minQ = min(minQ, c.Engine.Waiting)
		maxQ = max(maxQ, c.Engine.Waiting)
	}
	blocks := len(req.Hashes)
	if !s.precise {
		blocks = min(blocks, s.maxBlocks)
	}
	best, bestScore, n := 0, math.Inf(-1), 0
	for i, c := range cands {
		var score float64
		if s.prefixW > 0 && blocks > 0 {
			hit := c.IndexHit
			if s.precise {
				hit = c.CachedHit
			}
			score += s.prefixW * float64(hit) / float64(blocks)
		}
		q := 1.0
		if maxQ > minQ {
			q = float64(maxQ-c.Engine.Waiting) / float64(maxQ-minQ)
		}
		score += s.queueW*q + s.kvW*(1-c.Engine.KVUsage)
		switch {
		case score > bestScore:
			best, bestScore, n = i, score, 1
		case score == bestScore:
			n++
			if rng.IntN(n) == 0 {
				best = i
			}
		}
	}
	return best
}

// PrefixAffinity is gangway's default policy. For each replica it
// estimates the request's time to first token as the prefill already
// queued there (gateway-counted, corrected upward by the engine's own
// waiting queue when other clients load it) plus this prompt's prefill
// after the blocks the prefix index places there, priced by the replica's
// roofline. It picks the lowest estimate among replicas the request
// would not saturate: the KV the in-flight requests may grow to, plus
// this one, must fit the replica's KV cache, and a sequence slot must be
// free. When every replica is saturated it picks the least loaded
// relative to capacity. The index remembers, per replica, as many blocks
// as that replica's KV cache holds, so it forgets what the engine would
// have evicted.
type PrefixAffinity struct {
	// MissWeight charges a cache miss's extra prefill (over the best
	// replica's) this many times more on top of the TTFT estimate: the
	// recomputation delays the requests that queue behind it and pushes
	// other prefixes out of that replica's cache.
	MissWeight float64
}

// DefaultMissWeight charges a cache miss's extra prefill three times in
// all: once in the request's own TTFT, and twice more for the requests it
// delays on that replica and the cached prefix it pushes out. With 1 the
// policy leaves a conversation's replica too readily on multi-turn
// traffic (see the routing benchmark); above 3 it stops balancing.
const DefaultMissWeight = 2.0

// NewPrefixAffinity returns the policy with its default miss weight.
func NewPrefixAffinity() *PrefixAffinity { return &PrefixAffinity{MissWeight: DefaultMissWeight} }

func (*PrefixAffinity) Name() string { return PolicyPrefixAffinity }

// IndexLimits sizes each replica's index to its KV cache.
func (*PrefixAffinity) IndexLimits(c Capacity) (int, int) {
	return int(c.KVTokens / BlockSize), 0
}

// EstimateTTFT is the policy's estimate, in seconds, of req's time to
// first token on c; saturated says the request would overflow c.
func (p *PrefixAffinity) EstimateTTFT(req *Request, c *Candidate) (ttft float64, saturated bool) {
	own := p.ownPrefill(req, c)
	queued := c.PendingPrefill
	// Requests the engine holds in its waiting queue beyond those this
	// gateway knows to be prefilling came from elsewhere; price each like
	// the average prefill this gateway queued there, or like this one.
	if extra := c.Engine.Waiting - c.Prefilling; extra > 0 {
		avg := own
		if c.Prefilling > 0 {
			avg = c.PendingPrefill / float64(c.Prefilling)
		}
		queued += float64(extra) * avg
	}
	return queued + own, Overflows(req, c)
}

func (*PrefixAffinity) ownPrefill(req *Request, c *Candidate) float64 {
	cached := min(c.IndexHit*BlockSize, max(req.PromptTokens-1, 0))
	return c.Capacity.PrefillSeconds(cached, req.PromptTokens-cached)
}

func (p *PrefixAffinity) Pick(req *Request, cands []Candidate, rng *rand.Rand) int {
	type est struct {
		i    int
		ttft float64
		sat  bool
		load float64
	}
	ests := make([]est, len(cands))
	anyFree := false
	bestOwn := math.Inf(1)
	owns := make([]float64, len(cands))
	for i := range cands {
		owns[i] = p.ownPrefill(req, &cands[i])
		bestOwn = math.Min(bestOwn, owns[i])
	}
	for i := range cands {
		c := &cands[i]
		ttft, sat := p.EstimateTTFT(req, c)
		ttft += p.MissWeight * (owns[i] - bestOwn)
		load := math.Inf(1)
		if c.Capacity.KVTokens > 0 {
			load = float64(c.InFlightTokens) / float64(c.Capacity.KVTokens)
		}
		ests[i] = est{i, ttft, sat, load}
		anyFree = anyFree || !sat
	}
	if anyFree {
		ests = filter(ests, func(e est) bool { return !e.sat })
		sort.SliceStable(ests, func(a, b int) bool { return ests[a].ttft < ests[b].ttft })
	} else {
		sort.SliceStable(ests, func(a, b int) bool { return ests[a].load+ests[a].ttft < ests[b].load+ests[b].ttft })
	}
	// Among near-ties (within 1 ms) prefer the least in-flight, then random.
	n := 1
	for n < len(ests) && ests[n].ttft-ests[0].ttft < 1e-3 && ests[n].sat == ests[0].sat {
		n++
	}
	if n == 1 {
		return ests[0].i
	}
	sub := make([]Candidate, n)
	for k := range n {
		sub[k] = cands[ests[k].i]
	}
	return ests[LeastRequest{}.Pick(req, sub, rng)].i
}

func filter[T any](s []T, keep func(T) bool) []T {
	out := s[:0]
	for _, v := range s {
		if keep(v) {
			out = append(out, v)
		}
	}
	return out
}
