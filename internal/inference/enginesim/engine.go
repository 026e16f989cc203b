package enginesim

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/gangway/gangway/internal/hardware"
	"github.com/gangway/gangway/internal/inference/openai"
	"github.com/gangway/gangway/internal/inference/promtext"
)

// Finish reasons, as the OpenAI API and vLLM's request_success metric name them.
const (
	FinishLength = "length" // max_tokens (or the context) reached
	FinishStop   = "stop"   // the simulated end-of-sequence token
	FinishAbort  = "abort"  // the client went away
)

// ErrTooLong is returned by Add for a request longer than MaxModelLen.
var ErrTooLong = errors.New("enginesim: request exceeds the maximum context length")

// Request is one generation request inside an Engine. The caller fills the
// exported fields before Add and reads results through the methods; the
// Engine owns the rest until the request finishes.
type Request struct {
	Prompt    []uint32 // prompt tokens; not modified
	MaxTokens int      // tokens to generate at most (at least 1)
	// StopAfter, when in (0, MaxTokens), ends generation with FinishStop
	// after that many tokens: the simulated end-of-sequence token.
	StopAfter int
	// PromptHashes may hold the block hashes of a prefix of Prompt,
	// computed once by the caller for prompts that share it; the Engine
	// completes the chain.
	PromptHashes []uint64
	// Seed varies the generated tokens between requests.
	Seed uint64
	// Tag is the caller's; the Engine never looks at it.
	Tag any

	out          []uint32
	hashes       []uint64 // chain over the full blocks of Prompt+out
	blocks       []*block
	numComputed  int // tokens whose KV is in blocks
	numHashed    int // leading blocks registered in the prefix cache
	cachedPrompt int // prompt tokens found in the prefix cache when first scheduled
	preemptions  int
	scheduled    bool
	running      bool
	finished     string

	arrival, firstToken, lastToken, finishedAt time.Duration
}

func (r *Request) total() int { return len(r.Prompt) + len(r.out) }

func (r *Request) token(i int) uint32 {
	if i < len(r.Prompt) {
		return r.Prompt[i]
	}
	return r.out[i-len(r.Prompt)]
}

// Output is the generated tokens so far. The slice is the Engine's; do not
// modify it.
func (r *Request) Output() []uint32 { return r.out }

// CachedPromptTokens is how many prompt tokens were found in the prefix
// cache when the request was first scheduled.
func (r *Request) CachedPromptTokens() int { return r.cachedPrompt }

// Preemptions counts how often the request was preempted and recomputed.
func (r *Request) Preemptions() int { return r.preemptions }

// FinishReason is "" while the request runs, else a Finish constant.
func (r *Request) FinishReason() string { return r.finished }

// Arrival, FirstToken and Finished are engine times (zero when not reached).
func (r *Request) Arrival() time.Duration    { return r.arrival }
func (r *Request) FirstToken() time.Duration { return r.firstToken }
func (r *Request) Finished() time.Duration   { return r.finishedAt }

// Event reports a token produced for a request by a step.
type Event struct {
	Req      *Request
	Token    uint32
	First    bool // the request's first token
	Finished bool // the request is done (Req.FinishReason says why)
}

// StepResult is what one call to Step did.
type StepResult struct {
	Duration      time.Duration // how long the step takes; 0 means there was nothing to do
	Tokens        int           // tokens computed
	PrefillTokens int           // of which prompt (or recomputed) tokens
	Seqs          int           // sequences in the batch
	Preempted     int           // requests preempted to make room
	// Events lists one entry per token produced, stamped at the end of
	// the step. The slice is reused by the next Step.
	Events []Event
}

// Load is the engine's queue and cache state, what /metrics exposes.
type Load struct {
	Running int
	Waiting int
	KVUsage float64 // share of KV blocks referenced, 0..1
}

