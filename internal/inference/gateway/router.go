package gateway

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/gangway/gangway/internal/hardware"
	"github.com/gangway/gangway/internal/inference/openai"
)

// ErrNoReplica is returned by Pick when no replica is left to try.
var ErrNoReplica = errors.New("gateway: no replica available")

// ErrSaturated is returned by Pick, when the router holds what does not
// fit (RouterOptions.HoldWhenSaturated), if the request would overflow
// every replica it could go to. Nothing is charged; the caller may try
// again once Freed's channel closes.
var ErrSaturated = errors.New("gateway: every replica is saturated")

// BlockSize is the number of tokens per prompt block the router hashes
// and indexes: vLLM's default KV block size. The index is the router's
// own; engines may use other block sizes.
const BlockSize = 16

// Capacity is what a replica can hold and how fast it prefills: the
// saturation point policies bound load with.
type Capacity struct {
	KVTokens   int64 // KV-cache tokens
	MaxNumSeqs int   // sequences the engine batches at most
	// Engine, when known, prices prefill with the roofline (attention
	// included); otherwise PrefillRate is used.
	Engine      *hardware.Config
	PrefillRate float64 // tokens/s of prefill at full batch
}

// DefaultCapacity is assumed for a replica whose hardware is unknown and
// whose metrics do not say: a Llama-3-8B on one H100.
var DefaultCapacity = CapacityFromConfig(mustConfig("Llama-3-8B", "H100", 1, "bf16"))

func mustConfig(model, gpu string, tp int, quant string) hardware.Config {
	c, err := hardware.NewConfig(model, gpu, tp, quant)
	if err != nil {
		panic(err)
	}
	return c
}

// CapacityFromConfig derives a replica's capacity from its engine config
// with internal/hardware's memory and roofline model.
func CapacityFromConfig(c hardware.Config) Capacity {
	c = c.WithDefaults()
	cp := c.Capacity()
	n := c.MaxNumBatchedTokens
	return Capacity{
		KVTokens:    cp.KVTokens,
		MaxNumSeqs:  c.MaxNumSeqs,
		Engine:      &c,
		PrefillRate: float64(n) / c.PrefillTime(0, n).Seconds(),
	}
}

// PrefillSeconds estimates the prefill of n new tokens after cached ones.
func (c Capacity) PrefillSeconds(cached, n int) float64 {
	if n <= 0 {
		return 0
	}
	if c.Engine != nil {
		return c.Engine.PrefillTime(cached, n).Seconds()
	}
	rate := c.PrefillRate
	if rate <= 0 {
		rate = DefaultCapacity.PrefillRate
	}
	return float64(n) / rate
}

// Replica is one engine endpoint as the router knows it.
type Replica struct {
	ID       string
	Capacity Capacity
}

// EngineLoad is what a replica's /metrics last said.
type EngineLoad struct {
	At      time.Time // when scraped; zero means never
	Running int
	Waiting int
	KVUsage float64 // 0..1
}

// Request is what the router knows of a request.
type Request struct {
	Hashes       []uint64 // chained hashes of the prompt's full blocks (openai.BlockHashes)
	PromptTokens int
	MaxTokens    int // expected output tokens; bounds the KV the request will hold
}

// Candidate is one replica's state as a Policy sees it at decision time.
type Candidate struct {
	ID       string
	Capacity Capacity

	// Counted by the gateway, updated at decision time.
	InFlight       int     // requests routed here and not finished
	InFlightTokens int64   // Σ uncached prompt + max output tokens of those: the KV they will allocate
	Prefilling     int     // of which not yet at their first token
	PendingPrefill float64 // estimated seconds of prefill queued for those
	// Reported by the engine (stale by up to the scrape interval).
	Engine EngineLoad

	IndexHit  int // leading prompt blocks the router's prefix index places here
	CachedHit int // leading prompt blocks the engine really caches (oracle), -1 if unknown
}

// Policy picks a replica for a request. Pick gets at least one candidate
// and returns an index into cands; rng is seeded by the router. Policies
// keep no per-replica state of their own beyond counters.
type Policy interface {
	Name() string
	Pick(req *Request, cands []Candidate, rng *rand.Rand) int
}

