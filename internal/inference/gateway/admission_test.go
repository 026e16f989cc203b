package gateway

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gangway/gangway/internal/hardware"
	"github.com/gangway/gangway/internal/inference/openai"
)

// heldEngine is a fake engine that answers each completion only when the
// test releases it, and counts what it was sent.
type heldEngine struct {
	*httptest.Server
	release chan struct{}

	mu   sync.Mutex
	got  int
	seen chan struct{} // one value per request received
}

func newHeldEngine(t *testing.T) *heldEngine {
	e := &heldEngine{release: make(chan struct{}), seen: make(chan struct{}, 100)}
	e.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case openai.PathMetrics:
			io.WriteString(w, "vllm:num_requests_running 0\n")
			return
		}
		io.Copy(io.Discard, r.Body)
		e.mu.Lock()
		e.got++
		e.mu.Unlock()
		e.seen <- struct{}{}
		select {
		case <-e.release:
		case <-r.Context().Done():
			return
		}
		io.WriteString(w, `{"usage":{"completion_tokens":1}}`)
	}))
	t.Cleanup(func() {
		e.CloseClientConnections()
		e.Close()
	})
	return e
}

func (e *heldEngine) requests() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.got
}

// oneSeat is a replica whose engine batches one sequence: a second
// request in flight saturates it.
func oneSeat(t *testing.T) *hardware.Config {
	cfg, err := hardware.NewConfig("Qwen3-8B", "H100", 1, "bf16")
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxNumSeqs = 1
	return &cfg
}

// mutableSource is a Source (and ModelSource) the test changes.
type mutableSource struct {
	mu     sync.Mutex
	eps    []Endpoint
	models []string
}

func (s *mutableSource) Endpoints(context.Context) ([]Endpoint, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Endpoint(nil), s.eps...), nil
}

func (s *mutableSource) Models(context.Context) ([]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.models...), nil
}

type answer struct {
	code       int
	retryAfter string
	body       string
}

func send(url string, i int) <-chan answer {
	out := make(chan answer, 1)
	go func() {
		resp, err := http.Post(url+openai.PathCompletions, "application/json", strings.NewReader(fmt.Sprintf(`{"model":"m","prompt":"request %d","max_tokens":4}`, i)))
		if err != nil {
			out <- answer{body: err.Error()}
			return
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		out <- answer{resp.StatusCode, resp.Header.Get("Retry-After"), string(b)}
	}()
	return out
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// A request that finds every replica saturated waits in the gateway, not
// on the engine, and goes there once the replica has room again. With
// holding off, the same request goes straight onto the full engine.
func TestAdmissionHoldsWhileSaturated(t *testing.T) {
	for _, tc := range []struct {
		name      string
		maxQueued int
	}{{"queue", 0}, {"no queue", -1}} {
		t.Run(tc.name, func(t *testing.T) {
			e := newHeldEngine(t)
			g, gw := newTestGateway(t, Static{{URL: e.URL, Model: "m", Engine: oneSeat(t)}}, Config{MaxQueued: tc.maxQueued})
			first := send(gw.URL, 1)
			<-e.seen
			second := send(gw.URL, 2)
			if tc.maxQueued < 0 {
				<-e.seen // forwarded at once onto the busy engine
				close(e.release)
				for _, a := range []answer{<-first, <-second} {
					if a.code != 200 {
						t.Errorf("answer %+v", a)
					}
				}
				return
			}
			waitFor(t, "the second request held", func() bool { n, _ := g.Held("m"); return n == 1 })
			if n := e.requests(); n != 1 {
				t.Fatalf("engine got %d requests while its one seat was taken", n)
			}
			close(e.release)
			if a := <-first; a.code != 200 {
				t.Fatalf("first: %+v", a)
			}
			if a := <-second; a.code != 200 {
				t.Fatalf("second: %+v", a)
			}
			if n, _ := g.Held("m"); n != 0 || e.requests() != 2 {
				t.Errorf("after: %d held, engine got %d", n, e.requests())
			}
			if s := g.pool("m").Stats(); s.Saturated == 0 {
				t.Errorf("stats %+v: no saturated pick counted", s)
			}
			m := seriesOf(t, gw.URL)
			for name, want := range map[string]float64{
				"gangway_gateway_admissions_total{model=m,policy=prefix-affinity,reason=immediate}":         1,
				"gangway_gateway_admissions_total{model=m,policy=prefix-affinity,reason=queued}":            1,
				"gangway_gateway_queue_seconds_count{model=m,policy=prefix-affinity,replica=" + e.URL + "}": 2,
			} {
				if got := m[name]; got != want {
					t.Errorf("%s = %v, want %v", name, got, want)
				}
			}
		})
	}
}

// Past MaxQueued a request gets 429 at once; past QueueTimeout a held one
// gets 503; both say when to retry.
func TestAdmissionBounds(t *testing.T) {
	e := newHeldEngine(t)
	_, gw := newTestGateway(t, Static{{URL: e.URL, Model: "m", Engine: oneSeat(t)}}, Config{MaxQueued: 1, QueueTimeout: 300 * time.Millisecond})
	first := send(gw.URL, 1)
	<-e.seen
	held := send(gw.URL, 2)
	time.Sleep(50 * time.Millisecond) // let it join the queue first
	if a := <-send(gw.URL, 3); a.code != http.StatusTooManyRequests || a.retryAfter == "" || !strings.Contains(a.body, `"code":"server_overloaded"`) {
		t.Errorf("over the queue bound: %+v", a)
	}
	if a := <-held; a.code != http.StatusServiceUnavailable || a.retryAfter == "" {
		t.Errorf("held past the timeout: %+v", a)
	}
	close(e.release)
	if a := <-first; a.code != 200 {
		t.Errorf("first: %+v", a)
	}
	if n := e.requests(); n != 1 {
		t.Errorf("engine got %d requests, want only the admitted one", n)
	}
	m := seriesOf(t, gw.URL)
	for name, want := range map[string]float64{
		"gangway_gateway_admissions_total{model=m,policy=prefix-affinity,reason=immediate}":     1,
		"gangway_gateway_rejections_total{model=m,policy=prefix-affinity,reason=queue_full}":    1,
		"gangway_gateway_rejections_total{model=m,policy=prefix-affinity,reason=queue_timeout}": 1,
	} {
		if got := m[name]; got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
}

// Held requests are admitted in arrival order.
func TestAdmissionIsFirstComeFirstServed(t *testing.T) {
	var mu sync.Mutex
	var order []string
	release := make(chan struct{}, 10)
	e := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == openai.PathMetrics {
			io.WriteString(w, "vllm:num_requests_running 0\n")
			return
		}
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		order = append(order, string(b))
		mu.Unlock()
		<-release
		io.WriteString(w, "{}")
	}))
	defer e.Close()
	defer close(release) // unblocks the engine if the test fails early
	g, gw := newTestGateway(t, Static{{URL: e.URL, Model: "m", Engine: oneSeat(t)}}, Config{})
	var answers []<-chan answer
	for i := range 4 {
		answers = append(answers, send(gw.URL, i))
		waitFor(t, fmt.Sprintf("request %d in", i), func() bool {
			n, _ := g.Held("m")
			mu.Lock()
			defer mu.Unlock()
			return n+len(order) == i+1
		})
	}
	for range 4 {
		release <- struct{}{}
	}
	for _, a := range answers {
		if x := <-a; x.code != 200 {
			t.Errorf("answer %+v", x)
		}
	}
	for i, b := range order {
		if !strings.Contains(b, fmt.Sprintf("request %d", i)) {
			t.Errorf("admitted in order %q", order)
			break
		}
	}
}