// Stats are the engine's cumulative counters and latency histograms.
type Stats struct {
	PromptTokens     int64
	GenerationTokens int64
	PrefixQueries    int64 // prompt tokens looked up in the prefix cache
	PrefixHits       int64 // of which found
	Preemptions      int64
	Evictions        int64
	Steps            int64
	Finished         map[string]int64 // by finish reason

	TTFT, ITL, E2E, Queue *promtext.Histogram // seconds
}

// vLLM's histogram buckets (vllm/v1/metrics/loggers.py).
var (
	ttftBuckets = []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0}
	itlBuckets  = []float64{0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0}
	e2eBuckets  = []float64{0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0}
)

// Engine is a step-level model of vLLM's V1 scheduler and KV-cache
// manager on one replica. It reads no clock: every method takes the
// current engine time, and Step says how long the step it ran takes.
// It is not safe for concurrent use; the caller serialises calls.
type Engine struct {
	cfg   hardware.Config
	cap   hardware.Capacity
	pool  *blockPool
	stats Stats

	waiting []*Request // FCFS; preempted requests go back to the front
	running []*Request // in admission order; the last is preempted first

	sched  []scheduled // scratch for Step
	events []Event
	hbuf   []uint32
}

type scheduled struct {
	r      *Request
	ctx, n int
}

// NewEngine returns an idle engine for cfg (defaults applied). It fails
// when cfg is invalid or the model does not fit.
func NewEngine(cfg hardware.Config) (*Engine, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("engine config: %w", err)
	}
	cp := cfg.Capacity()
	if !cp.Fits {
		return nil, fmt.Errorf("engine config: %s on %d×%s (%s): %s", cfg.Model.Name, cfg.TP, cfg.GPU.Name, cfg.Quant, cp.Reason)
	}
	return &Engine{
		cfg:  cfg,
		cap:  cp,
		pool: newBlockPool(cp.KVBlocks, !cfg.DisablePrefixCaching),
		stats: Stats{
			Finished: map[string]int64{},
			TTFT:     promtext.NewHistogram(ttftBuckets),
			ITL:      promtext.NewHistogram(itlBuckets),
			E2E:      promtext.NewHistogram(e2eBuckets),
			Queue:    promtext.NewHistogram(e2eBuckets),
		},
	}, nil
}

// Config returns the engine's configuration with defaults applied.
func (e *Engine) Config() hardware.Config { return e.cfg }

// Capacity returns the engine's memory plan.
func (e *Engine) Capacity() hardware.Capacity { return e.cap }

// Stats returns the cumulative counters. The histograms are the engine's;
// read them under the same serialisation as Step.
func (e *Engine) Stats() Stats {
	s := e.stats
	s.Evictions = e.pool.evictions
	return s
}

// Load returns the current queue and cache state.
func (e *Engine) Load() Load {
	return Load{Running: len(e.running), Waiting: len(e.waiting), KVUsage: e.pool.usage()}
}

// HasWork reports whether a Step would do anything.
func (e *Engine) HasWork() bool { return len(e.running) > 0 || len(e.waiting) > 0 }

// CachedPrefixBlocks is how many leading blocks of hashes are in the
// prefix cache right now: what a KV-event-fed ("precise") router knows.
func (e *Engine) CachedPrefixBlocks(hashes []uint64) int { return e.pool.prefixLen(hashes) }

// Add queues r at time now. It fails if the prompt plus MaxTokens exceeds
// MaxModelLen or the request is malformed; r is then untouched.
func (e *Engine) Add(r *Request, now time.Duration) error {
	switch {
	case len(r.Prompt) == 0:
		return errors.New("enginesim: empty prompt")
	case r.MaxTokens < 1:
		return fmt.Errorf("enginesim: max_tokens %d, want at least 1", r.MaxTokens)
	case len(r.Prompt)+r.MaxTokens > e.cfg.MaxModelLen:
		return fmt.Errorf("%w: %d prompt + %d output tokens > %d", ErrTooLong, len(r.Prompt), r.MaxTokens, e.cfg.MaxModelLen)
	case r.running || r.finished != "" || r.scheduled:
		return errors.New("enginesim: request already added")
	}
	if len(r.PromptHashes) > len(r.Prompt)/e.cfg.BlockSize {
		return fmt.Errorf("enginesim: %d prompt hashes for %d prompt tokens", len(r.PromptHashes), len(r.Prompt))
	}
	r.hashes = openai.AppendBlockHashes(slices.Clip(r.PromptHashes), r.Prompt, e.cfg.BlockSize)
	r.arrival = now
	e.waiting = append(e.waiting, r)
	return nil
}

