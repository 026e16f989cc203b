package gateway

import (
	"encoding/json"
	"net/http"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

var (
	ttftBuckets  = []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0}
	tpotBuckets  = []float64{0.001, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5}
	e2eBuckets   = []float64{0.001, 0.005, 0.01, 0.05, 0.1, 0.3, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 40.0, 80.0, 160.0, 320.0}
	queueBuckets = []float64{0.0001, 0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0}
)

// metrics are the gateway's own series, in a registry of its own, every
// one labelled with its policy. What happens per request (answers,
// latencies, admissions, routing decisions) updates counters and
// histograms as it happens; what is (routers' counts, replicas' load,
// held requests, keys' usage) is read at scrape time by stateCollector.
type metrics struct {
	reg *prometheus.Registry

	requests *prometheus.CounterVec   // model, code
	ttft     *prometheus.HistogramVec // model, replica
	tpot     *prometheus.HistogramVec // model, replica
	e2e      *prometheus.HistogramVec // model, replica
	queued   *prometheus.HistogramVec // model, replica
	routed   *prometheus.CounterVec   // model, replica
	admitted *prometheus.CounterVec   // model, reason
	rejected *prometheus.CounterVec   // model, reason

	// series caches each (model, replica)'s children of the vectors
	// above, so the request path hashes their labels once per replica,
	// not once per observation: replicaKey -> *replicaSeries.
	series sync.Map

	blocks, hitBlocks atomic.Int64

	mu sync.Mutex // guards window and rate
	// decisions/s over the last second, from Refresh ticks
	window []decisionSample
	rate   float64
}

type replicaKey struct{ model, replica string }

type replicaSeries struct {
	ttft, tpot, e2e, queued prometheus.Observer
	routed                  prometheus.Counter
}

type decisionSample struct {
	at time.Time
	n  int64
}

func newMetrics(g *Gateway) *metrics {
	mr := []string{"model", "replica"}
	m := &metrics{
		reg: prometheus.NewRegistry(),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "gangway_gateway_requests_total",
			Help: "Requests answered, by model and HTTP status (499: client went away)."}, []string{"model", "code"}),
		ttft: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "gangway_gateway_ttft_seconds",
			Help: "Time from request to the first byte of streamed answers, as the client sees it (admission queue included), by model and replica.", Buckets: ttftBuckets}, mr),
		tpot: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "gangway_gateway_tpot_seconds",
			Help: "Mean time per output token after the first, of streamed answers (one SSE data event a token), by model and replica.", Buckets: tpotBuckets}, mr),
		e2e: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "gangway_gateway_e2e_seconds",
			Help: "Time from request to last byte of successful answers, by model and replica.", Buckets: e2eBuckets}, mr),
		queued: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "gangway_gateway_queue_seconds",
			Help: "Time admitted requests spent in the gateway's admission (held for a replica with room or for a first replica) before their first routing decision, by model and the replica chosen.", Buckets: queueBuckets}, mr),
		routed: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "gangway_gateway_replica_decisions_total",
			Help: "Routing decisions, retries included, by model and the replica the policy chose."}, mr),
		admitted: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "gangway_gateway_admissions_total",
			Help: "Requests admitted to a replica, by model and reason: immediate (a replica had room) or queued (held first)."}, []string{"model", "reason"}),
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "gangway_gateway_rejections_total",
			Help: "Requests for a model turned away before reaching a replica, by model and reason: unknown_model (404), model_denied (404, the key's), rate_limit (429, the key's), queue_full (429), queue_timeout (503), no_replica (502), canceled (client left while held)."}, []string{"model", "reason"}),
	}
	r := prometheus.WrapRegistererWith(prometheus.Labels{"policy": g.cfg.Policy}, m.reg)
	r.MustRegister(m.requests, m.ttft, m.tpot, m.e2e, m.queued, m.routed, m.admitted, m.rejected, stateCollector{g})
	return m
}

// replica returns model's and replica's series, made on first use.
func (m *metrics) replica(model, replica string) *replicaSeries {
	k := replicaKey{model, replica}
	if s, ok := m.series.Load(k); ok {
		return s.(*replicaSeries)
	}
	s := &replicaSeries{
		ttft:   m.ttft.WithLabelValues(model, replica),
		tpot:   m.tpot.WithLabelValues(model, replica),
		e2e:    m.e2e.WithLabelValues(model, replica),
		queued: m.queued.WithLabelValues(model, replica),
		routed: m.routed.WithLabelValues(model, replica),
	}
	v, _ := m.series.LoadOrStore(k, s)
	return v.(*replicaSeries)
}

// forget drops the series of replicas not in live, so that retired
// replicas' series leave the scrape. Called by Refresh.
func (m *metrics) forget(live map[replicaKey]struct{}) {
	m.series.Range(func(k, _ any) bool {
		rk := k.(replicaKey)
		if _, ok := live[rk]; !ok {
			m.series.Delete(k)
			for _, v := range []interface {
				DeleteLabelValues(...string) bool
			}{m.ttft, m.tpot, m.e2e, m.queued, m.routed} {
				v.DeleteLabelValues(rk.model, rk.replica)
			}
		}
		return true
	})
}

