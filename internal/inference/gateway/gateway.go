package gateway

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/gangway/gangway/internal/inference/enginesim"
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
	Router            RouterOptions // Seed is taken from Seed above
	// Transport carries requests to the engines; nil means a pooled
	// transport tuned for many concurrent streams.
	Transport http.RoundTripper
	Logger    *slog.Logger // nil discards
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
	bufs      sync.Pool

	mu    sync.Mutex           // guards pools and eps
	pools map[string]*Router   // by served model name
	eps   map[string]*endpoint // by URL
}

// endpoint is what the gateway learned about one Endpoint.
type endpoint struct {
	Endpoint
	model    string
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
	if cfg.RefreshInterval < 0 || cfg.ScrapeTimeout < 0 || cfg.MaxAttempts < 1 || cfg.MaxBodyBytes < 1 || cfg.DefaultMaxTokens < 1 {
		return nil, errors.New("gateway config: refresh interval, scrape timeout, max attempts, max body bytes and default max tokens must be positive")
	}
	cfg.Router.Seed = cfg.Seed
	lg := cfg.Logger
	if lg == nil {
		lg = slog.New(slog.DiscardHandler)
	}
	tr := cfg.Transport
	if tr == nil {
		tr = &http.Transport{
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
	}
	g := &Gateway{
		cfg: cfg, log: lg, transport: tr,
		client:  &http.Client{Transport: tr, Timeout: cfg.ScrapeTimeout},
		metrics: newMetrics(cfg.Policy),
		pools:   map[string]*Router{},
		eps:     map[string]*endpoint{},
	}
	g.bufs.New = func() any { b := make([]byte, 32<<10); return &b }
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+enginesim.PathCompletions, g.proxy)
	mux.HandleFunc("POST "+enginesim.PathChatCompletions, g.proxy)
	mux.HandleFunc("GET "+enginesim.PathModels, g.handleModels)
	mux.HandleFunc("GET "+enginesim.PathHealth, g.handleHealth)
	mux.HandleFunc("GET "+enginesim.PathMetrics, g.handleMetrics)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		enginesim.WriteError(w, http.StatusNotFound, fmt.Sprintf("no route for %s %s", r.Method, r.URL.Path))
	})
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
	if tr, ok := g.transport.(interface{ CloseIdleConnections() }); ok {
		defer tr.CloseIdleConnections()
	}
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