// Indexed is implemented by policies that use the router's prefix index.
// IndexLimits says how many blocks to remember per replica and how many
// leading blocks of a prompt to match at most.
type Indexed interface {
	IndexLimits(c Capacity) (blocks, maxMatch int)
}

// UsesOracle is implemented by policies that read the engines' real
// caches (CacheOracle), as a KV-event-fed router would.
type UsesOracle interface {
	UsesOracle() bool
}

// CacheOracle reports how many leading blocks of hashes a replica's KV
// cache holds right now. The virtual-time benchmark implements it from
// the engines; a production gateway would feed it from KV-cache events.
type CacheOracle interface {
	CachedPrefixBlocks(replica string, hashes []uint64) int
}

// RouterOptions tunes a Router. Zero fields take defaults.
type RouterOptions struct {
	Seed             uint64        // seeds the policy's randomness
	EjectAfter       int           // consecutive failures that eject a replica; default 3
	EjectFor         time.Duration // first ejection; doubles each time, up to 32×; default 5s
	MaxEjectFraction float64       // never eject more than this share of replicas; default 0.5
	Oracle           CacheOracle   // required by policies that implement UsesOracle
	// HoldWhenSaturated makes Pick answer ErrSaturated rather than route
	// a request that every candidate replica is too full for — unless one
	// of them has nothing in flight, which always takes it. Too full: the
	// request Overflows it, or its pending prefill plus the request's own
	// would exceed MaxPendingPrefill (when positive): past that point a
	// request waits longer in that engine's queue than its TTFT allows,
	// and is better held where a replica that frees up or starts can
	// take it.
	HoldWhenSaturated bool
	MaxPendingPrefill time.Duration
}

// Router decides which replica serves each request. It is safe for
// concurrent use.
type Router struct {
	policy  Policy
	opts    RouterOptions
	indexed Indexed // policy as Indexed, or nil
	oracle  bool

	mu       sync.Mutex // guards the fields below and every replica's state
	rng      *rand.Rand
	replicas []*replica // sorted by ID
	byID     map[string]*replica
	stats    RouterStats
	cands    []Candidate   // scratch
	freed    chan struct{} // closed when capacity frees; nil until Freed is called
}

// RouterStats are the router's cumulative counters.
type RouterStats struct {
	Decisions   int64
	Blocks      int64 // prompt blocks of routed requests
	HitBlocks   int64 // of which the chosen replica was believed to cache
	Ejections   int64
	NoReplica   int64
	Retries     int64 // picks that excluded an already-tried replica
	Failures    int64
	FirstTokens int64
	Saturated   int64 // picks refused with ErrSaturated
}

type replica struct {
	Replica
	inFlight       int
	inFlightTokens int64
	prefilling     int
	pendingPrefill float64
	engine         EngineLoad
	healthy        bool // false while the last active check failed

	failures     int // consecutive
	ejections    int
	ejectedUntil time.Time

	index *lruSet // prefix index, nil unless the policy is Indexed
}

// NewRouter returns a router with no replicas.
func NewRouter(p Policy, opts RouterOptions) (*Router, error) {
	if opts.EjectAfter == 0 {
		opts.EjectAfter = 3
	}
	if opts.EjectFor == 0 {
		opts.EjectFor = 5 * time.Second
	}
	if opts.MaxEjectFraction == 0 {
		opts.MaxEjectFraction = 0.5
	}
	r := &Router{
		policy: p,
		opts:   opts,
		rng:    rand.New(rand.NewPCG(opts.Seed, opts.Seed^0x5851f42d4c957f2d)),
		byID:   map[string]*replica{},
	}
	if ix, ok := p.(Indexed); ok {
		r.indexed = ix
	}
	if o, ok := p.(UsesOracle); ok && o.UsesOracle() {
		if opts.Oracle == nil {
			return nil, fmt.Errorf("policy %s needs a cache oracle (KV events), which this router has none of", p.Name())
		}
		r.oracle = true
	}
	return r, nil
}

// Policy returns the router's policy.
func (r *Router) Policy() Policy { return r.policy }

