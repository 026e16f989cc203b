package server

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/gangway/gangway/internal/api"
	"github.com/gangway/gangway/internal/base/adminhttp"
	"github.com/gangway/gangway/internal/base/wait"
	"github.com/prometheus/client_golang/prometheus"
)

// fakeCluster is a clusterSource of n waiting jobs, one in ten in a second
// queue and one in seven waiting out a backoff, on 100 nodes.
type fakeCluster struct {
	jobs  []*api.Job
	nodes []*api.Node
	kinds map[string]string
}

func newFakeCluster(n int) *fakeCluster {
	f := &fakeCluster{kinds: map[string]string{}}
	later := time.Now().Add(time.Hour)
	for i := range n {
		j := &api.Job{ID: strconv.Itoa(i + 1), Spec: api.JobSpec{Queue: "default"}, Status: api.JobStatus{Phase: api.JobPending}}
		if i%10 == 0 {
			j.Spec.Queue = "research"
		}
		if i%7 == 0 {
			j.Status.Phase, j.Status.NotBefore = api.JobRestarting, later
		} else {
			f.kinds[j.ID] = "capacity"
		}
		f.jobs = append(f.jobs, j)
	}
	for i := range 100 {
		f.nodes = append(f.nodes, &api.Node{Name: fmt.Sprintf("n%03d", i), Status: api.NodeStatus{State: api.NodeReady}})
	}
	return f
}

func (f *fakeCluster) leading() (map[string]string, bool) { return f.kinds, true }
func (f *fakeCluster) heard(string) time.Time             { return time.Now() }
func (f *fakeCluster) Range(job func(*api.Job), node func(*api.Node)) {
	for _, j := range f.jobs {
		job(j)
	}
	for _, n := range f.nodes {
		node(n)
	}
}

// collectAllocs is the allocations of one collection, drained as a
// scrape drains it.
func collectAllocs(src clusterSource) float64 {
	c := &clusterCollector{src: src}
	ch := make(chan prometheus.Metric, 1024)
	return testing.AllocsPerRun(20, func() {
		c.Collect(ch)
		for len(ch) > 0 {
			<-ch
		}
	})
}

// TestCollectAllocatesPerSeriesNotPerJob: 10,000 jobs cost a collection
// no more allocations than 70 in the same phases, queues and reasons: the
// collector reads the cache in place and allocates per series.
func TestCollectAllocatesPerSeriesNotPerJob(t *testing.T) {
	few, many := collectAllocs(newFakeCluster(70)), collectAllocs(newFakeCluster(10000))
	if many > few {
		t.Errorf("a collection allocates %g times over 70 jobs and %g over 10,000; want no more", few, many)
	}
}

// BenchmarkCollectCluster10000Jobs is the cluster collector alone (jobs,
// pending reasons, nodes, heartbeats) over 10,000 waiting jobs on 100
// nodes.
func BenchmarkCollectCluster10000Jobs(b *testing.B) {
	col := &clusterCollector{src: newFakeCluster(10000)}
	ch := make(chan prometheus.Metric, 1024)
	b.ReportAllocs()
	for b.Loop() {
		col.Collect(ch)
		for len(ch) > 0 {
			<-ch
		}
	}
}

// BenchmarkScrape10000Jobs is a whole /metrics scrape of a running server
// (its series, etcd's, Go's) with 10,000 jobs waiting; the bar is
// 100 ms. Allocations include the server's own work meanwhile (its
// controller passes over the 10,000 jobs).
func BenchmarkScrape10000Jobs(b *testing.B) {
	s, c := startMetricsServer(b)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	const n = 10000
	if _, _, err := c.SubmitAny(ctx, []byte(fmt.Sprintf(`{"name":"a","ranks":1,"gpusPerRank":1,"command":["true"],"array":"0-%d"}`, n-1))); err != nil {
		b.Fatal(err)
	}
	if err := wait.Until(ctx, 50*time.Millisecond, func() (bool, error) {
		kinds, _ := serverCluster{s}.leading()
		return len(kinds) >= n, nil
	}); err != nil {
		b.Fatalf("the controller never saw %d jobs: %v", n, err)
	}
	h := adminhttp.Handler(s.Gatherer(), false)
	req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
	b.ReportAllocs()
	for b.Loop() {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		if w.Code != http.StatusOK {
			b.Fatalf("scrape: %d", w.Code)
		}
	}
}