// Abort removes r (waiting or running) and frees its blocks. Aborting a
// finished request does nothing.
func (e *Engine) Abort(r *Request, now time.Duration) {
	if r.finished != "" {
		return
	}
	if i := slices.Index(e.waiting, r); i >= 0 {
		e.waiting = slices.Delete(e.waiting, i, i+1)
	}
	if i := slices.Index(e.running, r); i >= 0 {
		e.running = slices.Delete(e.running, i, i+1)
	}
	e.finish(r, FinishAbort, now)
}

func (e *Engine) finish(r *Request, reason string, now time.Duration) {
	r.finished = reason
	r.finishedAt = now
	r.running = false
	e.freeBlocks(r)
	e.stats.Finished[reason]++
	if reason != FinishAbort {
		e.stats.E2E.Observe((now - r.arrival).Seconds())
	}
}

// freeBlocks returns r's blocks, tail first, so that the end of a sequence
// is evicted before its (more shareable) beginning.
func (e *Engine) freeBlocks(r *Request) {
	slices.Reverse(r.blocks)
	e.pool.release(r.blocks)
	r.blocks = r.blocks[:0]
	r.numComputed, r.numHashed = 0, 0
}

// allocate makes room for r to hold upTo tokens, first taking the cached
// prefix blocks hit (which must not be evicted to make that room). It
// returns false, changing nothing, when the free queue is too short.
func (e *Engine) allocate(r *Request, upTo int, hit []*block) bool {
	bs := e.cfg.BlockSize
	need := (upTo+bs-1)/bs - len(r.blocks) - len(hit)
	evictableHits := 0
	for _, b := range hit {
		if b.ref == 0 {
			evictableHits++
		}
	}
	if need > e.pool.numFree()-evictableHits {
		return false
	}
	e.pool.touch(hit)
	r.blocks = append(r.blocks, hit...)
	if need > 0 {
		r.blocks = e.pool.alloc(need, r.blocks)
	}
	return true
}

func (e *Engine) preempt(r *Request) {
	e.freeBlocks(r)
	r.running = false
	r.preemptions++
	e.stats.Preemptions++
	e.waiting = slices.Insert(e.waiting, 0, r)
}