// SetReplicas replaces the replica set. Replicas that stay keep their
// counters and prefix index; a changed capacity resizes the index.
func (r *Router) SetReplicas(reps []Replica) {
	r.mu.Lock()
	defer r.mu.Unlock()
	next := make([]*replica, 0, len(reps))
	byID := make(map[string]*replica, len(reps))
	for _, rep := range reps {
		if _, dup := byID[rep.ID]; dup {
			continue
		}
		old, ok := r.byID[rep.ID]
		if !ok {
			old = &replica{healthy: true}
		}
		old.Replica = rep
		if r.indexed != nil {
			switch blocks, _ := r.indexed.IndexLimits(rep.Capacity); {
			case blocks <= 0:
				old.index = nil
			case old.index == nil:
				old.index = newLRUSet(blocks)
			default:
				old.index.resize(blocks)
			}
		}
		next = append(next, old)
		byID[rep.ID] = old
	}
	slices.SortFunc(next, func(a, b *replica) int {
		if a.ID < b.ID {
			return -1
		}
		if a.ID > b.ID {
			return 1
		}
		return 0
	})
	r.replicas, r.byID = next, byID
	r.signalLocked()
}

// Replicas lists the current replica IDs, sorted.
func (r *Router) Replicas() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]string, len(r.replicas))
	for i, rep := range r.replicas {
		out[i] = rep.ID
	}
	return out
}

// Observe records a replica's scraped engine load; healthy is whether
// the scrape (an active health check) succeeded.
func (r *Router) Observe(id string, l EngineLoad, healthy bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if rep, ok := r.byID[id]; ok {
		if healthy && !rep.healthy {
			r.signalLocked()
		}
		rep.healthy = healthy
		if healthy {
			rep.engine = l
		}
	}
}

// Freed returns a channel that is closed the next time capacity may have
// freed: a request ends, replicas change, or one recovers. A caller that
// got ErrSaturated takes the channel before trying again, so that a
// release between its try and its wait is not missed.
func (r *Router) Freed() <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.freed == nil {
		r.freed = make(chan struct{})
	}
	return r.freed
}

func (r *Router) signalLocked() {
	if r.freed != nil {
		close(r.freed)
		r.freed = nil
	}
}

// Stats returns the router's counters.
func (r *Router) Stats() RouterStats {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.stats
}

// Snapshot returns every replica's state as a policy would see it for a
// request with no prompt blocks.
func (r *Router) Snapshot(now time.Time) []Candidate {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]Candidate, 0, len(r.replicas))
	for _, rep := range r.replicas {
		out = append(out, rep.candidate())
	}
	return out
}

// Ejected reports whether replica id is ejected or failed its last check.
func (r *Router) Ejected(id string, now time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	rep, ok := r.byID[id]
	return ok && (!rep.healthy || now.Before(rep.ejectedUntil))
}

func (rep *replica) candidate() Candidate {
	return Candidate{
		ID: rep.ID, Capacity: rep.Capacity,
		InFlight: rep.inFlight, InFlightTokens: rep.inFlightTokens,
		Prefilling: rep.prefilling, PendingPrefill: rep.pendingPrefill,
		Engine: rep.engine, CachedHit: -1,
	}
}

