package enginesim

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gangway/gangway/internal/hardware"
	"github.com/gangway/gangway/internal/inference/openai"
	"github.com/gangway/gangway/internal/inference/promtext"
)

// TimeMode says how a Server's engine relates to the wall clock.
type TimeMode string

const (
	// TimeReal runs the step loop against the wall clock: each step
	// sleeps for its roofline time (divided by TimeScale).
	TimeReal TimeMode = "real"
	// TimeZero answers every request at once, bypassing the scheduler:
	// a zero-latency engine for measuring what sits in front of it.
	TimeZero TimeMode = "zero"
)

// ServerConfig configures a Server.
type ServerConfig struct {
	Engine          hardware.Config
	ServedModelName string   // the model name clients send; default Engine.Model.Name
	Time            TimeMode // default TimeReal
	// TimeScale > 1 runs engine time that many times faster than wall
	// time (tests); default 1.
	TimeScale float64
	// MaxBodyBytes bounds request bodies; default 64 MiB.
	MaxBodyBytes int64
	Logger       *slog.Logger // nil discards
}

// Server serves vLLM's OpenAI-compatible API from an Engine. Construct
// with NewServer, serve it as an http.Handler, and in TimeReal mode run
// its step loop with Run.
type Server struct {
	cfg   ServerConfig
	log   *slog.Logger
	start time.Time
	mux   *http.ServeMux
	wake  chan struct{} // cap 1: a request arrived

	mu  sync.Mutex // guards eng (all of its state and stats)
	eng *Engine

	bufs     sync.Pool // *reqBufs
	ids      atomic.Uint64
	inflight atomic.Int64 // TimeZero: requests being answered
	zeroMu   sync.Mutex   // guards zero
	zero     Stats        // TimeZero counters
}

// NewServer validates cfg and builds the engine. It starts nothing.
func NewServer(cfg ServerConfig) (*Server, error) {
	if cfg.Time == "" {
		cfg.Time = TimeReal
	}
	if cfg.Time != TimeReal && cfg.Time != TimeZero {
		return nil, fmt.Errorf("time mode %q: want real or zero", cfg.Time)
	}
	if cfg.TimeScale == 0 {
		cfg.TimeScale = 1
	}
	if cfg.TimeScale < 0 {
		return nil, fmt.Errorf("time scale %v: want positive", cfg.TimeScale)
	}
	if cfg.MaxBodyBytes == 0 {
		cfg.MaxBodyBytes = 64 << 20
	}
	eng, err := NewEngine(cfg.Engine)
	if err != nil {
		return nil, err
	}
	cfg.Engine = eng.Config()
	if cfg.ServedModelName == "" {
		cfg.ServedModelName = cfg.Engine.Model.Name
	}
	lg := cfg.Logger
	if lg == nil {
		lg = slog.New(slog.DiscardHandler)
	}
	s := &Server{cfg: cfg, log: lg, start: time.Now(), eng: eng, wake: make(chan struct{}, 1)}
	s.bufs.New = func() any { return new(reqBufs) }
	s.zero.Finished = map[string]int64{}
	s.zero.TTFT = promtext.NewHistogram(ttftBuckets)
	s.zero.ITL = promtext.NewHistogram(itlBuckets)
	s.zero.E2E = promtext.NewHistogram(e2eBuckets)
	s.zero.Queue = promtext.NewHistogram(e2eBuckets)
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+openai.PathHealth, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) })
	mux.HandleFunc("GET /version", func(w http.ResponseWriter, r *http.Request) {
		openai.WriteJSON(w, 200, map[string]string{"version": "gangway-enginesim"})
	})
	mux.HandleFunc("GET "+openai.PathModels, s.handleModels)
	mux.HandleFunc("GET "+openai.PathMetrics, s.handleMetrics)
	mux.HandleFunc("POST "+openai.PathCompletions, s.handleGenerate)
	mux.HandleFunc("POST "+openai.PathChatCompletions, s.handleGenerate)
	mux.HandleFunc("GET "+openai.PathModels+"/{id...}", s.handleModel)
	mux.HandleFunc("POST "+openai.PathEmbeddings, s.handleEmbeddings)
	mux.HandleFunc("POST "+openai.PathTokenize, s.handleTokenize)
	mux.HandleFunc("/", noRoute)
	// Response ids start at a random point, so that replicas' ids differ.
	s.ids.Store(rand.Uint64() >> 1)
	s.mux = mux
	return s, nil
}

