package gateway

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gangway/gangway/internal/inference/openai"
)

// Config configures a Gateway.
type Config struct {
	Source Source // required
	Policy string // default prefix-affinity
	Seed   uint64 // seeds the policies' randomness

	// RefreshInterval is how often the endpoint list and every engine's
	// /metrics are read; default 100ms.
	RefreshInterval time.Duration
	// ScrapeTimeout bounds one metrics or model-list request; default 1s.
	ScrapeTimeout time.Duration
	// MaxAttempts is how many replicas a request may be tried on when
	// connecting fails (or the engine answers 502/503/504) before any
	// byte reached the client; default 3.
	MaxAttempts  int
	MaxBodyBytes int64 // default 64 MiB
	// DefaultMaxTokens is the output length assumed for load accounting
	// when a request does not say; default 256.
	DefaultMaxTokens int
	// MaxConnsPerEngine bounds the gateway's connections to one engine
	// (a streamed answer holds one for its whole length); default 1024.
	MaxConnsPerEngine int
	// MaxQueued bounds the requests held per model while every replica
	// is saturated or none is ready (see admission.go); past it they get
	// 429. Default 1024; negative turns holding off: a saturated pool
	// then takes requests anyway, and a model without replicas is 404.
	MaxQueued int
	// QueueTimeout is how long a request may be held before it gets 503;
	// default 60s.
	QueueTimeout time.Duration
	// MaxPendingPrefill makes a replica count as saturated for admission
	// once the prefill queued on it (the router's estimate) plus the
	// request's own would exceed it; default 5s, negative: only KV cache
	// and sequence slots count. See RouterOptions.MaxPendingPrefill.
	MaxPendingPrefill time.Duration
	// StreamHeaderTimeout bounds how long a replica may take to send the
	// response headers of a streamed request (engines send them when they
	// take the request, before the first token); past it the replica
	// counts as failed and the request goes to the next one, as when
	// connecting fails. It catches an engine that accepts connections but
	// has hung (a stuck CUDA context, a deadlocked server). Default 60s;
	// negative: no bound.
	StreamHeaderTimeout time.Duration
	// HeaderTimeout is the same bound for requests that are not
	// streamed, whose headers come only with the whole completion; 0
	// (the default) or negative: no bound but the client's.
	HeaderTimeout time.Duration
	Router        RouterOptions // Seed is taken from Seed above
	// Transport carries requests to the engines; nil means the gateway's
	// own (upstream.go): pooled keep-alive connections, no goroutines of
	// its own, net/http's Transport for https.
	Transport http.RoundTripper
	// Keys authenticates callers of the completion and model-list paths
	// (keys.go): each request must name a key it knows, in
	// Authorization: Bearer or x-api-key, and is held to that key's
	// models and rate limits (keyauth.go); Usage reports what each key
	// did. A KeyFile (LoadKeyFile) is the file-backed one; a server may
	// pass its own. nil: no authentication, every request is served.
	// /health and /metrics are never authenticated.
	Keys   Keys
	Logger *slog.Logger // nil discards
}

// Gateway is the OpenAI-compatible reverse proxy. It serves
// /v1/completions and /v1/chat/completions (streamed through without
// buffering), /v1/models, /health and its own /metrics. Construct with
// New; Run keeps its view of the endpoints fresh.
type Gateway struct {
	cfg       Config
	log       *slog.Logger
	transport http.RoundTripper
	client    *http.Client // scrapes
	mux       *http.ServeMux
	metrics   *metrics
	started   time.Time // a model's created time where no replica says
	bufs      sync.Pool // *proxyBufs
	urls      sync.Map  // replica base URL → *url.URL

	mu    sync.Mutex           // guards pools and eps
	pools map[string]*Router   // by served model name
	eps   map[string]*endpoint // by URL
	// routers is a copy of pools for the request path, replaced (never
	// modified) under mu.
	routers atomic.Pointer[map[string]*Router]
	known   map[string]struct{} // models the source knows, replicas or not; guarded by mu
	// refreshed is closed when a Refresh finishes (then replaced); nil
	// until someone waits. Guarded by mu.
	refreshed chan struct{}

	qmu    sync.Mutex        // guards queues; taken after mu when both are
	queues map[string]*queue // admission, by model

	keyStates sync.Map // KeyInfo.Name → *keyState (keyauth.go); "" counts the unauthorized
}