// Pick chooses a replica for req at time now, skipping those in tried,
// and charges the request to it: in-flight counts and tokens, estimated
// prefill, and (for indexed policies) the prompt's blocks in the prefix
// index. The caller must end the ticket with Done.
func (r *Router) Pick(now time.Time, req *Request, tried []string) (*Ticket, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(tried) > 0 {
		r.stats.Retries++
	}
	// Healthy, not ejected, not tried; if that leaves none, fall back to
	// the untried ones regardless of health (better a chance than a 503).
	var pool []*replica
	for pass := 0; pass < 2 && len(pool) == 0; pass++ {
		for _, rep := range r.replicas {
			if slices.Contains(tried, rep.ID) {
				continue
			}
			if pass == 0 && (!rep.healthy || now.Before(rep.ejectedUntil)) {
				continue
			}
			pool = append(pool, rep)
		}
	}
	if len(pool) == 0 {
		r.stats.NoReplica++
		return nil, ErrNoReplica
	}
	maxMatch := len(req.Hashes)
	if r.indexed != nil {
		_, m := r.indexed.IndexLimits(pool[0].Capacity)
		if m > 0 {
			maxMatch = min(maxMatch, m)
		}
	}
	hashes := req.Hashes[:maxMatch]
	r.cands = r.cands[:0]
	for _, rep := range pool {
		c := rep.candidate()
		if rep.index != nil {
			c.IndexHit = rep.index.prefixLen(hashes)
		}
		if r.oracle {
			c.CachedHit = r.opts.Oracle.CachedPrefixBlocks(rep.ID, req.Hashes)
		}
		r.cands = append(r.cands, c)
	}
	if r.opts.HoldWhenSaturated && !r.anyFits(req, r.cands) {
		r.stats.Saturated++
		return nil, ErrSaturated
	}
	i := r.policy.Pick(req, r.cands, r.rng)
	if i < 0 || i >= len(pool) {
		i = 0
	}
	rep, c := pool[i], r.cands[i]

	hit := c.IndexHit
	if r.oracle {
		hit = c.CachedHit
	}
	cached := min(hit*BlockSize, max(req.PromptTokens-1, 0))
	t := &Ticket{
		r: r, rep: rep, Replica: rep.ID, HitBlocks: hit,
		tokens:  int64(req.PromptTokens - cached + req.MaxTokens),
		prefill: rep.Capacity.PrefillSeconds(cached, req.PromptTokens-cached),
		Start:   now,
	}
	rep.inFlight++
	rep.prefilling++
	rep.inFlightTokens += t.tokens
	rep.pendingPrefill += t.prefill
	if rep.index != nil {
		rep.index.addChain(hashes)
	}
	r.stats.Decisions++
	r.stats.Blocks += int64(len(req.Hashes))
	r.stats.HitBlocks += int64(hit)
	return t, nil
}

// Overflows reports whether req would saturate c: the KV its tokens
// would allocate there (its prompt after the blocks the index places
// there, plus its output) on top of what c's in-flight requests may
// grow to exceeds c's KV cache, or c's sequence slots are all taken.
func Overflows(req *Request, c *Candidate) bool {
	cached := min(c.IndexHit*BlockSize, max(req.PromptTokens-1, 0))
	kvNeed := c.InFlightTokens + int64(req.PromptTokens-cached+req.MaxTokens)
	return (c.Capacity.KVTokens > 0 && kvNeed > c.Capacity.KVTokens) ||
		(c.Capacity.MaxNumSeqs > 0 && c.InFlight >= c.Capacity.MaxNumSeqs)
}

// anyFits: some candidate has room for req, or has nothing in flight
// (a request larger than a whole replica still goes somewhere).
func (r *Router) anyFits(req *Request, cands []Candidate) bool {
	budget := r.opts.MaxPendingPrefill.Seconds()
	for i := range cands {
		c := &cands[i]
		if c.InFlight == 0 {
			return true
		}
		if Overflows(req, c) {
			continue
		}
		if budget > 0 {
			cached := min(c.IndexHit*BlockSize, max(req.PromptTokens-1, 0))
			if c.PendingPrefill+c.Capacity.PrefillSeconds(cached, req.PromptTokens-cached) > budget {
				continue
			}
		}
		return true
	}
	return false
}

// Ticket is one routing decision. Its methods are safe to call from the
// request's goroutine while others route.
type Ticket struct {
	Replica   string    // the chosen replica's ID
	HitBlocks int       // prompt blocks the policy believed cached there
	Start     time.Time // decision time

	r         *Router
	rep       *replica
	tokens    int64
	prefill   float64
	firstDone bool
	done      bool
}

// FirstToken records that the replica started answering: the request's
// prefill is no longer queued there.
func (t *Ticket) FirstToken(now time.Time) {
	t.r.mu.Lock()
	defer t.r.mu.Unlock()
	t.firstLocked()
}

func (t *Ticket) firstLocked() {
	if t.firstDone {
		return
	}
	t.firstDone = true
	t.rep.prefilling--
	t.rep.pendingPrefill = math.Max(0, t.rep.pendingPrefill-t.prefill)
	t.r.stats.FirstTokens++
	t.r.signalLocked()
}