// ServeHTTP serves the API.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

// Config returns the server's configuration with defaults applied.
func (s *Server) Config() ServerConfig { return s.cfg }

// now is the engine time: wall time since start, scaled.
func (s *Server) now() time.Duration {
	return time.Duration(float64(time.Since(s.start)) * s.cfg.TimeScale)
}

// Load returns the engine's queue and cache state.
func (s *Server) Load() Load {
	if s.cfg.Time == TimeZero {
		return Load{Running: int(s.inflight.Load())}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.eng.Load()
}

// Run drives the engine in TimeReal mode until ctx is done: each
// iteration runs one Step, sleeps for its duration, then hands the
// tokens to the waiting handlers. It returns nil when ctx is cancelled.
// In TimeZero mode it just waits for ctx.
func (s *Server) Run(ctx context.Context) error {
	if s.cfg.Time == TimeZero {
		<-ctx.Done()
		return nil
	}
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		s.mu.Lock()
		if !s.eng.HasWork() {
			s.mu.Unlock()
			select {
			case <-ctx.Done():
				return nil
			case <-s.wake:
				continue
			}
		}
		res := s.eng.Step(s.now())
		s.mu.Unlock()
		if d := time.Duration(float64(res.Duration) / s.cfg.TimeScale); d > 0 {
			timer.Reset(d)
			select {
			case <-ctx.Done():
				return nil
			case <-timer.C:
			}
		}
		// Events stay valid until the next Step, which only this loop calls.
		for _, ev := range res.Events {
			st := ev.Req.Tag.(*stream)
			st.mu.Lock()
			st.toks = append(st.toks, ev.Token)
			if ev.Finished {
				st.done = true
				st.reason = ev.Req.FinishReason()
			}
			st.mu.Unlock()
			select {
			case st.notify <- struct{}{}:
			default:
			}
		}
	}
}

// stream carries one request's tokens from the step loop to its handler.
type stream struct {
	notify chan struct{} // cap 1: new tokens or done

	mu     sync.Mutex // guards the fields below
	toks   []uint32
	done   bool
	reason string
}

func (s *Server) handleModels(w http.ResponseWriter, r *http.Request) {
	openai.WriteJSON(w, http.StatusOK, openai.ModelList{Object: "list", Data: []openai.Model{s.model()}})
}

