package server

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gangway/gangway/internal/api/client"
	"github.com/gangway/gangway/internal/base/wait"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
)

// startMetricsServer runs a server with both admin listeners on loopback
// and returns it, once it leads, with an admin client.
func startMetricsServer(t testing.TB) (*Server, *client.Client) {
	t.Helper()
	s, err := New(Config{DataDir: filepath.Join(t.TempDir(), "server"), MetricsListen: "127.0.0.1:0", DebugListen: "127.0.0.1:0",
		APIRate: -1, AuditLog: "-"})
	if err != nil {
		t.Fatal(err)
	}
	c, _, stop := runServer(t, s)
	t.Cleanup(stop)
	ctx := context.Background()
	wctx, wcancel := context.WithTimeout(ctx, time.Minute)
	defer wcancel()
	if err := wait.Until(wctx, 20*time.Millisecond, func() (bool, error) { return s.controller() != nil, nil }); err != nil {
		t.Fatalf("never led: %v", err)
	}
	return s, c
}

// scrape reads url's metrics as Prometheus would.
func scrape(t testing.TB, url string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("GET %s: %s: %s", url, resp.Status, b)
	}
	var p expfmt.TextParser
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parse %s: %v", url, err)
	}
	return fams
}

// value is the value of fams' series name with labels (a subset of its
// labels); ok is false when there is none.
func value(fams map[string]*dto.MetricFamily, name string, labels map[string]string) (v float64, ok bool) {
	f := fams[name]
	if f == nil {
		return 0, false
	}
next:
	for _, m := range f.Metric {
		for k, want := range labels {
			found := false
			for _, l := range m.Label {
				if l.GetName() == k {
					found = l.GetValue() == want
					break
				}
			}
			if !found {
				continue next
			}
		}
		switch {
		case m.Gauge != nil:
			return m.Gauge.GetValue(), true
		case m.Counter != nil:
			return m.Counter.GetValue(), true
		case m.Histogram != nil:
			return float64(m.Histogram.GetSampleCount()), true
		}
	}
	return 0, false
}

// TestMetricsReportJobsNodesRequestsAndEtcd: the metrics listener serves
// the cluster's jobs by phase, queue and pending reason, the leader
// flag, the API's requests by route and code, store transactions, and
// etcd's and Go's own series; the debug listener serves pprof too, and the
// metrics listener does not.
func TestMetricsReportJobsNodesRequestsAndEtcd(t *testing.T) {
	s, c := startMetricsServer(t)
	ctx := context.Background()
	for range 3 {
		if _, err := c.Submit(ctx, []byte(`{"name":"m","ranks":1,"gpusPerRank":1,"command":["true"]}`)); err != nil {
			t.Fatal(err)
		}
	}
	url := "http://" + s.MetricsAddr().String() + "/metrics"
	var fams map[string]*dto.MetricFamily
	// No node has GPUs: each job waits, for a reason of the scheduler's
	// once a pass saw it (not "new").
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	err := wait.Until(wctx, 20*time.Millisecond, func() (bool, error) {
		fams = scrape(t, url)
		var n float64
		for _, m := range fams["gangway_jobs_pending"].GetMetric() {
			for _, l := range m.Label {
				if l.GetName() == "reason" && l.GetValue() != "new" && l.GetValue() != "" {
					n += m.GetGauge().GetValue()
				}
			}
		}
		return n == 3, nil
	})
	if err != nil {
		t.Fatalf("never saw 3 jobs pending for a scheduler's reason; last scrape's gangway_jobs_pending: %v, gangway_jobs: %v", fams["gangway_jobs_pending"], fams["gangway_jobs"])
	}
	for _, want := range []struct {
		name   string
		labels map[string]string
		min    float64
	}{
		{"gangway_jobs", map[string]string{"phase": "Pending", "queue": "default"}, 3},
		{"gangway_leader", nil, 1},
		{"gangway_api_requests_total", map[string]string{"route": "POST /v1/jobs", "method": "post", "code": "201"}, 3},
		{"gangway_store_txn_duration_seconds", map[string]string{"result": "ok"}, 3},
		{"gangway_controller_pass_duration_seconds", nil, 1},
		{"gangway_nodes", map[string]string{"state": "ready"}, 0},
		{"etcd_server_has_leader", nil, 1},
		{"go_goroutines", nil, 1},
	} {
		v, ok := value(fams, want.name, want.labels)
		if !ok || v < want.min {
			t.Errorf("%s%v = %g (present: %v); want at least %g", want.name, want.labels, v, ok, want.min)
		}
	}
	for _, tc := range []struct {
		addr net.Addr
		code int
	}{{s.MetricsAddr(), http.StatusNotFound}, {s.DebugAddr(), http.StatusOK}} {
		resp, err := http.Get(fmt.Sprintf("http://%s/debug/pprof/goroutine?debug=1", tc.addr))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.code {
			t.Errorf("pprof on %s: %d; want %d", tc.addr, resp.StatusCode, tc.code)
		}
	}
	if !strings.HasPrefix(s.DebugAddr().String(), "127.0.0.1:") {
		t.Errorf("debug listener on %s", s.DebugAddr())
	}
}