// Refresh reads the endpoint list once, asks new endpoints which model
// they serve, scrapes every engine's /metrics and updates the routers. It
// blocks until all scrapes finish or time out.
func (g *Gateway) Refresh(ctx context.Context) error {
	list, err := g.cfg.Source.Endpoints(ctx)
	if err != nil {
		return fmt.Errorf("list endpoints: %w", err)
	}
	g.mu.Lock()
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
	eps := make([]*endpoint, 0, len(next))
	for _, e := range next {
		eps = append(eps, e)
	}
	g.mu.Unlock()

	type result struct {
		e     *endpoint
		model string
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
			r.model = e.model
			g.mu.Unlock()
			if r.model == "" {
				r.model, r.err = discoverModel(ctx, g.client, e.URL)
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
	byModel := map[string][]*endpoint{}
	for _, r := range results {
		e := r.e
		if r.model != "" {
			e.model = r.model
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
	g.metrics.tick(time.Now(), g.decisionsLocked())
	return nil
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
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.pools[model]
}

func (g *Gateway) handleHealth(w http.ResponseWriter, r *http.Request) {
	g.mu.Lock()
	n := len(g.pools)
	g.mu.Unlock()
	if n == 0 {
		enginesim.WriteError(w, http.StatusServiceUnavailable, "no model has a replica yet")
		return
	}
	w.WriteHeader(http.StatusOK)
}

func (g *Gateway) handleModels(w http.ResponseWriter, r *http.Request) {
	g.mu.Lock()
	models := make([]string, 0, len(g.pools))
	for m := range g.pools {
		models = append(models, m)
	}
	g.mu.Unlock()
	sort.Strings(models)
	type model struct {
		ID      string `json:"id"`
		Object  string `json:"object"`
		OwnedBy string `json:"owned_by"`
	}
	out := struct {
		Object string  `json:"object"`
		Data   []model `json:"data"`
	}{Object: "list", Data: []model{}}
	for _, m := range models {
		out.Data = append(out.Data, model{ID: m, Object: "model", OwnedBy: "gangway"})
	}
	w.Header().Set("Content-Type", "application/json")
	writeJSON(w, out)
}

// hopHeaders are connection-scoped and never forwarded (RFC 9110 §7.6.1).
var hopHeaders = []string{"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}

func copyHeader(dst, src http.Header) {
	for k, vs := range src {
		if slices.Contains(hopHeaders, k) {
			continue
		}
		dst[k] = append(dst[k][:0:0], vs...)
	}
}

// retryableStatus are answers that mean "this replica cannot take it now".
func retryableStatus(code int) bool {
	return code == http.StatusBadGateway || code == http.StatusServiceUnavailable || code == http.StatusGatewayTimeout
}

func (g *Gateway) proxy(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	body, err := enginesim.ReadBody(http.MaxBytesReader(w, r.Body, g.cfg.MaxBodyBytes), r.ContentLength, g.cfg.MaxBodyBytes)
	if err != nil {
		g.metrics.request("", http.StatusBadRequest)
		enginesim.WriteError(w, http.StatusBadRequest, fmt.Sprintf("read request body: %v", err))
		return
	}
	p, err := enginesim.ParsePrompt(r.URL.Path, body)
	if err != nil {
		g.metrics.request("", http.StatusBadRequest)
		enginesim.WriteError(w, http.StatusBadRequest, err.Error())
		return
	}
	rt := g.pool(p.Model)
	if rt == nil {
		g.metrics.request(p.Model, http.StatusNotFound)
		enginesim.WriteError(w, http.StatusNotFound, fmt.Sprintf("The model `%s` does not exist.", p.Model))
		return
	}
	maxTokens := p.MaxTokens
	if maxTokens == 0 {
		maxTokens = g.cfg.DefaultMaxTokens
	}
	req := RequestFor(p.Tokens(0), maxTokens)

	var tried []string
	var lastErr error
	for attempt := 0; attempt < g.cfg.MaxAttempts; attempt++ {
		t, err := rt.Pick(time.Now(), req, tried)
		if err != nil {
			lastErr = err
			break
		}
		g.metrics.decision(t.HitBlocks, len(req.Hashes))
		tried = append(tried, t.Replica)
		out, err := http.NewRequestWithContext(r.Context(), http.MethodPost, t.Replica+r.URL.RequestURI(), bytes.NewReader(body))
		if err != nil {
			t.Done(time.Now(), Failure)
			lastErr = err
			continue
		}
		copyHeader(out.Header, r.Header)
		out.ContentLength = int64(len(body))
		resp, err := g.transport.RoundTrip(out)
		if err != nil {
			if r.Context().Err() != nil {
				t.Done(time.Now(), Canceled)
				g.metrics.request(p.Model, 499)
				return
			}
			t.Done(time.Now(), Failure)
			lastErr = err
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
		g.relay(w, r, resp, t, p, start)
		return
	}
	g.metrics.request(p.Model, http.StatusBadGateway)
	enginesim.WriteError(w, http.StatusBadGateway, fmt.Sprintf("no replica of model %s could take the request (tried %d): %v", p.Model, len(tried), lastErr))
}

var dataPrefix = []byte("data: ")

// relay streams resp to the client, flushing each chunk as it arrives.
func (g *Gateway) relay(w http.ResponseWriter, r *http.Request, resp *http.Response, t *Ticket, p enginesim.PromptRequest, start time.Time) {
	defer resp.Body.Close()
	copyHeader(w.Header(), resp.Header)
	w.WriteHeader(resp.StatusCode)
	fl, _ := w.(http.Flusher)
	bp := g.bufs.Get().(*[]byte)
	defer g.bufs.Put(bp)
	buf := *bp
	var ttft time.Duration
	events := 0
	outcome := Success
	var tail []byte // non-streamed answers: the body, for its usage block
	for {
		n, err := resp.Body.Read(buf)
		if n > 0 {
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
			if fl != nil {
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
	if outcome != Success || resp.StatusCode != http.StatusOK {
		return
	}
	e2e := now.Sub(start)
	tokens := 0
	if p.Stream {
		// One event per token, plus [DONE] (and a role or usage event,
		// which this estimate tolerates).
		tokens = events - 1
		g.metrics.latency(ttft, e2e, tokens)
	} else {
		tokens = completionTokens(tail)
		g.metrics.latency(0, e2e, tokens)
	}
}