func (s *Server) handleGenerate(w http.ResponseWriter, r *http.Request) {
	bp := s.bufs.Get().(*reqBufs)
	defer s.bufs.Put(bp)
	body, err := openai.ReadBodyInto(bp.body, http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes), r.ContentLength, s.cfg.MaxBodyBytes)
	if err != nil {
		openai.WriteError(w, http.StatusBadRequest, fmt.Sprintf("read request body: %v", err))
		return
	}
	bp.keepBody(body)
	p, err := openai.ParsePromptInto(bp.prompt, r.URL.Path, body)
	if err != nil {
		openai.WriteError(w, http.StatusBadRequest, err.Error())
		return
	}
	bp.keepPrompt(p)
	if p.Model != s.cfg.ServedModelName {
		openai.WriteErrorCode(w, http.StatusNotFound, openai.CodeModelNotFound, fmt.Sprintf("The model `%s` does not exist.", p.Model))
		return
	}
	if f := unsupported(body, p.N); f != "" {
		openai.WriteOpenAIErrorParam(w, http.StatusBadRequest, openai.CodeUnsupportedParameter, f,
			fmt.Sprintf("field %q: the engine simulator does not support it (a real vLLM replica does); leave it out", f))
		return
	}
	cfg := s.cfg.Engine
	for i, t := range p.TokenIDs {
		if int(t) >= cfg.Model.Vocab {
			openai.WriteError(w, http.StatusBadRequest, fmt.Sprintf("field \"prompt\": token %d at index %d is outside the vocabulary of %d", t, i, cfg.Model.Vocab))
			return
		}
	}
	nPrompt := p.NumTokens()
	maxTokens := p.MaxTokens
	if maxTokens == 0 {
		if p.Chat {
			maxTokens = cfg.MaxModelLen - nPrompt
		} else {
			maxTokens = 16
		}
	}
	if nPrompt+maxTokens > cfg.MaxModelLen || maxTokens < 1 {
		openai.WriteErrorCode(w, http.StatusBadRequest, "context_length_exceeded", fmt.Sprintf(
			"This model's maximum context length is %d tokens. However, you requested %d tokens (%d in the messages, %d in the completion). Please reduce the length of the messages or completion.",
			cfg.MaxModelLen, nPrompt+maxTokens, nPrompt, maxTokens))
		return
	}
	id := s.ids.Add(1)
	if s.cfg.Time == TimeZero {
		// No scheduler: the prompt's tokens matter only through the seed.
		seed := p.Seed(cfg.Model.Vocab)
		s.answerNow(r.Context(), w, bp, p, id, newGenRequest(nil, maxTokens, seed, p.IgnoreEOS), nPrompt)
		return
	}
	toks := p.Tokens(cfg.Model.Vocab)
	req := newGenRequest(toks, maxTokens, openai.PromptSeed(toks), p.IgnoreEOS)
	out := &responder{w: w, p: p, model: s.cfg.ServedModelName, created: time.Now().Unix(), promptTokens: len(toks), id: openai.ResponseID(p.Chat, id)}

	st := &stream{notify: make(chan struct{}, 1)}
	req.Tag = st
	s.mu.Lock()
	err = s.eng.Add(req, s.now())
	s.mu.Unlock()
	if err != nil {
		openai.WriteError(w, http.StatusBadRequest, err.Error())
		return
	}
	select {
	case s.wake <- struct{}{}:
	default:
	}
	sent := 0
	for {
		select {
		case <-r.Context().Done():
			s.mu.Lock()
			s.eng.Abort(req, s.now())
			s.mu.Unlock()
			s.log.Debug("request aborted", "request_id", out.id, "tokens_sent", sent)
			return
		case <-st.notify:
		}
		st.mu.Lock()
		toks, done, reason := st.toks[sent:], st.done, st.reason
		st.mu.Unlock()
		if err := out.tokens(toks, done, reason); err != nil {
			s.mu.Lock()
			s.eng.Abort(req, s.now())
			s.mu.Unlock()
			return
		}
		sent += len(toks)
		if done {
			return
		}
	}
}

// newGenRequest is the engine request for a prompt: without ignore_eos
// the simulated end-of-sequence token makes the answer a deterministic
// length between 64 and 1087 tokens.
func newGenRequest(toks []uint32, maxTokens int, seed uint64, ignoreEOS bool) *Request {
	req := &Request{Prompt: toks, MaxTokens: maxTokens, Seed: seed}
	if !ignoreEOS {
		req.StopAfter = 64 + int(seed%1024)
	}
	return req
}

// reqBufs are one request's reusable buffers: the body, a rendered
// prompt, the answer. Buffers that grew past maxPooledBytes are dropped
// rather than kept.
type reqBufs struct {
	body, prompt, out []byte
}

const maxPooledBytes = 1 << 20

func (b *reqBufs) keepBody(body []byte) {
	if cap(body) <= maxPooledBytes {
		b.body = body[:0]
	}
}

// keepPrompt keeps the buffer a prompt was rendered into.
func (b *reqBufs) keepPrompt(p openai.PromptRequest) {
	if sc := p.Scratch(); cap(sc) <= maxPooledBytes {
		b.prompt = sc
	}
}