// A model the source knows but no replica serves yet (scaled to zero):
// its request is held, counted for the autoscaler, and forwarded once a
// replica is listed; a model the source does not know is 404.
func TestHeldUntilFirstReplica(t *testing.T) {
	e := newHeldEngine(t)
	close(e.release)
	src := &mutableSource{models: []string{"m"}}
	g, gw := newTestGateway(t, src, Config{})
	unknown := make(chan answer, 1)
	go func() {
		resp, err := http.Post(gw.URL+openai.PathCompletions, "application/json", strings.NewReader(`{"model":"nope","prompt":"x"}`))
		if err != nil {
			unknown <- answer{body: err.Error()}
			return
		}
		resp.Body.Close()
		unknown <- answer{code: resp.StatusCode}
	}()
	if a := <-unknown; a.code != http.StatusNotFound {
		t.Errorf("unknown model: %+v", a)
	}
	got := send(gw.URL, 1)
	waitFor(t, "the request held at zero replicas", func() bool { n, _ := g.Held("m"); return n == 1 })
	src.mu.Lock()
	src.eps = []Endpoint{{URL: e.URL, Model: "m", Engine: oneSeat(t)}}
	src.mu.Unlock()
	if err := g.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	if a := <-got; a.code != 200 {
		t.Fatalf("held request: %+v", a)
	}
	if n, _ := g.Held("m"); n != 0 {
		t.Errorf("%d still held", n)
	}
}

// A known model whose only replica stopped (retired before the next
// refresh) holds its request for the refresh that lists the new one,
// instead of answering 502.
func TestHeldAcrossReplicaChange(t *testing.T) {
	dead := httptest.NewServer(http.NotFoundHandler())
	deadURL := dead.URL
	dead.Close()
	live := newHeldEngine(t)
	close(live.release)
	src := &mutableSource{models: []string{"m"}, eps: []Endpoint{{URL: deadURL, Model: "m", Engine: oneSeat(t)}}}
	g, gw := newTestGateway(t, src, Config{})
	got := send(gw.URL, 1)
	waitFor(t, "the dead replica to fail", func() bool { return g.pool("m").Stats().Failures > 0 })
	src.mu.Lock()
	src.eps = []Endpoint{{URL: live.URL, Model: "m", Engine: oneSeat(t)}}
	src.mu.Unlock()
	for {
		// What Run does: refresh until the held request is through.
		if err := g.Refresh(context.Background()); err != nil {
			t.Fatal(err)
		}
		select {
		case a := <-got:
			if a.code != 200 {
				t.Fatalf("request across the replica change: %+v", a)
			}
			return
		case <-time.After(20 * time.Millisecond):
		}
	}
}