// codeLabels are the HTTP statuses as labels, made once: Itoa allocates
// for each status over 99.
var codeLabels = func() (c [600]string) {
	for i := range c {
		c[i] = strconv.Itoa(i)
	}
	return c
}()

func (m *metrics) request(model string, code int) {
	var label string
	if code >= 0 && code < len(codeLabels) {
		label = codeLabels[code]
	} else {
		label = strconv.Itoa(code)
	}
	m.requests.WithLabelValues(model, label).Inc()
}

// decision records a routing decision for model to replica, of a
// request of blocks prompt blocks, hit of them believed cached there.
func (m *metrics) decision(model, replica string, hit, blocks int) {
	m.blocks.Add(int64(blocks))
	m.hitBlocks.Add(int64(hit))
	m.replica(model, replica).routed.Inc()
}

// admit records a request's first routing decision after waited in
// admission; queued says it was held.
func (m *metrics) admit(model, replica string, waited time.Duration, queued bool) {
	reason := "immediate"
	if queued {
		reason = "queued"
	}
	m.admitted.WithLabelValues(model, reason).Inc()
	m.replica(model, replica).queued.Observe(waited.Seconds())
}

// reject records a request for model turned away before any replica.
func (m *metrics) reject(model, reason string) {
	m.rejected.WithLabelValues(model, reason).Inc()
}

// latency records a successful request: ttft is 0 when not streamed.
func (m *metrics) latency(model, replica string, ttft, e2e time.Duration, tokens int) {
	s := m.replica(model, replica)
	s.e2e.Observe(e2e.Seconds())
	if ttft > 0 {
		s.ttft.Observe(ttft.Seconds())
		if tokens > 1 {
			s.tpot.Observe((e2e - ttft).Seconds() / float64(tokens-1))
		}
	}
}

// tick records the decision count at now and updates decisions/s over
// the last second.
func (m *metrics) tick(now time.Time, decisions int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.window = append(m.window, decisionSample{now, decisions})
	for len(m.window) > 2 && now.Sub(m.window[1].at) >= time.Second {
		m.window = m.window[1:]
	}
	if first := m.window[0]; now.Sub(first.at) > 0 {
		m.rate = float64(decisions-first.n) / now.Sub(first.at).Seconds()
	}
}

// completionTokens reads usage.completion_tokens from a JSON answer.
func completionTokens(body []byte) int {
	var v struct {
		Usage struct {
			CompletionTokens int `json:"completion_tokens"`
		} `json:"usage"`
	}
	if json.Unmarshal(body, &v) != nil {
		return 0
	}
	return v.Usage.CompletionTokens
}

func writeJSON(w http.ResponseWriter, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Write(b)
}

// Gatherer is the gateway's own registry: what its /metrics serves.
func (g *Gateway) Gatherer() prometheus.Gatherer { return g.metrics.reg }

// metricsHandler serves the gateway's registry.
func (g *Gateway) metricsHandler() http.Handler {
	return promhttp.HandlerFor(g.metrics.reg, promhttp.HandlerOpts{ErrorLog: slogPrinter{g}})
}

// slogPrinter hands promhttp's errors to the gateway's logger.
type slogPrinter struct{ g *Gateway }

func (p slogPrinter) Println(v ...any) { p.g.log.Debug("write metrics", "err", v) }

func desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc(name, help, labels, nil)
}

var (
	descDecisions    = desc("gangway_gateway_decisions_total", "Routing decisions, retries included.", "model")
	descSaturated    = desc("gangway_gateway_saturated_total", "Routing attempts that found every replica saturated and held the request.", "model")
	descRetries      = desc("gangway_gateway_retries_total", "Decisions that retried a request on another replica.", "model")
	descEjections    = desc("gangway_gateway_ejections_total", "Replicas ejected after consecutive failures.", "model")
	descHeld         = desc("gangway_gateway_held_requests", "Requests held for a replica with room, or for a first replica.", "model")
	descBlocks       = desc("gangway_gateway_prefix_blocks_total", "Prompt blocks of routed requests.")
	descHitBlocks    = desc("gangway_gateway_prefix_hit_blocks_total", "Prompt blocks the policy believed cached on the replica it chose.")
	descHitRatio     = desc("gangway_gateway_prefix_hit_ratio", "prefix_hit_blocks_total / prefix_blocks_total.")
	descRate         = desc("gangway_gateway_decisions_per_second", "Routing decisions per second over the last second.")
	descInFlight     = desc("gangway_gateway_replica_in_flight", "Requests routed to the replica and not finished.", "model", "replica")
	descInFlightToks = desc("gangway_gateway_replica_in_flight_tokens", "KV tokens the in-flight requests may allocate.", "model", "replica")
	descCapacity     = desc("gangway_gateway_replica_capacity_tokens", "KV-cache tokens of the replica, from its GPU, TP and quantization.", "model", "replica")
	descPrefill      = desc("gangway_gateway_replica_pending_prefill_seconds", "Estimated prefill queued on the replica.", "model", "replica")
	descEjected      = desc("gangway_gateway_replica_ejected", "1 while the replica is ejected or failed its last check.", "model", "replica")
	descKeyRequests  = desc("gangway_gateway_key_requests_total", "Requests admitted, by API key name.", "key")
	descKeyPrompt    = desc("gangway_gateway_key_prompt_tokens_total", "Prompt tokens of admitted requests an engine answered, by API key name.", "key")
	descKeyComplete  = desc("gangway_gateway_key_completion_tokens_total", "Completion tokens engines produced, by API key name.", "key")
	descKeyRefusals  = desc("gangway_gateway_key_refusals_total", `Requests refused by API key checks, by key name ("" for no key or an unknown one) and reason: unauthorized (401), model (404), requests and tokens (429).`, "key", "reason")
)