// answerNow is TimeZero: all tokens at once, no scheduler, and the whole
// answer in one write with its Content-Length (a stream is still SSE
// events, just all in one piece).
func (s *Server) answerNow(ctx context.Context, w http.ResponseWriter, bp *reqBufs, p openai.PromptRequest, id uint64, req *Request, promptTokens int) {
	s.inflight.Add(1)
	defer s.inflight.Add(-1)
	n := req.MaxTokens
	reason := FinishLength
	if req.StopAfter > 0 && req.StopAfter < n {
		n, reason = req.StopAfter, FinishStop
	}
	s.zeroMu.Lock()
	s.zero.PromptTokens += int64(promptTokens)
	s.zero.GenerationTokens += int64(n)
	s.zero.Finished[reason]++
	s.zero.TTFT.Observe(0)
	s.zero.E2E.Observe(0)
	s.zero.Queue.Observe(0)
	s.zeroMu.Unlock()
	if ctx.Err() != nil {
		return
	}
	if !p.Stream {
		toks := make([]uint32, n)
		for i := range toks {
			toks[i] = openai.GeneratedToken(req.Seed, i)
		}
		out := &responder{w: w, p: p, model: s.cfg.ServedModelName, created: time.Now().Unix(), promptTokens: promptTokens, id: openai.ResponseID(p.Chat, id)}
		out.tokens(toks, true, reason)
		return
	}
	a := sseAnswer{chat: p.Chat, model: s.cfg.ServedModelName, created: time.Now().Unix(), id: id}
	b := a.appendAll(bp.out[:0], req.Seed, n, reason, p.IncludeUsage, promptTokens)
	if cap(b) <= maxPooledBytes {
		bp.out = b[:0]
	}
	h := w.Header()
	h.Set("Content-Type", openai.EventStreamContentType)
	h.Set("Cache-Control", "no-cache")
	h.Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(http.StatusOK)
	w.Write(b)
}

// responder writes one request's answer, streamed or whole.
type responder struct {
	w            http.ResponseWriter
	p            openai.PromptRequest
	id, model    string
	created      int64
	promptTokens int

	started bool
	text    strings.Builder // non-streaming: the whole answer
	n       int             // tokens written
}

func (o *responder) usage() *openai.Usage {
	return &openai.Usage{PromptTokens: o.promptTokens, CompletionTokens: o.n, TotalTokens: o.promptTokens + o.n}
}

// tokens writes newly produced tokens; done means the last of them ends
// the answer with reason.
func (o *responder) tokens(toks []uint32, done bool, reason string) error {
	if !o.p.Stream {
		for _, t := range toks {
			o.text.WriteString(openai.TokenText(t))
		}
		o.n += len(toks)
		if !done {
			return nil
		}
		c := openai.Chunk{ID: o.id, Created: o.created, Model: o.model, Usage: o.usage()}
		if o.p.Chat {
			c.Object = "chat.completion"
			c.Choices = []openai.ChatChoice{{Message: &openai.ChatDelta{Role: "assistant", Content: o.text.String()}, FinishReason: &reason}}
		} else {
			c.Object = "text_completion"
			c.Choices = []openai.CompletionChoice{{Text: o.text.String(), FinishReason: &reason}}
		}
		openai.WriteJSON(o.w, http.StatusOK, c)
		return nil
	}
	w := o.w
	if !o.started {
		o.started = true
		h := w.Header()
		h.Set("Content-Type", openai.EventStreamContentType)
		h.Set("Cache-Control", "no-cache")
		w.WriteHeader(http.StatusOK)
		if o.p.Chat {
			if err := o.event(openai.Chunk{Choices: []openai.ChatChoice{{Delta: &openai.ChatDelta{Role: "assistant"}}}}); err != nil {
				return err
			}
		}
	}
	for i, t := range toks {
		o.n++
		var fr *string
		if done && i == len(toks)-1 {
			fr = &reason
		}
		var c openai.Chunk
		if o.p.Chat {
			c.Choices = []openai.ChatChoice{{Delta: &openai.ChatDelta{Content: openai.TokenText(t)}, FinishReason: fr}}
		} else {
			c.Choices = []openai.CompletionChoice{{Text: openai.TokenText(t), FinishReason: fr}}
		}
		if err := o.event(c); err != nil {
			return err
		}
	}
	if done {
		if o.p.IncludeUsage {
			var empty any = []openai.CompletionChoice{}
			if err := o.event(openai.Chunk{Choices: empty, Usage: o.usage()}); err != nil {
				return err
			}
		}
		if _, err := io.WriteString(w, openai.DoneEvent); err != nil {
			return err
		}
	}
	if f, ok := w.(http.Flusher); ok {
		f.Flush()
	}
	return nil
}

func (o *responder) event(c openai.Chunk) error {
	c.ID, c.Created, c.Model = o.id, o.created, o.model
	if o.p.Chat {
		c.Object = "chat.completion.chunk"
	} else {
		c.Object = "text_completion"
	}
	b, err := json.Marshal(c)
	if err != nil {
		return err
	}
	_, err = o.w.Write(openai.AppendEvent(make([]byte, 0, len(b)+8), b))
	return err
}