// Outcome is how a routed request ended.
type Outcome int

const (
	// Success: the replica answered (whatever the HTTP status).
	Success Outcome = iota
	// Failure: the replica failed (connection error, 5xx): counts toward
	// ejection.
	Failure
	// Canceled: the client went away; says nothing about the replica.
	Canceled
)

// Done releases the ticket's charge on its replica. Calling it twice
// does nothing.
func (t *Ticket) Done(now time.Time, o Outcome) {
	r := t.r
	r.mu.Lock()
	defer r.mu.Unlock()
	if t.done {
		return
	}
	t.firstLocked()
	t.done = true
	rep := t.rep
	rep.inFlight--
	rep.inFlightTokens -= t.tokens
	r.signalLocked()
	switch o {
	case Success:
		rep.failures = 0
	case Failure:
		r.stats.Failures++
		rep.failures++
		if rep.failures >= r.opts.EjectAfter && r.canEjectLocked(now) {
			d := r.opts.EjectFor << min(rep.ejections, 5)
			rep.ejectedUntil = now.Add(d)
			rep.ejections++
			rep.failures = 0
			r.stats.Ejections++
		}
	}
}

func (r *Router) canEjectLocked(now time.Time) bool {
	ejected := 0
	for _, rep := range r.replicas {
		if now.Before(rep.ejectedUntil) {
			ejected++
		}
	}
	return float64(ejected+1) <= r.opts.MaxEjectFraction*float64(len(r.replicas))
}

// RequestFor builds the router's view of a prompt from its tokens.
func RequestFor(tokens []uint32, maxTokens int) *Request {
	return &Request{
		Hashes:       openai.BlockHashes(tokens, BlockSize),
		PromptTokens: len(tokens),
		MaxTokens:    maxTokens,
	}
}

// BlockBytes is the prompt text one block of the prefix index covers
// when the gateway hashes text: BlockSize tokens of the shared
// tokenizer (openai.BytesPerToken bytes each).
const BlockBytes = BlockSize * openai.BytesPerToken

// RequestForText builds the router's view of a prompt from its text,
// with AppendTextHashes into hashes[:0] (which the request keeps).
func RequestForText(dst *Request, hashes []uint64, text []byte, maxTokens int) {
	*dst = Request{
		Hashes:       AppendTextHashes(hashes[:0], text),
		PromptTokens: openai.CountTokens(len(text)),
		MaxTokens:    maxTokens,
	}
}

// AppendTextHashes appends the chained hashes of text's full
// BlockBytes-byte blocks: hash i covers text[:(i+1)·BlockBytes], so
// equal hashes mean equal prefixes, as with openai.BlockHashes over
// tokens (which is a different function: the gateway has no tokenizer
// and hashes the text itself, 16 bytes per multiply). A trailing partial
// block gets no hash.
func AppendTextHashes(dst []uint64, text []byte) []uint64 {
	h := uint64(0x243f6a8885a308d3)
	for len(text) >= BlockBytes {
		h = hashTextBlock(h, text[:BlockBytes])
		dst = append(dst, h)
		text = text[BlockBytes:]
	}
	return dst
}

// hashTextBlock chains one 64-byte block onto prev with wyhash's
// multiply-fold mixing.
func hashTextBlock(prev uint64, b []byte) uint64 {
	const (
		k0 = 0xa0761d6478bd642f
		k1 = 0xe7037ed1a0b428db
		k2 = 0x8ebc6af09c88c6e3
		k3 = 0x589965cc75374cc3
	)
	_ = b[63]
	le := binary.LittleEndian
	a := mum(le.Uint64(b[0:])^k0, le.Uint64(b[8:])^prev)
	c := mum(le.Uint64(b[16:])^k1, le.Uint64(b[24:])^k2)
	d := mum(le.Uint64(b[32:])^k2, le.Uint64(b[40:])^k3)
	e := mum(le.Uint64(b[48:])^k3, le.Uint64(b[56:])^k1)
	return mum(a^c^k1, d^e^prev^k0)
}

// mum folds the 128-bit product of a and b.
func mum(a, b uint64) uint64 {
	hi, lo := bits.Mul64(a, b)
	return hi ^ lo
}