// stateCollector reads the gateway's state at scrape time: the routers'
// counts and replicas' load, held requests, prefix hits and keys' usage.
type stateCollector struct{ g *Gateway }

var _ prometheus.Collector = stateCollector{}

// Describe implements prometheus.Collector.
func (stateCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descDecisions, descSaturated, descRetries, descEjections, descHeld, descBlocks, descHitBlocks,
		descHitRatio, descRate, descInFlight, descInFlightToks, descCapacity, descPrefill, descEjected,
		descKeyRequests, descKeyPrompt, descKeyComplete, descKeyRefusals} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c stateCollector) Collect(ch chan<- prometheus.Metric) {
	g := c.g
	m := g.metrics
	emit := func(d *prometheus.Desc, t prometheus.ValueType, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, t, v, labels...)
	}

	type replicaRow struct {
		model string
		c     Candidate
		ej    bool
	}
	g.mu.Lock()
	var rows []replicaRow
	stats := map[string]RouterStats{}
	now := time.Now()
	for model, rt := range g.pools {
		stats[model] = rt.Stats()
		for _, c := range rt.Snapshot(now) {
			rows = append(rows, replicaRow{model, c, rt.Ejected(c.ID, now)})
		}
	}
	g.mu.Unlock()
	g.qmu.Lock()
	models := make([]string, 0, len(g.queues))
	for model := range g.queues {
		models = append(models, model)
	}
	g.qmu.Unlock()
	for _, model := range models {
		n, _ := g.Held(model)
		emit(descHeld, prometheus.GaugeValue, float64(n), model)
	}
	for model, s := range stats {
		emit(descDecisions, prometheus.CounterValue, float64(s.Decisions), model)
		emit(descSaturated, prometheus.CounterValue, float64(s.Saturated), model)
		emit(descRetries, prometheus.CounterValue, float64(s.Retries), model)
		emit(descEjections, prometheus.CounterValue, float64(s.Ejections), model)
	}
	for _, r := range rows {
		ej := 0.0
		if r.ej {
			ej = 1
		}
		emit(descInFlight, prometheus.GaugeValue, float64(r.c.InFlight), r.model, r.c.ID)
		emit(descInFlightToks, prometheus.GaugeValue, float64(r.c.InFlightTokens), r.model, r.c.ID)
		emit(descCapacity, prometheus.GaugeValue, float64(r.c.Capacity.KVTokens), r.model, r.c.ID)
		emit(descPrefill, prometheus.GaugeValue, r.c.PendingPrefill, r.model, r.c.ID)
		emit(descEjected, prometheus.GaugeValue, ej, r.model, r.c.ID)
	}

	blocks, hits := m.blocks.Load(), m.hitBlocks.Load()
	emit(descBlocks, prometheus.CounterValue, float64(blocks))
	emit(descHitBlocks, prometheus.CounterValue, float64(hits))
	ratio := 0.0
	if blocks > 0 {
		ratio = float64(hits) / float64(blocks)
	}
	emit(descHitRatio, prometheus.GaugeValue, ratio)
	m.mu.Lock()
	rate := m.rate
	m.mu.Unlock()
	emit(descRate, prometheus.GaugeValue, rate)

	if g.cfg.Keys == nil {
		return
	}
	usage := g.Usage()
	names := make([]string, 0, len(usage))
	for n := range usage {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		u := usage[n]
		if n != "" {
			emit(descKeyRequests, prometheus.CounterValue, float64(u.Requests), n)
			emit(descKeyPrompt, prometheus.CounterValue, float64(u.PromptTokens), n)
			emit(descKeyComplete, prometheus.CounterValue, float64(u.CompletionTokens), n)
		}
		for _, r := range []struct {
			reason string
			v      int64
		}{{"unauthorized", u.Unauthorized}, {"model", u.ModelDenied}, {"requests", u.RequestLimited}, {"tokens", u.TokenLimited}} {
			if r.v > 0 || (n != "" && r.reason != "unauthorized") {
				emit(descKeyRefusals, prometheus.CounterValue, float64(r.v), n, r.reason)
			}
		}
	}
}