func (s *Server) handleMetrics(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", promtext.ContentType)
	pw := promtext.NewWriter(w)
	var load Load
	var st Stats
	if s.cfg.Time == TimeZero {
		load = s.Load()
		s.zeroMu.Lock()
		defer s.zeroMu.Unlock()
		st = s.zero
	} else {
		s.mu.Lock()
		defer s.mu.Unlock()
		load = s.eng.Load()
		st = s.eng.Stats()
	}
	s.writeMetrics(pw, load, st)
	if err := pw.Flush(); err != nil {
		s.log.Debug("write metrics", "err", err)
	}
}

func (s *Server) writeMetrics(pw *promtext.Writer, load Load, st Stats) {
	c := s.cfg.Engine
	ls := []promtext.Label{{Name: "engine", Value: "0"}, {Name: "model_name", Value: s.cfg.ServedModelName}}
	pw.Gauge("vllm:num_requests_running", "Number of requests in model execution batches.", ls, float64(load.Running))
	pw.Gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.", ls, float64(load.Waiting))
	pw.Gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", ls, load.KVUsage)
	pw.Gauge("vllm:gpu_cache_usage_perc", "GPU KV-cache usage (deprecated name). 1 means 100 percent usage.", ls, load.KVUsage)
	pw.Counter("vllm:prefix_cache_queries_total", "Prefix cache queries, in terms of number of queried tokens.", ls, float64(st.PrefixQueries))
	pw.Counter("vllm:prefix_cache_hits_total", "Prefix cache hits, in terms of number of cached tokens.", ls, float64(st.PrefixHits))
	pw.Counter("vllm:num_preemptions_total", "Cumulative number of preemptions from the engine.", ls, float64(st.Preemptions))
	pw.Counter("vllm:prompt_tokens_total", "Number of prefill tokens processed.", ls, float64(st.PromptTokens))
	pw.Counter("vllm:generation_tokens_total", "Number of generation tokens processed.", ls, float64(st.GenerationTokens))
	pw.Header("vllm:request_success_total", "counter", "Count of successfully processed requests.")
	for _, reason := range []string{FinishStop, FinishLength, FinishAbort} {
		pw.Sample("vllm:request_success_total", append(ls[:2:2], promtext.Label{Name: "finished_reason", Value: reason}), float64(st.Finished[reason]))
	}
	for _, h := range []struct {
		name, help string
		h          *promtext.Histogram
	}{
		{"vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", st.TTFT},
		{"vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", st.ITL},
		{"vllm:time_per_output_token_seconds", "Histogram of time per output token in seconds (deprecated name).", st.ITL},
		{"vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", st.E2E},
		{"vllm:request_queue_time_seconds", "Histogram of time spent in WAITING phase for request.", st.Queue},
	} {
		pw.Header(h.name, "histogram", h.help)
		pw.Histogram(h.name, ls, h.h)
	}
	cp := s.eng.Capacity()
	pw.Gauge("vllm:cache_config_info", "Information of the LLMEngine CacheConfig.", []promtext.Label{
		{Name: "block_size", Value: strconv.Itoa(c.BlockSize)},
		{Name: "cache_dtype", Value: map[bool]string{false: "auto", true: "fp8"}[c.KVCacheFP8]},
		{Name: "enable_prefix_caching", Value: strconv.FormatBool(!c.DisablePrefixCaching)},
		{Name: "gpu_memory_utilization", Value: strconv.FormatFloat(c.GPUMemoryUtilization, 'g', -1, 64)},
		{Name: "num_gpu_blocks", Value: strconv.Itoa(cp.KVBlocks)},
	}, 1)
	pw.Gauge("gangway:engine_info", "The simulated engine's hardware: what the gateway sizes replicas from.", []promtext.Label{
		{Name: "model", Value: c.Model.Name},
		{Name: "gpu", Value: c.GPU.Name},
		{Name: "tp", Value: strconv.Itoa(c.TP)},
		{Name: "quant", Value: string(c.Quant)},
		{Name: "time", Value: string(s.cfg.Time)},
	}, 1)
}
