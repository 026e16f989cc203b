package gateway

import (
	"encoding/json"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/gangway/gangway/internal/inference/promtext"
)

var (
	ttftBuckets = []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0}
	tpotBuckets = []float64{0.001, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5}
	e2eBuckets  = []float64{0.001, 0.005, 0.01, 0.05, 0.1, 0.3, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 40.0, 80.0, 160.0, 320.0}
)

// metrics are the gateway's own counters, labelled by its policy.
type metrics struct {
	policy string

	mu         sync.Mutex // guards the fields below
	requests   map[string]map[int]int64
	ttft, tpot *promtext.Histogram
	e2e        *promtext.Histogram
	blocks     int64
	hitBlocks  int64
	// decisions/s over the last second, from Refresh ticks
	window []decisionSample
	rate   float64
}

type decisionSample struct {
	at time.Time
	n  int64
}

func newMetrics(policy string) *metrics {
	return &metrics{
		policy:   policy,
		requests: map[string]map[int]int64{},
		ttft:     promtext.NewHistogram(ttftBuckets),
		tpot:     promtext.NewHistogram(tpotBuckets),
		e2e:      promtext.NewHistogram(e2eBuckets),
	}
}

func (m *metrics) request(model string, code int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	byCode := m.requests[model]
	if byCode == nil {
		byCode = map[int]int64{}
		m.requests[model] = byCode
	}
	byCode[code]++
}

func (m *metrics) decision(hit, blocks int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.blocks += int64(blocks)
	m.hitBlocks += int64(hit)
}

// latency records a successful request: ttft is 0 when not streamed.
func (m *metrics) latency(ttft, e2e time.Duration, tokens int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.e2e.Observe(e2e.Seconds())
	if ttft > 0 {
		m.ttft.Observe(ttft.Seconds())
		if tokens > 1 {
			m.tpot.Observe((e2e - ttft).Seconds() / float64(tokens-1))
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

func (g *Gateway) handleMetrics(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", promtext.ContentType)
	pw := promtext.NewWriter(w)
	m := g.metrics
	pl := promtext.Label{Name: "policy", Value: m.policy}

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
	held := map[string]int{}
	for model := range g.queues {
		held[model] = 0
	}
	g.qmu.Unlock()
	for model := range held {
		held[model], _ = g.Held(model)
	}

	m.mu.Lock()
	pw.Header("gangway_gateway_requests_total", "counter", "Requests answered, by model and HTTP status (499: client went away).")
	for model, byCode := range m.requests {
		for code, n := range byCode {
			pw.Sample("gangway_gateway_requests_total", []promtext.Label{pl, {Name: "model", Value: model}, {Name: "code", Value: strconv.Itoa(code)}}, float64(n))
		}
	}
	pw.Header("gangway_gateway_ttft_seconds", "histogram", "Time to first byte of streamed answers, as the client sees it.")
	pw.Histogram("gangway_gateway_ttft_seconds", []promtext.Label{pl}, m.ttft)
	pw.Header("gangway_gateway_tpot_seconds", "histogram", "Mean time per output token after the first, of streamed answers.")
	pw.Histogram("gangway_gateway_tpot_seconds", []promtext.Label{pl}, m.tpot)
	pw.Header("gangway_gateway_e2e_seconds", "histogram", "Time from request to last byte.")
	pw.Histogram("gangway_gateway_e2e_seconds", []promtext.Label{pl}, m.e2e)
	pw.Counter("gangway_gateway_prefix_blocks_total", "Prompt blocks of routed requests.", []promtext.Label{pl}, float64(m.blocks))
	pw.Counter("gangway_gateway_prefix_hit_blocks_total", "Prompt blocks the policy believed cached on the replica it chose.", []promtext.Label{pl}, float64(m.hitBlocks))
	hit := 0.0
	if m.blocks > 0 {
		hit = float64(m.hitBlocks) / float64(m.blocks)
	}
	pw.Gauge("gangway_gateway_prefix_hit_ratio", "prefix_hit_blocks_total / prefix_blocks_total.", []promtext.Label{pl}, hit)
	pw.Gauge("gangway_gateway_decisions_per_second", "Routing decisions per second over the last second.", []promtext.Label{pl}, m.rate)
	m.mu.Unlock()

	pw.Header("gangway_gateway_decisions_total", "counter", "Routing decisions, retries included.")
	for model, s := range stats {
		pw.Sample("gangway_gateway_decisions_total", []promtext.Label{pl, {Name: "model", Value: model}}, float64(s.Decisions))
	}
	pw.Header("gangway_gateway_held_requests", "gauge", "Requests held for a replica with room, or for a first replica.")
	for model, n := range held {
		pw.Sample("gangway_gateway_held_requests", []promtext.Label{pl, {Name: "model", Value: model}}, float64(n))
	}
	pw.Header("gangway_gateway_saturated_total", "counter", "Routing attempts that found every replica saturated and held the request.")
	for model, s := range stats {
		pw.Sample("gangway_gateway_saturated_total", []promtext.Label{pl, {Name: "model", Value: model}}, float64(s.Saturated))
	}
	pw.Header("gangway_gateway_retries_total", "counter", "Decisions that retried a request on another replica.")
	for model, s := range stats {
		pw.Sample("gangway_gateway_retries_total", []promtext.Label{pl, {Name: "model", Value: model}}, float64(s.Retries))
	}
	pw.Header("gangway_gateway_ejections_total", "counter", "Replicas ejected after consecutive failures.")
	for model, s := range stats {
		pw.Sample("gangway_gateway_ejections_total", []promtext.Label{pl, {Name: "model", Value: model}}, float64(s.Ejections))
	}
	for _, f := range []struct {
		name, help string
		v          func(replicaRow) float64
	}{
		{"gangway_gateway_replica_in_flight", "Requests routed to the replica and not finished.", func(r replicaRow) float64 { return float64(r.c.InFlight) }},
		{"gangway_gateway_replica_in_flight_tokens", "KV tokens the in-flight requests may allocate.", func(r replicaRow) float64 { return float64(r.c.InFlightTokens) }},
		{"gangway_gateway_replica_capacity_tokens", "KV-cache tokens of the replica, from its GPU, TP and quantization.", func(r replicaRow) float64 { return float64(r.c.Capacity.KVTokens) }},
		{"gangway_gateway_replica_pending_prefill_seconds", "Estimated prefill queued on the replica.", func(r replicaRow) float64 { return r.c.PendingPrefill }},
		{"gangway_gateway_replica_ejected", "1 while the replica is ejected or failed its last check.", func(r replicaRow) float64 {
			if r.ej {
				return 1
			}
			return 0
		}},
	} {
		pw.Header(f.name, "gauge", f.help)
		for _, row := range rows {
			pw.Sample(f.name, []promtext.Label{{Name: "model", Value: row.model}, {Name: "replica", Value: row.c.ID}}, f.v(row))
		}
	}
	g.writeKeyMetrics(pw, pl)
	if err := pw.Flush(); err != nil {
		g.log.Debug("write metrics", "err", err)
	}
}
