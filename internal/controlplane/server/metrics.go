package server

import (
	"context"
	"net/http"
	"time"

	"github.com/gangway/gangway/internal/api"
	"github.com/gangway/gangway/internal/controlplane/controller"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// metrics are the server's own series. What happens (API requests, store
// transactions, controller passes, placements, restarts) updates counters
// and histograms as it happens; what is (jobs by phase, nodes by state) is
// counted from the cache at scrape time by clusterCollector, so that a
// job's change costs nothing and a scrape costs what it reports.
type metrics struct {
	reg *prometheus.Registry

	requests    *prometheus.CounterVec   // route, method, code
	reqSeconds  *prometheus.HistogramVec // route, method
	txnSeconds  *prometheus.HistogramVec // result
	passSeconds prometheus.Histogram
	schedSecs   prometheus.Histogram
	placements  prometheus.Counter
	preemptions prometheus.Counter
	waited      *prometheus.HistogramVec // queue
	restarts    *prometheus.CounterVec   // cause
}

// pendingBuckets span a second to a week: placed at once to waiting days
// for a big gang.
var pendingBuckets = []float64{0.1, 0.5, 1, 5, 15, 60, 300, 900, 3600, 4 * 3600, 12 * 3600, 86400, 3 * 86400, 7 * 86400}

func newMetrics(s *Server) *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "gangway_api_requests_total",
			Help: "API requests answered, by route (the mux's pattern; \"none\" for no route), method and HTTP status."}, []string{"route", "method", "code"}),
		reqSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "gangway_api_request_duration_seconds",
			Help: "Time to answer API requests, long polls included, by route and method.", Buckets: prometheus.DefBuckets}, []string{"route", "method"}),
		txnSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "gangway_store_txn_duration_seconds",
			Help: "Time to commit store transactions, by result (ok, error).", Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14)}, []string{"result"}),
		passSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "gangway_controller_pass_duration_seconds",
			Help: "Time of the leader's controller passes (read, decide, schedule, write).", Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14)}),
		schedSecs: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "gangway_scheduler_pass_duration_seconds",
			Help: "Time of the scheduler's own call in passes that had jobs to place.", Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16)}),
		placements: prometheus.NewCounter(prometheus.CounterOpts{Name: "gangway_scheduler_placements_total",
			Help: "Gangs the scheduler's plans placed."}),
		preemptions: prometheus.NewCounter(prometheus.CounterOpts{Name: "gangway_scheduler_preemptions_total",
			Help: "Running gangs the scheduler's plans preempted."}),
		waited: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "gangway_job_pending_duration_seconds",
			Help: "Time gangs waited before each placement, from submission or the end of their last attempt, by queue.", Buckets: pendingBuckets}, []string{"queue"}),
		restarts: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "gangway_job_restarts_total",
			Help: "Attempts that ended with their job to run again, by cause (node-lost, user-error, preempted, ...)."}, []string{"cause"}),
	}
	m.reg.MustRegister(m.requests, m.reqSeconds, m.txnSeconds, m.passSeconds, m.schedSecs, m.placements, m.preemptions, m.waited, m.restarts,
		&clusterCollector{src: serverCluster{s}})
	return m
}

var _ controller.Observer = (*metrics)(nil)

// Passed implements controller.Observer.
func (m *metrics) Passed(took, scheduling time.Duration, placed, preempted int) {
	m.passSeconds.Observe(took.Seconds())
	if scheduling > 0 {
		m.schedSecs.Observe(scheduling.Seconds())
	}
	m.placements.Add(float64(placed))
	m.preemptions.Add(float64(preempted))
}

// Placed implements controller.Observer.
func (m *metrics) Placed(queue string, waited time.Duration) {
	m.waited.WithLabelValues(queue).Observe(max(waited, 0).Seconds())
}

// Restarted implements controller.Observer.
func (m *metrics) Restarted(cause api.Cause) { m.restarts.WithLabelValues(string(cause)).Inc() }

// txn records one store transaction (store.Options.OnTxn).
func (m *metrics) txn(took time.Duration, err error) {
	result := "ok"
	if err != nil {
		result = "error"
	}
	m.txnSeconds.WithLabelValues(result).Observe(took.Seconds())
}

type routeKey struct{}

// instrument counts h's requests by the route mux would give them.
func (m *metrics) instrument(mux *http.ServeMux, h http.Handler) http.Handler {
	route := promhttp.WithLabelFromCtx("route", func(ctx context.Context) string {
		if p, _ := ctx.Value(routeKey{}).(string); p != "" {
			return p
		}
		return "none"
	})
	counted := promhttp.InstrumentHandlerCounter(m.requests, promhttp.InstrumentHandlerDuration(m.reqSeconds, h, route), route)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, pattern := mux.Handler(r)
		counted.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), routeKey{}, pattern)))
	})
}