// Step runs one scheduler iteration at time now: it picks the batch the
// way vLLM's V1 scheduler does, charges its roofline time, and applies
// its effects as of now+Duration (tokens produced, blocks cached,
// requests finished). Requests added while the step "runs" join the next
// one. A zero Duration means there was nothing to do.
func (e *Engine) Step(now time.Duration) StepResult {
	cfg := e.cfg
	bs := cfg.BlockSize
	budget := cfg.MaxNumBatchedTokens
	e.sched = e.sched[:0]
	var res StepResult

	// Running requests first, in admission order: decodes take one token
	// each, unfinished prefills take the next chunk. When blocks run
	// out, the most recently admitted request is preempted (recompute).
	for i := 0; i < len(e.running) && budget > 0; {
		r := e.running[i]
		n := min(r.total()-r.numComputed, budget)
		ok := true
		for !e.allocate(r, r.numComputed+n, nil) {
			victim := e.running[len(e.running)-1]
			e.running = e.running[:len(e.running)-1]
			e.preempt(victim)
			res.Preempted++
			if victim == r {
				ok = false
				break
			}
		}
		if !ok {
			break
		}
		e.sched = append(e.sched, scheduled{r, r.numComputed, n})
		budget -= n
		i++
	}

	// Then waiting requests, FCFS, while nothing was preempted and there
	// is budget and a sequence slot; a prompt longer than the budget is
	// admitted with its first chunk.
	for res.Preempted == 0 && len(e.waiting) > 0 && budget > 0 && len(e.running) < cfg.MaxNumSeqs {
		r := e.waiting[0]
		// At least one token must be computed to get logits.
		hit := e.pool.lookup(r.hashes, (r.total()-1)/bs)
		ctx := len(hit) * bs
		n := min(r.total()-ctx, budget)
		if !e.allocate(r, ctx+n, hit) {
			break
		}
		r.numComputed = ctx
		r.numHashed = len(hit)
		e.stats.PrefixQueries += int64(r.total())
		e.stats.PrefixHits += int64(ctx)
		if !r.scheduled {
			r.scheduled = true
			r.cachedPrompt = ctx
			e.stats.Queue.Observe((now - r.arrival).Seconds())
		}
		r.running = true
		e.waiting = e.waiting[1:]
		e.running = append(e.running, r)
		e.sched = append(e.sched, scheduled{r, ctx, n})
		budget -= n
	}
	if len(e.waiting) == 0 {
		e.waiting = nil // let the backing array go
	}
	if len(e.sched) == 0 {
		return res
	}

	var shape hardware.StepShape
	for _, s := range e.sched {
		shape.Add(s.ctx, s.n, s.ctx+s.n == s.r.total())
		if s.n > 1 || s.ctx < len(s.r.Prompt) {
			res.PrefillTokens += s.n
		}
	}
	res.Duration = cfg.StepTime(shape)
	res.Tokens, res.Seqs = shape.Tokens, shape.Seqs
	end := now + res.Duration
	e.stats.Steps++

	e.events = e.events[:0]
	finished := false
	for _, s := range e.sched {
		r := s.r
		r.numComputed += s.n
		e.cacheFullBlocks(r)
		if r.numComputed < r.total() {
			continue // mid-prefill chunk
		}
		tok := openai.GeneratedToken(r.Seed, len(r.out))
		r.out = append(r.out, tok)
		e.stats.GenerationTokens++
		ev := Event{Req: r, Token: tok}
		if len(r.out) == 1 {
			ev.First = true
			r.firstToken = end
			e.stats.PromptTokens += int64(len(r.Prompt))
			e.stats.TTFT.Observe((end - r.arrival).Seconds())
		} else {
			e.stats.ITL.Observe((end - r.lastToken).Seconds())
		}
		r.lastToken = end
		reason := ""
		switch {
		case r.StopAfter > 0 && len(r.out) >= r.StopAfter && r.StopAfter < r.MaxTokens:
			reason = FinishStop
		case len(r.out) >= r.MaxTokens || r.total() >= cfg.MaxModelLen:
			reason = FinishLength
		}
		if reason != "" {
			e.finish(r, reason, end)
			ev.Finished = true
			finished = true
		}
		e.events = append(e.events, ev)
	}
	if finished {
		e.running = slices.DeleteFunc(e.running, func(r *Request) bool { return r.finished != "" })
	}
	res.Events = e.events
	return res
}

// cacheFullBlocks registers the blocks r has completely computed in the
// prefix cache, extending r's hash chain over generated tokens as needed.
func (e *Engine) cacheFullBlocks(r *Request) {
	bs := e.cfg.BlockSize
	full := r.numComputed / bs
	if full <= r.numHashed {
		return
	}
	for len(r.hashes) < full {
		// Hash the next block, which reaches into the generated tokens.
		b := len(r.hashes)
		e.hbuf = e.hbuf[:0]
		for i := b * bs; i < (b+1)*bs; i++ {
			e.hbuf = append(e.hbuf, r.token(i))
		}
		r.hashes = openai.AppendBlockHash(r.hashes, e.hbuf)
	}
	for i := r.numHashed; i < full; i++ {
		e.pool.register(r.blocks[i], r.hashes[i])
	}
	r.numHashed = full
}