// endpoint is what the gateway learned about one Endpoint.
type endpoint struct {
	Endpoint
	model    string
	info     *openai.Model // what its /v1/models said, once asked
	asked    bool          // /v1/models was asked (once is enough)
	capacity Capacity
	sized    bool // capacity came from the endpoint or its metrics
	load     EngineLoad
	healthy  bool
}

// New validates cfg. It starts nothing; call Refresh or Run before
// expecting requests to route.
func New(cfg Config) (*Gateway, error) {
	if cfg.Source == nil {
		return nil, errors.New("gateway config: source: required")
	}
	if cfg.Policy == "" {
		cfg.Policy = PolicyPrefixAffinity
	}
	if _, err := NewPolicy(cfg.Policy); err != nil {
		return nil, fmt.Errorf("gateway config: policy: %w", err)
	}
	if cfg.RefreshInterval == 0 {
		cfg.RefreshInterval = 100 * time.Millisecond
	}
	if cfg.ScrapeTimeout == 0 {
		cfg.ScrapeTimeout = time.Second
	}
	if cfg.MaxAttempts == 0 {
		cfg.MaxAttempts = 3
	}
	if cfg.MaxBodyBytes == 0 {
		cfg.MaxBodyBytes = 64 << 20
	}
	if cfg.DefaultMaxTokens == 0 {
		cfg.DefaultMaxTokens = 256
	}
	if cfg.MaxConnsPerEngine == 0 {
		cfg.MaxConnsPerEngine = 1024
	}
	if cfg.MaxQueued == 0 {
		cfg.MaxQueued = 1024
	}
	if cfg.QueueTimeout == 0 {
		cfg.QueueTimeout = 60 * time.Second
	}
	if cfg.MaxPendingPrefill == 0 {
		cfg.MaxPendingPrefill = 5 * time.Second
	}
	if cfg.StreamHeaderTimeout == 0 {
		cfg.StreamHeaderTimeout = 60 * time.Second
	}
	if cfg.RefreshInterval < 0 || cfg.ScrapeTimeout < 0 || cfg.MaxAttempts < 1 || cfg.MaxBodyBytes < 1 || cfg.DefaultMaxTokens < 1 || cfg.QueueTimeout < 0 {
		return nil, errors.New("gateway config: refresh interval, scrape timeout, max attempts, max body bytes, default max tokens and queue timeout must be positive")
	}
	cfg.Router.Seed = cfg.Seed
	cfg.Router.HoldWhenSaturated = cfg.MaxQueued >= 0
	cfg.Router.MaxPendingPrefill = max(cfg.MaxPendingPrefill, 0)
	lg := cfg.Logger
	if lg == nil {
		lg = slog.New(slog.DiscardHandler)
	}
	scrape := &http.Transport{
		Proxy:               nil,
		DialContext:         (&net.Dialer{Timeout: 2 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConnsPerHost: 4,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
	}
	tr := cfg.Transport
	if tr == nil {
		fallback := &http.Transport{
			Proxy:               nil,
			DialContext:         (&net.Dialer{Timeout: 2 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
			MaxIdleConns:        0,
			MaxIdleConnsPerHost: cfg.MaxConnsPerEngine,
			MaxConnsPerHost:     cfg.MaxConnsPerEngine,
			IdleConnTimeout:     90 * time.Second,
			DisableCompression:  true,
			WriteBufferSize:     64 << 10,
			ReadBufferSize:      64 << 10,
		}
		tr = newUpstream(fallback, cfg.MaxConnsPerEngine)
	}
	g := &Gateway{
		cfg: cfg, log: lg, transport: tr, started: time.Now(),
		client: &http.Client{Transport: scrape, Timeout: cfg.ScrapeTimeout},
		pools:  map[string]*Router{},
		eps:    map[string]*endpoint{},
		known:  map[string]struct{}{},
		queues: map[string]*queue{},
	}
	g.metrics = newMetrics(g)
	mux := http.NewServeMux()
	// Every POST under /v1 and vLLM's own POST paths outside it go to
	// the replicas of the model the body names.
	mux.HandleFunc("POST /v1/", g.proxy)
	for _, path := range vllmPaths {
		mux.HandleFunc("POST "+path, g.proxy)
	}
	mux.HandleFunc("GET "+openai.PathModels, g.handleModels)
	mux.HandleFunc("GET "+openai.PathModels+"/{id...}", g.handleModel)
	mux.HandleFunc("POST "+openai.PathModels, noRoute) // not "POST /v1/"'s
	mux.HandleFunc("POST "+openai.PathModels+"/{id...}", noRoute)
	mux.HandleFunc("GET "+openai.PathHealth, g.handleHealth)
	mux.Handle("GET "+openai.PathMetrics, g.metricsHandler())
	mux.HandleFunc("/", noRoute)
	g.mux = mux
	return g, nil
}

// ServeHTTP serves the API.
func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) { g.mux.ServeHTTP(w, r) }

// Run refreshes endpoints and engine metrics every RefreshInterval until
// ctx is done, then returns nil. Refresh errors are logged, not fatal.
func (g *Gateway) Run(ctx context.Context) error {
	t := time.NewTicker(g.cfg.RefreshInterval)
	defer t.Stop()
	defer g.closeIdle()
	for {
		if err := g.Refresh(ctx); err != nil && ctx.Err() == nil {
			g.log.Warn("refresh endpoints", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// closeIdle closes the idle connections to the engines.
func (g *Gateway) closeIdle() {
	if tr, ok := g.transport.(interface{ CloseIdleConnections() }); ok {
		tr.CloseIdleConnections()
	}
	g.client.CloseIdleConnections()
}

// Refresh reads the endpoint list once, asks new endpoints which model
// they serve, scrapes every engine's /metrics and updates the routers. It
// blocks until all scrapes finish or time out.
func (g *Gateway) Refresh(ctx context.Context) error {
	list, err := g.cfg.Source.Endpoints(ctx)
	if err != nil {
		return fmt.Errorf("list endpoints: %w", err)
	}
	var known map[string]struct{}
	if ms, ok := g.cfg.Source.(ModelSource); ok {
		models, err := ms.Models(ctx)
		if err != nil {
			return fmt.Errorf("list models: %w", err)
		}
		known = make(map[string]struct{}, len(models))
		for _, m := range models {
			known[m] = struct{}{}
		}
	}
	g.mu.Lock()
	if known != nil {
		g.known = known
	}
	next := make(map[string]*endpoint, len(list))
	for _, e := range list {
		old, ok := g.eps[e.URL]
		if !ok || old.Model != e.Model || old.Engine != e.Engine {
			old = &endpoint{Endpoint: e, model: e.Model, capacity: DefaultCapacity}
			if e.Engine != nil {
				old.capacity, old.sized = CapacityFromConfig(*e.Engine), true
			}
		}
		next[e.URL] = old
	}
	g.eps = next
	g.urls.Range(func(k, _ any) bool {
		if _, ok := next[k.(string)]; !ok {
			g.urls.Delete(k)
		}
		return true
	})
	eps := make([]*endpoint, 0, len(next))
	for _, e := range next {
		eps = append(eps, e)
	}
	g.mu.Unlock()

	type result struct {
		e     *endpoint
		model string
		info  *openai.Model
		res   scrapeResult
		err   error
	}
	results := make([]result, len(eps))
	var wg sync.WaitGroup
	for i, e := range eps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := result{e: e}
			g.mu.Lock()
			asked := e.asked
			r.model = e.model
			g.mu.Unlock()
			if e.Engine != nil && r.model != "" && !asked {
				// Sized by the source: its entry is known without asking.
				r.info = &openai.Model{ID: r.model, Created: g.started.Unix(), OwnedBy: "vllm",
					Root: e.Engine.Model.Name, MaxModelLen: e.Engine.MaxModelLen}
			} else if r.model == "" || !asked {
				// The model's entry (its context length, its creation) is
				// asked once; without a model from the source, until known.
				info, err := discoverModel(ctx, g.client, e.URL)
				if err == nil {
					r.info = &info
					if r.model == "" {
						r.model = info.ID
					}
				} else if r.model == "" {
					r.err = err
				}
			}
			if r.err == nil {
				r.res, r.err = scrapeMetrics(ctx, g.client, e.URL)
			}
			results[i] = r
		}()
	}
	wg.Wait()

	g.mu.Lock()
	defer g.mu.Unlock()
	defer g.publishLocked()
	byModel := map[string][]*endpoint{}
	for _, r := range results {
		e := r.e
		if r.model != "" {
			e.model = r.model
		}
		if r.info != nil || e.model != "" {
			e.asked = true
		}
		if r.info != nil {
			e.info = r.info
		}
		e.healthy = r.err == nil
		if r.err != nil {
			g.log.Debug("scrape engine", "endpoint", e.URL, "err", r.err)
		} else {
			e.load = r.res.load
			if !e.sized && r.res.capacity != nil {
				e.capacity = *r.res.capacity
			}
		}
		if e.model != "" {
			byModel[e.model] = append(byModel[e.model], e)
		}
	}
	for model := range g.pools {
		if _, ok := byModel[model]; !ok {
			delete(g.pools, model)
		}
	}
	for model, es := range byModel {
		rt, ok := g.pools[model]
		if !ok {
			p, _ := NewPolicy(g.cfg.Policy)
			rt, err = NewRouter(p, g.cfg.Router)
			if err != nil {
				return fmt.Errorf("model %s: %w", model, err)
			}
			g.pools[model] = rt
		}
		reps := make([]Replica, len(es))
		for i, e := range es {
			reps[i] = Replica{ID: e.URL, Capacity: e.capacity}
		}
		rt.SetReplicas(reps)
		for _, e := range es {
			rt.Observe(e.URL, e.load, e.healthy)
		}
	}
	live := map[replicaKey]struct{}{}
	for model, es := range byModel {
		for _, e := range es {
			live[replicaKey{model, e.URL}] = struct{}{}
		}
	}
	g.metrics.forget(live)
	g.metrics.tick(time.Now(), g.decisionsLocked())
	return nil
}

// publishLocked hands the request path a fresh copy of the routers, then
// lets held requests through to models that now have one.
func (g *Gateway) publishLocked() {
	routers := maps.Clone(g.pools)
	g.routers.Store(&routers)
	g.syncGatesLocked()
	if g.refreshed != nil {
		close(g.refreshed)
		g.refreshed = nil
	}
}

func (g *Gateway) isKnown(model string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	_, ok := g.known[model]
	return ok
}

func (g *Gateway) decisionsLocked() int64 {
	var n int64
	for _, rt := range g.pools {
		n += rt.Stats().Decisions
	}
	return n
}

// Replicas returns the gateway's view of each replica of model (nil when
// it knows none): its in-flight requests and tokens, pending prefill,
// last scraped engine load and capacity. It is what the autoscaler
// samples (autoscale.Replica) besides the engine's own metrics.
func (g *Gateway) Replicas(model string, now time.Time) []Candidate {
	rt := g.pool(model)
	if rt == nil {
		return nil
	}
	return rt.Snapshot(now)
}

func (g *Gateway) pool(model string) *Router {
	if m := g.routers.Load(); m != nil {
		return (*m)[model]
	}
	return nil
}

func (g *Gateway) handleHealth(w http.ResponseWriter, r *http.Request) {
	g.mu.Lock()
	n := len(g.pools)
	g.mu.Unlock()
	if n == 0 {
		openai.WriteError(w, http.StatusServiceUnavailable, "no model has a replica yet")
		return
	}
	w.WriteHeader(http.StatusOK)
}

// hopHeaders are connection-scoped and never forwarded (RFC 9110 §7.6.1).
var hopHeaders = []string{"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}

// copyHeader copies src's end-to-end headers into dst, sharing their
// value slices: neither side's values are modified afterwards.
func copyHeader(dst, src http.Header) {
	for k, vs := range src {
		if slices.Contains(hopHeaders, k) {
			continue
		}
		dst[k] = vs
	}
}

// retryableStatus are answers that mean "this replica cannot take it now".
func retryableStatus(code int) bool {
	return code == http.StatusBadGateway || code == http.StatusServiceUnavailable || code == http.StatusGatewayTimeout
}

// proxyBufs are one request's reusable buffers. Body goes back to the pool
// only when the transport has finished writing every copy of the request
// it was given (it may still be writing after RoundTrip returns, and it
// may resend the body through GetBody).
type proxyBufs struct {
	body   []byte
	prompt []byte
	hashes []uint64
	relay  []byte
	req    Request
	open   atomic.Int32 // request writes handed a reader over body and not finished
	trace  httptrace.ClientTrace

	// reached and completion are set by relay: an engine answered, with
	// completion tokens (its usage block, or one per streamed event).
	reached    bool
	completion int
}

// maxPooledBytes caps what a pooled buffer may grow to and stay pooled.
const maxPooledBytes = 1 << 20

func (g *Gateway) getBufs() *proxyBufs {
	if b, ok := g.bufs.Get().(*proxyBufs); ok {
		return b
	}
	b := &proxyBufs{relay: make([]byte, 32<<10)}
	b.trace.WroteRequest = func(httptrace.WroteRequestInfo) { b.open.Add(-1) }
	return b
}

func (g *Gateway) putBufs(b *proxyBufs, body []byte, p openai.PromptRequest) {
	if b.open.Load() != 0 {
		return // a transport may still read body: let the collector have it all
	}
	if cap(body) <= maxPooledBytes {
		b.body = body[:0]
	}
	if sc := p.Scratch(); sc != nil && cap(sc) <= maxPooledBytes {
		b.prompt = sc
	}
	if cap(b.req.Hashes) <= maxPooledBytes/8 {
		b.hashes = b.req.Hashes[:0]
	}
	b.req = Request{}
	b.reached, b.completion = false, 0
	g.bufs.Put(b)
}

// bodyOver is a request body over the pooled buffer. It is a no-op
// closer around a *bytes.Reader, which net/http recognizes as in memory
// and writes together with the headers.
func (b *proxyBufs) bodyOver(body []byte) io.ReadCloser {
	b.open.Add(1)
	return io.NopCloser(bytes.NewReader(body))
}

func (g *Gateway) proxy(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	key, ks, ok := g.authenticate(w, r, start)
	if !ok {
		g.metrics.request("", http.StatusUnauthorized)
		return
	}
	bufs := g.getBufs()
	body, err := openai.ReadBodyInto(bufs.body, http.MaxBytesReader(w, r.Body, g.cfg.MaxBodyBytes), r.ContentLength, g.cfg.MaxBodyBytes)
	if err != nil {
		g.putBufs(bufs, nil, openai.PromptRequest{})
		g.metrics.request("", http.StatusBadRequest)
		openai.WriteError(w, http.StatusBadRequest, fmt.Sprintf("read request body: %v", err))
		return
	}
	generate := openai.GenerationPath(r.URL.Path)
	var p openai.PromptRequest
	if generate {
		p, err = openai.ParsePromptInto(bufs.prompt, r.URL.Path, body)
	} else {
		// Embeddings, responses, rerank, audio…: routed by model and
		// load, the prompt unread.
		p, err = openai.ParseModel(r.Header.Get("Content-Type"), body)
	}
	defer func() { g.putBufs(bufs, body, p) }()
	if err != nil {
		g.metrics.request("", http.StatusBadRequest)
		openai.WriteError(w, http.StatusBadRequest, err.Error())
		return
	}
	if ks != nil && !key.allows(p.Model) {
		g.denyModel(w, ks, p.Model)
		return
	}
	maxTokens := p.MaxTokens
	switch {
	case !generate && r.URL.Path != openai.PathResponses:
		maxTokens = 1 // a prefill, no decode
	case maxTokens == 0:
		maxTokens = g.cfg.DefaultMaxTokens
	}
	maxTokens *= max(p.N, 1) // n choices decode n times
	req := &bufs.req
	if p.TokenIDs != nil {
		*req = *RequestFor(p.TokenIDs, maxTokens)
	} else {
		RequestForText(req, bufs.hashes, p.Prompt, maxTokens)
	}
	if ks != nil {
		// The reservation is prompt plus max_tokens; settled (before
		// bufs go back to the pool: defers run last in, first out) to
		// what the engine produced.
		prompt, reserved := req.PromptTokens, req.PromptTokens+req.MaxTokens
		if !g.admitKey(w, ks, p.Model, reserved, time.Now()) {
			return
		}
		defer func() { ks.settle(time.Now(), reserved, prompt, bufs.completion, bufs.reached) }()
	}
	adm := admission{since: time.Now()}
	rt := g.pool(p.Model)
	if rt == nil {
		adm.queued = true
		if g.cfg.MaxQueued < 0 || !g.isKnown(p.Model) {
			g.metrics.request(p.Model, http.StatusNotFound)
			g.metrics.reject(p.Model, "unknown_model")
			openai.WriteErrorCode(w, http.StatusNotFound, openai.CodeModelNotFound, fmt.Sprintf("The model `%s` does not exist.", p.Model))
			return
		}
		if rt, err = g.awaitReplica(r.Context(), p.Model); err != nil {
			g.notAdmitted(w, r, p.Model, err)
			return
		}
	}

	// A model the source knows whose every replica fails to connect is
	// most likely between replicas (one retired, the next starting): it
	// is held for the next refresh, within QueueTimeout, rather than
	// answered 502 at once.
	holdUntil := time.Now().Add(g.cfg.QueueTimeout)
	for {
		tried, lastErr, answered := g.attempts(w, r, rt, req, p, bufs, body, start, &adm)
		if answered {
			return
		}
		if g.cfg.MaxQueued < 0 || !g.isKnown(p.Model) || !time.Now().Before(holdUntil) {
			g.metrics.request(p.Model, http.StatusBadGateway)
			openai.WriteError(w, http.StatusBadGateway, fmt.Sprintf("no replica of model %s could take the request (tried %d): %v", p.Model, len(tried), lastErr))
			return
		}
		ctx, cancel := context.WithDeadline(r.Context(), holdUntil)
		err := g.nextRefresh(ctx)
		cancel()
		if err == nil {
			if rt = g.pool(p.Model); rt == nil {
				rt, err = g.awaitReplica(r.Context(), p.Model)
			}
		}
		if err != nil {
			g.notAdmitted(w, r, p.Model, ErrQueueTimeout)
			return
		}
		adm.queued = true
	}
}

// admission is a request's way through the gateway's admission, until
// its first routing decision.
type admission struct {
	since  time.Time // when it began; zero once admitted
	queued bool      // held, for a first replica or one with room
}

// attempts tries up to MaxAttempts replicas of rt; answered says it
// wrote the response (relayed, or turned away), else tried and lastErr
// say what failed. The first decision admits the request (adm).
func (g *Gateway) attempts(w http.ResponseWriter, r *http.Request, rt *Router, req *Request, p openai.PromptRequest, bufs *proxyBufs, body []byte, start time.Time, adm *admission) (tried []string, lastErr error, answered bool) {
	for attempt := 0; attempt < g.cfg.MaxAttempts; attempt++ {
		t, queued, err := g.pick(r.Context(), p.Model, rt, req, tried)
		if errors.Is(err, ErrQueueFull) || errors.Is(err, ErrQueueTimeout) || r.Context().Err() != nil {
			g.notAdmitted(w, r, p.Model, err)
			return tried, err, true
		}
		if err != nil {
			return tried, err, false
		}
		g.metrics.decision(p.Model, t.Replica, t.HitBlocks, len(req.Hashes))
		if !adm.since.IsZero() {
			g.metrics.admit(p.Model, t.Replica, time.Since(adm.since), adm.queued || queued)
			adm.since = time.Time{}
		}
		tried = append(tried, t.Replica)
		out, err := g.upstreamRequest(r, t.Replica, bufs, body)
		if err != nil {
			t.Done(time.Now(), Failure)
			lastErr = err
			continue
		}
		resp, err := roundTripWithin(g.transport, out, g.headerTimeout(p.Stream))
		if err != nil {
			if r.Context().Err() != nil {
				t.Done(time.Now(), Canceled)
				g.metrics.request(p.Model, 499)
				return tried, err, true
			}
			t.Done(time.Now(), Failure)
			lastErr = err
			if errors.Is(err, errNoHeaders) {
				// It took the request and hung: nothing reached the
				// client yet, so the next replica may answer it.
				lastErr = fmt.Errorf("replica %s: %w", t.Replica, err)
				g.log.Warn("engine sent no response headers in time; trying the next replica", "replica", t.Replica, "attempt", attempt+1, "err", err)
				continue
			}
			g.log.Debug("engine unreachable; retrying", "replica", t.Replica, "attempt", attempt+1, "err", err)
			continue
		}
		if retryableStatus(resp.StatusCode) && attempt+1 < g.cfg.MaxAttempts {
			io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
			resp.Body.Close()
			t.Done(time.Now(), Failure)
			lastErr = fmt.Errorf("replica %s answered %d", t.Replica, resp.StatusCode)
			continue
		}
		g.relay(w, r, resp, t, p, bufs, start)
		return tried, nil, true
	}
	return tried, lastErr, false
}

// nextRefresh waits for the next Refresh to finish, or for ctx.
func (g *Gateway) nextRefresh(ctx context.Context) error {
	g.mu.Lock()
	if g.refreshed == nil {
		g.refreshed = make(chan struct{})
	}
	ch := g.refreshed
	g.mu.Unlock()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// notAdmitted answers a request the admission queue turned away (429,
// 503, both with Retry-After) or whose client left while held.
func (g *Gateway) notAdmitted(w http.ResponseWriter, r *http.Request, model string, err error) {
	code, msg := http.StatusServiceUnavailable, fmt.Sprintf("model %s: no replica had room within %v; retry later", model, g.cfg.QueueTimeout)
	reason := "queue_timeout"
	switch {
	case r.Context().Err() != nil:
		g.metrics.request(model, 499)
		g.metrics.reject(model, "canceled")
		return
	case errors.Is(err, ErrQueueFull):
		code, msg = http.StatusTooManyRequests, fmt.Sprintf("model %s: %d requests already waiting for a replica with room; retry later", model, g.cfg.MaxQueued)
		reason = "queue_full"
	case !errors.Is(err, ErrQueueTimeout):
		code, msg = http.StatusBadGateway, fmt.Sprintf("model %s: %v", model, err)
		reason = "no_replica"
	}
	g.metrics.request(model, code)
	g.metrics.reject(model, reason)
	w.Header().Set("Retry-After", strconv.Itoa(max(1, int(g.cfg.QueueTimeout.Seconds()/10))))
	openai.WriteError(w, code, msg)
}

// streamBroke ends a stream whose replica failed mid-way with an error
// event, as vLLM ends its own failed streams, so that OpenAI's clients
// raise an error rather than take a truncated answer for a whole one.
// An event cut in half is closed first (the client drops it).
func (g *Gateway) streamBroke(w http.ResponseWriter, replica string, last [2]byte, err error) {
	var b []byte
	if last != [2]byte{'\n', '\n'} {
		b = append(b, "\n\n"...)
	}
	b = openai.AppendErrorEvent(b, http.StatusBadGateway, openai.CodeUpstream,
		fmt.Sprintf("replica %s broke the stream off: %v", replica, err))
	w.Write(b)
	if fl, ok := w.(http.Flusher); ok {
		fl.Flush()
	}
}

// TimeoutFromFlag maps a header-timeout flag, where 0 means no bound, to
// Config's StreamHeaderTimeout or HeaderTimeout, where 0 is the default
// and a negative value means no bound.
func TimeoutFromFlag(d time.Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return d
}

// headerTimeout is the bound on a replica's response headers; 0: none.
func (g *Gateway) headerTimeout(stream bool) time.Duration {
	d := g.cfg.HeaderTimeout
	if stream {
		d = g.cfg.StreamHeaderTimeout
	}
	return max(d, 0)
}

// upstreamRequest is r for replica (a base URL), its body the pooled
// buffer; GetBody lets the transport resend it on a connection that
// turned out to be closed.
func (g *Gateway) upstreamRequest(r *http.Request, replica string, bufs *proxyBufs, body []byte) (*http.Request, error) {
	base, err := g.baseURL(replica)
	if err != nil {
		return nil, err
	}
	u := *base
	u.Path, u.RawPath, u.RawQuery = r.URL.Path, r.URL.RawPath, r.URL.RawQuery
	// WroteRequest (bufs.trace) counts each write of the body out.
	out := (&http.Request{
		Method: http.MethodPost, URL: &u, Host: u.Host,
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header:        make(http.Header, len(r.Header)),
		Body:          bufs.bodyOver(body),
		ContentLength: int64(len(body)),
		GetBody:       func() (io.ReadCloser, error) { return bufs.bodyOver(body), nil },
	}).WithContext(httptrace.WithClientTrace(r.Context(), &bufs.trace))
	copyHeader(out.Header, r.Header)
	if g.cfg.Keys != nil {
		// The gateway's keys are its own: engines never see them.
		out.Header.Del("Authorization")
		out.Header.Del("X-Api-Key")
	}
	return out, nil
}

// baseURL parses a replica's base URL once.
func (g *Gateway) baseURL(replica string) (*url.URL, error) {
	if u, ok := g.urls.Load(replica); ok {
		return u.(*url.URL), nil
	}
	u, err := url.Parse(replica)
	if err != nil {
		return nil, fmt.Errorf("replica URL %q: %w", replica, err)
	}
	g.urls.Store(replica, u)
	return u, nil
}

var dataPrefix = []byte(openai.EventPrefix)

// relay streams resp to the client, flushing each chunk as it arrives:
// the last one is left for the server to write with the end of the
// answer, in one write.
func (g *Gateway) relay(w http.ResponseWriter, r *http.Request, resp *http.Response, t *Ticket, p openai.PromptRequest, bufs *proxyBufs, start time.Time) {
	defer resp.Body.Close()
	buf := bufs.relay
	copyHeader(w.Header(), resp.Header)
	w.WriteHeader(resp.StatusCode)
	fl, _ := w.(http.Flusher)
	var ttft time.Duration
	events := 0
	outcome := Success
	var tail []byte  // non-streamed answers: the body, for its usage block
	var last [2]byte // the stream's last two bytes: "\n\n" between events
	for {
		n, err := resp.Body.Read(buf)
		if n > 0 {
			if n >= 2 {
				last = [2]byte{buf[n-2], buf[n-1]}
			} else {
				last = [2]byte{last[1], buf[0]}
			}
			if ttft == 0 {
				ttft = time.Since(start)
				t.FirstToken(time.Now())
			}
			chunk := buf[:n]
			if p.Stream {
				events += bytes.Count(chunk, dataPrefix)
			} else if len(tail) < 1<<20 {
				tail = append(tail, chunk...)
			}
			if _, werr := w.Write(chunk); werr != nil {
				outcome = Canceled
				break
			}
			if fl != nil && err == nil {
				fl.Flush()
			}
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			if r.Context().Err() != nil {
				outcome = Canceled
			} else {
				outcome = Failure
				g.log.Warn("engine stream broke", "replica", t.Replica, "err", err)
				if p.Stream && resp.StatusCode == http.StatusOK {
					g.streamBroke(w, t.Replica, last, err)
				}
			}
			break
		}
	}
	now := time.Now()
	t.Done(now, outcome)
	code := resp.StatusCode
	if outcome == Canceled {
		code = 499
	}
	g.metrics.request(p.Model, code)
	tokens := 0
	if resp.StatusCode == http.StatusOK {
		if p.Stream {
			// One event per token, plus [DONE] (and a role or usage
			// event, which this estimate tolerates).
			tokens = max(events-1, 0)
		} else {
			tokens = completionTokens(tail)
		}
	}
	bufs.reached, bufs.completion = true, tokens
	if outcome != Success || resp.StatusCode != http.StatusOK {
		return
	}
	e2e := now.Sub(start)
	if !p.Stream {
		ttft = 0
	}
	g.metrics.latency(p.Model, t.Replica, ttft, e2e, tokens)
}