// clusterCollector counts the cache's live jobs and nodes at each scrape,
// on the replica that leads (the others would count the same jobs again).
// A scrape allocates per series it reports, not per job.
type clusterCollector struct{ src clusterSource }

// clusterSource is what clusterCollector reads: the server (serverCluster),
// or a fake in tests.
type clusterSource interface {
	// leading says whether this replica leads, and if so why each job
	// its newest pass left waiting waits (controller.PendingKinds).
	leading() (kinds map[string]string, ok bool)
	// Range is store.Cache.Range.
	Range(job func(*api.Job), node func(*api.Node))
	// heard is when the leader last heard node's heartbeat.
	heard(node string) time.Time
}

// serverCluster is the running server as a clusterSource.
type serverCluster struct{ s *Server }

func (c serverCluster) leading() (map[string]string, bool) {
	ctl := c.s.controller()
	if ctl == nil || c.s.cache == nil {
		return nil, false
	}
	return ctl.PendingKinds(), true
}

func (c serverCluster) Range(job func(*api.Job), node func(*api.Node)) { c.s.cache.Range(job, node) }

func (c serverCluster) heard(node string) time.Time {
	at, _ := c.s.liveness().Get(node)
	return at
}

var (
	jobsDesc = prometheus.NewDesc("gangway_jobs", "Jobs not yet finished, by phase and queue (on the leader).",
		[]string{"phase", "queue"}, nil)
	pendingDesc = prometheus.NewDesc("gangway_jobs_pending", "Jobs waiting to be placed, by queue and reason: the scheduler's kind "+
		"(capacity, topology, quota, reserved, blocked, backfill, preempting, resources, invalid), array-limit, backoff (a restart's), or new (no pass has seen it yet).",
		[]string{"queue", "reason"}, nil)
	nodesDesc = prometheus.NewDesc("gangway_nodes", "Nodes by state: ready, cordoned, draining, lost (on the leader).",
		[]string{"state"}, nil)
	beatDesc = prometheus.NewDesc("gangway_node_heartbeat_age_seconds", "Time since the leader last heard each node's heartbeat.",
		[]string{"node"}, nil)
	leaderDesc = prometheus.NewDesc("gangway_leader", "1 while this replica leads (runs the controllers and the scheduler).", nil, nil)
)

// Describe implements prometheus.Collector.
func (c *clusterCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{jobsDesc, pendingDesc, nodesDesc, beatDesc, leaderDesc} {
		ch <- d
	}
}

type phaseQueue struct {
	phase api.JobPhase
	queue string
}

type queueReason struct{ queue, reason string }

// Collect implements prometheus.Collector.
func (c *clusterCollector) Collect(ch chan<- prometheus.Metric) {
	kinds, ok := c.src.leading()
	if !ok {
		ch <- prometheus.MustNewConstMetric(leaderDesc, prometheus.GaugeValue, 0)
		return
	}
	ch <- prometheus.MustNewConstMetric(leaderDesc, prometheus.GaugeValue, 1)
	now := time.Now()
	jobs := map[phaseQueue]int{}
	pending := map[queueReason]int{}
	nodes := map[string]int{"ready": 0, "cordoned": 0, "draining": 0, "lost": 0}
	var names []string
	c.src.Range(func(j *api.Job) {
		jobs[phaseQueue{j.Status.Phase, j.Spec.Queue}]++
		if p := j.Status.Phase; p != api.JobPending && p != api.JobRestarting {
			return
		}
		reason := kinds[j.ID]
		switch {
		case reason != "":
		case j.Status.NotBefore.After(now):
			reason = "backoff"
		default:
			reason = "new"
		}
		pending[queueReason{j.Spec.Queue, reason}]++
	}, func(n *api.Node) {
		names = append(names, n.Name)
		switch st := &n.Status; {
		case st.State == api.NodeLost:
			nodes["lost"]++
		case st.Draining:
			nodes["draining"]++
		case st.Cordoned:
			nodes["cordoned"]++
		default:
			nodes["ready"]++
		}
	})
	for k, n := range jobs {
		ch <- prometheus.MustNewConstMetric(jobsDesc, prometheus.GaugeValue, float64(n), string(k.phase), k.queue)
	}
	for k, n := range pending {
		ch <- prometheus.MustNewConstMetric(pendingDesc, prometheus.GaugeValue, float64(n), k.queue, k.reason)
	}
	for state, n := range nodes {
		ch <- prometheus.MustNewConstMetric(nodesDesc, prometheus.GaugeValue, float64(n), state)
	}
	for _, name := range names {
		ch <- prometheus.MustNewConstMetric(beatDesc, prometheus.GaugeValue, now.Sub(c.src.heard(name)).Seconds(), name)
	}
}
