package gateway

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gangway/gangway/internal/hardware"
	"github.com/gangway/gangway/internal/inference/enginesim"
	"github.com/gangway/gangway/internal/inference/openai"
	"github.com/gangway/gangway/internal/inference/promtext"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// startEngine runs a simulated Qwen3-8B engine on loopback, 50× faster
// than real time.
func startEngine(t *testing.T) *httptest.Server {
	t.Helper()
	cfg, err := hardware.NewConfig("Qwen3-8B", "H100", 1, "bf16")
	if err != nil {
		t.Fatal(err)
	}
	s, err := enginesim.NewServer(enginesim.ServerConfig{Engine: cfg, TimeScale: 50})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); s.Run(ctx) }()
	hs := httptest.NewServer(s)
	t.Cleanup(func() {
		hs.CloseClientConnections()
		hs.Close()
		cancel()
		<-done
	})
	return hs
}

// startGateway fronts the given engine URLs with a refreshed gateway.
func startGateway(t *testing.T, policy string, urls ...string) (*Gateway, *httptest.Server) {
	t.Helper()
	var eps Static
	for _, u := range urls {
		eps = append(eps, Endpoint{URL: u})
	}
	return newTestGateway(t, eps, Config{Policy: policy, ScrapeTimeout: 2 * time.Second})
}

// newTestGateway serves a gateway over src, refreshed once, until the
// test ends.
func newTestGateway(t *testing.T, src Source, cfg Config) (*Gateway, *httptest.Server) {
	t.Helper()
	cfg.Source, cfg.Seed = src, 1
	g, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(g)
	t.Cleanup(func() {
		hs.CloseClientConnections()
		hs.Close()
		g.closeIdle()
	})
	return g, hs
}

func postJSON(t *testing.T, ctx context.Context, url, body string) *http.Response {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// samplesOf scrapes url's /metrics.
func samplesOf(t *testing.T, url string) []promtext.Sample {
	t.Helper()
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	samples, err := promtext.Parse(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return samples
}

func metricsOf(t *testing.T, url string) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	for _, s := range samplesOf(t, url) {
		k := s.Name
		if r := s.Label("finished_reason"); r != "" {
			k += "/" + r
		}
		if s.Label("le") == "" {
			out[k] += s.Value
		}
	}
	return out
}

// seriesOf returns the gateway's samples as "name{l1=v1,l2=v2}" (labels
// in the order served, buckets left out) to their values.
func seriesOf(t *testing.T, url string) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	for _, s := range samplesOf(t, url) {
		if s.Label("le") != "" {
			continue
		}
		var ls []string
		for _, l := range s.Labels {
			ls = append(ls, l.Name+"="+l.Value)
		}
		out[s.Name+"{"+strings.Join(ls, ",")+"}"] = s.Value
	}
	return out
}

func TestStreamThroughGateway(t *testing.T) {
	e := startEngine(t)
	_, gw := startGateway(t, "", e.URL)
	resp := postJSON(t, context.Background(), gw.URL+openai.PathChatCompletions,
		`{"model":"Qwen3-8B","messages":[{"role":"user","content":"hello"}],"max_tokens":5,"stream":true,"stream_options":{"include_usage":true}}`)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("status %d, type %q: %s", resp.StatusCode, resp.Header.Get("Content-Type"), b)
	}
	if n := strings.Count(string(b), "data: "); n != 8 || !strings.HasSuffix(string(b), "data: [DONE]\n\n") {
		t.Errorf("want role + 5 tokens + usage + [DONE] events, got %d:\n%s", n, b)
	}
}

// A fake engine that sends one event, then waits for the test: the
// client must see the event before the engine finishes.
func TestStreamingIsNotBuffered(t *testing.T) {
	release := make(chan struct{})
	fake := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case openai.PathModels:
			io.WriteString(w, `{"object":"list","data":[{"id":"m"}]}`)
		case openai.PathMetrics:
			io.WriteString(w, "vllm:num_requests_running 0\n")
		default:
			w.Header().Set("Content-Type", "text/event-stream")
			io.WriteString(w, "data: {\"first\":true}\n\n")
			w.(http.Flusher).Flush()
			select {
			case <-release:
			case <-r.Context().Done():
			}
			io.WriteString(w, "data: [DONE]\n\n")
		}
	}))
	defer fake.Close()
	_, gw := startGateway(t, PolicyRoundRobin, fake.URL)
	resp := postJSON(t, context.Background(), gw.URL+openai.PathCompletions, `{"model":"m","prompt":"x","stream":true}`)
	defer resp.Body.Close()
	got := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(resp.Body).ReadString('\n')
		got <- line
	}()
	select {
	case line := <-got:
		if line != "data: {\"first\":true}\n" {
			t.Errorf("first line %q", line)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("first event held back by the gateway")
	}
	close(release)
}

func TestPrefixAffinityOverHTTP(t *testing.T) {
	e1, e2 := startEngine(t), startEngine(t)
	_, gw := startGateway(t, PolicyPrefixAffinity, e1.URL, e2.URL)
	system := strings.Repeat("You are the support agent of ACME. Policy text. ", 300)
	for i := range 6 {
		resp := postJSON(t, context.Background(), gw.URL+openai.PathChatCompletions, fmt.Sprintf(
			`{"model":"Qwen3-8B","max_tokens":2,"ignore_eos":true,"messages":[{"role":"system","content":%q},{"role":"user","content":"question %d"}]}`, system, i))
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("request %d: status %d", i, resp.StatusCode)
		}
	}
	m1, m2 := metricsOf(t, e1.URL), metricsOf(t, e2.URL)
	n1, n2 := m1["vllm:request_success_total/length"], m2["vllm:request_success_total/length"]
	if n1+n2 != 6 || (n1 != 0 && n2 != 0) {
		t.Errorf("requests split %v/%v; the shared system prompt should keep them on one engine", n1, n2)
	}
	if hits := m1["vllm:prefix_cache_hits_total"] + m2["vllm:prefix_cache_hits_total"]; hits < 5*float64(len(system)/4-16) {
		t.Errorf("engine prefix cache hits = %v, want most of 5 × %d tokens", hits, len(system)/4)
	}
}

func TestFailoverToLiveReplica(t *testing.T) {
	live := startEngine(t)
	doomed := startEngine(t)
	g, gw := startGateway(t, PolicyRoundRobin, live.URL, doomed.URL)
	doomed.CloseClientConnections()
	doomed.Close() // the replica dies between refreshes
	for i := range 8 {
		resp := postJSON(t, context.Background(), gw.URL+openai.PathCompletions,
			fmt.Sprintf(`{"model":"Qwen3-8B","prompt":"request %d","max_tokens":3,"stream":true}`, i))
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.Contains(string(b), "[DONE]") {
			t.Fatalf("request %d: status %d: %s", i, resp.StatusCode, b)
		}
	}
	rt := g.pool("Qwen3-8B")
	st := rt.Stats()
	if st.Retries == 0 || st.Failures == 0 {
		t.Errorf("stats %+v: want retries and failures from the dead replica", st)
	}
	if !rt.Ejected(doomed.URL, time.Now()) {
		t.Error("dead replica not ejected")
	}
	// A refresh sees the failed scrape too.
	g.Refresh(context.Background())
	if !rt.Ejected(doomed.URL, time.Now().Add(time.Hour)) {
		t.Error("dead replica healthy after a failed scrape")
	}
}

func TestAllReplicasDown(t *testing.T) {
	e := startEngine(t)
	_, gw := startGateway(t, "", e.URL)
	e.CloseClientConnections()
	e.Close()
	resp := postJSON(t, context.Background(), gw.URL+openai.PathCompletions, `{"model":"Qwen3-8B","prompt":"x"}`)
	defer resp.Body.Close()
	var body openai.ErrorBody
	json.NewDecoder(resp.Body).Decode(&body)
	if resp.StatusCode != http.StatusBadGateway || body.Error.Type != "server_error" || !strings.Contains(body.Error.Message, "no replica of model Qwen3-8B") {
		t.Errorf("status %d, %+v", resp.StatusCode, body)
	}
}

func TestCancellationReachesEngine(t *testing.T) {
	e := startEngine(t)
	_, gw := startGateway(t, "", e.URL)
	ctx, cancel := context.WithCancel(context.Background())
	resp := postJSON(t, ctx, gw.URL+openai.PathCompletions,
		`{"model":"Qwen3-8B","prompt":"tell me a very long story","max_tokens":30000,"stream":true,"ignore_eos":true}`)
	if _, err := bufio.NewReader(resp.Body).ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	cancel()
	resp.Body.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		m := metricsOf(t, e.URL)
		if m["vllm:request_success_total/abort"] == 1 && m["vllm:num_requests_running"] == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("engine did not abort: %v aborts, %v running", m["vllm:request_success_total/abort"], m["vllm:num_requests_running"])
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestGatewayAPI(t *testing.T) {
	e := startEngine(t)
	_, gw := startGateway(t, "", e.URL)
	tests := []struct {
		name, method, path, body string
		code                     int
		want                     string
	}{
		{"models", "GET", "/v1/models", "", 200, `"id":"Qwen3-8B"`},
		{"health", "GET", "/health", "", 200, ""},
		{"unknown model", "POST", "/v1/completions", `{"model":"nope","prompt":"x"}`, 404, "The model `nope` does not exist."},
		{"bad body", "POST", "/v1/completions", `{"model":`, 400, "request body"},
		{"unknown path", "GET", "/v2/whatever", "", 404, "Invalid URL (GET /v2/whatever)"},
		{"non-streamed", "POST", "/v1/completions", `{"model":"Qwen3-8B","prompt":"hi","max_tokens":4,"ignore_eos":true}`, 200, `"completion_tokens":4`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest(tc.method, gw.URL+tc.path, strings.NewReader(tc.body))
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tc.code || !strings.Contains(string(b), tc.want) {
				t.Errorf("%s %s = %d %s; want %d containing %q", tc.method, tc.path, resp.StatusCode, b, tc.code, tc.want)
			}
		})
	}
}

func TestGatewayMetrics(t *testing.T) {
	e := startEngine(t)
	g, gw := startGateway(t, "", e.URL)
	for i := range 3 {
		resp := postJSON(t, context.Background(), gw.URL+openai.PathCompletions,
			fmt.Sprintf(`{"model":"Qwen3-8B","prompt":"same prefix for all of them, quite long indeed, long enough to fill a few blocks of sixteen tokens each: %d","max_tokens":4,"stream":true,"ignore_eos":true}`, i))
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	g.Refresh(context.Background())
	m := metricsOf(t, gw.URL)
	checks := map[string]float64{
		"gangway_gateway_ttft_seconds_count":      3,
		"gangway_gateway_tpot_seconds_count":      3,
		"gangway_gateway_decisions_total":         3,
		"gangway_gateway_requests_total":          3,
		"gangway_gateway_replica_in_flight":       0,
		"gangway_gateway_replica_capacity_tokens": float64(CapacityFromConfig(mustConfig("Qwen3-8B", "H100", 1, "bf16")).KVTokens),
	}
	for name, want := range checks {
		if got, ok := m[name]; !ok || got != want {
			t.Errorf("%s = %v (present %v), want %v", name, got, ok, want)
		}
	}
	if m["gangway_gateway_prefix_hit_blocks_total"] == 0 {
		t.Error("no prefix hits counted for three prompts sharing a prefix")
	}
	if _, ok := m["gangway_gateway_decisions_per_second"]; !ok {
		t.Error("decisions_per_second missing")
	}
}

// Per model and replica: each streamed request is one routing decision,
// one immediate admission and one TTFT, TPOT, end-to-end and queue
// observation on the replica that answered; a request for a model nobody
// serves is one rejection.
func TestGatewayMetricsPerReplica(t *testing.T) {
	e := startEngine(t)
	_, gw := startGateway(t, "", e.URL)
	const n = 3
	streamAndMiss(t, gw.URL, n)
	m := seriesOf(t, gw.URL)
	rep := "model=Qwen3-8B,policy=prefix-affinity,replica=" + e.URL
	for name, want := range map[string]float64{
		"gangway_gateway_ttft_seconds_count{" + rep + "}":                                          n,
		"gangway_gateway_tpot_seconds_count{" + rep + "}":                                          n,
		"gangway_gateway_e2e_seconds_count{" + rep + "}":                                           n,
		"gangway_gateway_queue_seconds_count{" + rep + "}":                                         n,
		"gangway_gateway_replica_decisions_total{" + rep + "}":                                     n,
		"gangway_gateway_admissions_total{model=Qwen3-8B,policy=prefix-affinity,reason=immediate}": n,
		"gangway_gateway_rejections_total{model=nope,policy=prefix-affinity,reason=unknown_model}": 1,
		"gangway_gateway_requests_total{code=200,model=Qwen3-8B,policy=prefix-affinity}":           n,
		"gangway_gateway_requests_total{code=404,model=nope,policy=prefix-affinity}":               1,
	} {
		if got, ok := m[name]; !ok || got != want {
			t.Errorf("%s = %v (present %v), want %v", name, got, ok, want)
		}
	}
	ttft, tpot, e2e := m["gangway_gateway_ttft_seconds_sum{"+rep+"}"], m["gangway_gateway_tpot_seconds_sum{"+rep+"}"], m["gangway_gateway_e2e_seconds_sum{"+rep+"}"]
	if !(ttft > 0 && tpot > 0 && ttft < e2e && tpot < e2e) {
		t.Errorf("sums: ttft %v, tpot %v, e2e %v; want positive, ttft and tpot below e2e", ttft, tpot, e2e)
	}
	if _, ok := m["gangway_gateway_admissions_total{model=Qwen3-8B,policy=prefix-affinity,reason=queued}"]; ok {
		t.Error("a queued admission counted with nothing saturated")
	}
}

func TestReplicasView(t *testing.T) {
	e := startEngine(t)
	g, _ := startGateway(t, "", e.URL)
	got := g.Replicas("Qwen3-8B", time.Now())
	if len(got) != 1 || got[0].ID != e.URL || got[0].Capacity.KVTokens == 0 || got[0].InFlight != 0 {
		t.Errorf("Replicas = %+v", got)
	}
	if g.Replicas("nope", time.Now()) != nil {
		t.Error("unknown model has replicas")
	}
}

func TestCapacityFromEngineMetrics(t *testing.T) {
	e := startEngine(t)
	g, _ := startGateway(t, "", e.URL)
	g.mu.Lock()
	ep := g.eps[e.URL]
	g.mu.Unlock()
	want := CapacityFromConfig(mustConfig("Qwen3-8B", "H100", 1, "bf16")).KVTokens
	if ep.model != "Qwen3-8B" || ep.capacity.KVTokens != want {
		t.Errorf("learned model %q capacity %d; want Qwen3-8B %d from gangway:engine_info", ep.model, ep.capacity.KVTokens, want)
	}
}

func TestParseEndpoints(t *testing.T) {
	tests := []struct {
		in, want string
		n        int
	}{
		{"http://127.0.0.1:8000, http://127.0.0.1:8001/", "", 2},
		{"127.0.0.1:8000", "endpoint 1", 0},
		{"http://a:1,ftp://b", "endpoint 2", 0},
		{" , ", "no endpoints", 0},
	}
	for _, tc := range tests {
		got, err := ParseEndpoints(tc.in)
		if tc.want == "" {
			if err != nil || len(got) != tc.n || got[1].URL != "http://127.0.0.1:8001" {
				t.Errorf("ParseEndpoints(%q) = %v, %v", tc.in, got, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseEndpoints(%q) error = %v, want %q", tc.in, err, tc.want)
		}
	}
}

func FuzzParseEndpoints(f *testing.F) {
	f.Add("http://127.0.0.1:8000,http://[::1]:9/")
	f.Add("https://x")
	f.Fuzz(func(t *testing.T, in string) {
		eps, err := ParseEndpoints(in)
		if err != nil {
			return
		}
		for _, e := range eps {
			if !strings.HasPrefix(e.URL, "http://") && !strings.HasPrefix(e.URL, "https://") {
				t.Fatalf("accepted %q", e.URL)
			}
		}
	})
}

// Pooled request buffers never leak one request's bytes into another's:
// an echoing engine (which answers 503 to every third request first, so
// that bodies are resent to another replica) must get each body intact.
func TestPooledBodiesArriveIntact(t *testing.T) {
	var mu sync.Mutex
	seen := map[string]int{}
	echo := func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case openai.PathModels:
			io.WriteString(w, `{"object":"list","data":[{"id":"m"}]}`)
			return
		case openai.PathMetrics:
			io.WriteString(w, "vllm:num_requests_running 0\n")
			return
		}
		b, _ := io.ReadAll(r.Body)
		sum := fmt.Sprintf("%x", sha256.Sum256(b))
		mu.Lock()
		seen[sum]++
		n := seen[sum]
		mu.Unlock()
		if n == 1 && b[len(b)-3]%3 == 0 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprintf(w, "data: %s\n\ndata: [DONE]\n\n", sum)
	}
	a, b := httptest.NewServer(http.HandlerFunc(echo)), httptest.NewServer(http.HandlerFunc(echo))
	defer a.Close()
	defer b.Close()
	_, gw := startGateway(t, PolicyRoundRobin, a.URL, b.URL)
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for i := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			path, body := openai.PathCompletions, fmt.Sprintf(`{"model":"m","stream":true,"prompt":%q,"x":%d}`, strings.Repeat(fmt.Sprint(i), 100*(i%7+1)), i)
			if i%2 == 1 {
				path, body = openai.PathChatCompletions, fmt.Sprintf(`{"model":"m","stream":true,"messages":[{"role":"user","content":"line\n%s"}],"x":%d}`, strings.Repeat("é", 50*i), i)
			}
			resp, err := http.Post(gw.URL+path, "application/json", strings.NewReader(body))
			if err != nil {
				errs <- err
				return
			}
			got, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if want := fmt.Sprintf("data: %x\n\ndata: [DONE]\n\n", sha256.Sum256([]byte(body))); string(got) != want {
				errs <- fmt.Errorf("request %d: status %d, answer %q, want %q", i, resp.StatusCode, got, want)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// A finished request's buffers go back to the pool: the transport's
// count of body writes balances (it once went negative, and no buffer
// was ever reused).
func TestRequestBuffersAreReused(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(-1)) // the pool survives
	e := startEngine(t)
	g, gw := startGateway(t, "", e.URL)
	// The race detector makes the pool drop a quarter of what it is
	// given: a few tries.
	for range 10 {
		resp := postJSON(t, context.Background(), gw.URL+openai.PathCompletions, `{"model":"Qwen3-8B","prompt":"hello there","max_tokens":2}`)
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		b := g.getBufs()
		if b.open.Load() != 0 {
			t.Fatalf("%d body writes open after a finished request", b.open.Load())
		}
		if cap(b.body) > 0 {
			return
		}
	}
	t.Error("no request's buffers came back from the pool")
}

// fakeCompletions is a simulated engine whose /metrics and /v1/models
// answer (so refreshes find it healthy) but whose completions are
// handle's, after it has read the request as an engine does.
func fakeCompletions(t *testing.T, handle http.HandlerFunc) string {
	t.Helper()
	inner := startEngine(t)
	u, err := url.Parse(inner.URL)
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(u)
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != openai.PathCompletions {
			proxy.ServeHTTP(w, r)
			return
		}
		io.ReadAll(r.Body)
		handle(w, r)
	}))
	t.Cleanup(func() {
		hs.CloseClientConnections()
		hs.Close()
	})
	return hs.URL
}

// hungEngine takes completions and never answers them: they wait for the
// gateway to give up. ended counts those whose request the gateway
// cancelled.
func hungEngine(t *testing.T) (url string, started, ended *atomic.Int32) {
	started, ended = new(atomic.Int32), new(atomic.Int32)
	url = fakeCompletions(t, func(w http.ResponseWriter, r *http.Request) {
		started.Add(1)
		<-r.Context().Done()
		ended.Add(1)
	})
	return url, started, ended
}

func TestHungReplicaTimesOutToTheNext(t *testing.T) {
	for _, tc := range []struct {
		name   string
		stream bool
		cfg    Config
	}{
		// The live replica must answer within the bound too, on a loaded
		// machine: a second is ample for the simulated engine.
		{"streamed", true, Config{StreamHeaderTimeout: time.Second}},
		{"not streamed", false, Config{HeaderTimeout: time.Second}},
		{"net/http transport", true, Config{StreamHeaderTimeout: time.Second, Transport: &http.Transport{}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			live := startEngine(t)
			hung, started, ended := hungEngine(t)
			cfg := tc.cfg
			cfg.Policy, cfg.ScrapeTimeout = PolicyRoundRobin, 2*time.Second
			g, gw := newTestGateway(t, Static{{URL: hung}, {URL: live.URL}}, cfg)
			// Without the bound the first request would hang: fail instead.
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			for i := range 4 {
				resp := postJSON(t, ctx, gw.URL+openai.PathCompletions,
					fmt.Sprintf(`{"model":"Qwen3-8B","prompt":"request %d","max_tokens":3,"stream":%v}`, i, tc.stream))
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 || !strings.Contains(string(b), "choices") {
					t.Fatalf("request %d: status %d: %s", i, resp.StatusCode, b)
				}
			}
			if started.Load() == 0 {
				t.Fatal("no request reached the hung replica: the test proves nothing")
			}
			deadline := time.Now().Add(10 * time.Second)
			for ended.Load() != started.Load() && time.Now().Before(deadline) {
				time.Sleep(10 * time.Millisecond)
			}
			if s, e := started.Load(), ended.Load(); s != e {
				t.Errorf("the hung replica still holds %d of its %d requests: the gateway did not cancel them", s-e, s)
			}
			if st := g.pool("Qwen3-8B").Stats(); st.Failures == 0 || st.Retries == 0 {
				t.Errorf("stats %+v: want the hung replica's attempts counted as failures and retried", st)
			}
		})
	}
}

// The bound is on the headers only: a stream that pauses longer than it
// after its headers is relayed whole.
func TestHeaderTimeoutSparesSlowStreams(t *testing.T) {
	for _, tr := range []struct {
		name string
		rt   http.RoundTripper
	}{{"own transport", nil}, {"net/http transport", &http.Transport{}}} {
		t.Run(tr.name, func(t *testing.T) {
			t.Parallel()
			slow := fakeCompletions(t, func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "text/event-stream")
				fmt.Fprint(w, "data: {\"choices\":[{\"text\":\"a\"}]}\n\n")
				w.(http.Flusher).Flush()
				time.Sleep(time.Second) // four header timeouts
				fmt.Fprint(w, "data: {\"choices\":[{\"text\":\"b\"}]}\n\ndata: [DONE]\n\n")
			})
			_, gw := newTestGateway(t, Static{{URL: slow}}, Config{StreamHeaderTimeout: 250 * time.Millisecond, Transport: tr.rt, ScrapeTimeout: 2 * time.Second})
			resp := postJSON(t, context.Background(), gw.URL+openai.PathCompletions, `{"model":"Qwen3-8B","prompt":"x","max_tokens":2,"stream":true}`)
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 || !strings.Contains(string(b), `"b"`) || !strings.Contains(string(b), "[DONE]") {
				t.Fatalf("status %d, body %q: want the whole stream", resp.StatusCode, b)
			}
		})
	}
}

func TestHeaderTimeoutDefaults(t *testing.T) {
	g, err := New(Config{Source: Static{}})
	if err != nil {
		t.Fatal(err)
	}
	if d := g.headerTimeout(true); d != 60*time.Second {
		t.Errorf("streamed: %v, want 60s", d)
	}
	if d := g.headerTimeout(false); d != 0 {
		t.Errorf("not streamed: %v, want no bound", d)
	}
	g, _ = New(Config{Source: Static{}, StreamHeaderTimeout: -1})
	if d := g.headerTimeout(true); d != 0 {
		t.Errorf("streamed with -1: %v, want no bound", d)
	}
	// A flag's 0 means no bound, not the default.
	g, _ = New(Config{Source: Static{}, StreamHeaderTimeout: TimeoutFromFlag(0), HeaderTimeout: TimeoutFromFlag(5 * time.Second)})
	if s, n := g.headerTimeout(true), g.headerTimeout(false); s != 0 || n != 5*time.Second {
		t.Errorf("from flags 0 and 5s: streamed %v, not streamed %v; want no bound and 5s", s, n)
	}
}

// TestStats: Stats counts each model's answers and its streamed answers'
// TTFT and TPOT, as the series do.
func TestStats(t *testing.T) {
	e := startEngine(t)
	g, gw := startGateway(t, "", e.URL)
	const n = 3
	streamAndMiss(t, gw.URL, n)
	st, err := g.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if len(st) != 2 || st[0].Model != "Qwen3-8B" || st[1].Model != "nope" {
		t.Fatalf("stats %+v; want Qwen3-8B and nope, in that order", st)
	}
	q := st[0]
	if q.Requests != n || q.Errors != 0 || q.TTFTCount != n || q.TPOTCount != n || !(q.TTFTSeconds > 0 && q.TPOTSeconds > 0) {
		t.Errorf("Qwen3-8B: %+v; want %d answers, each with a TTFT and a TPOT", q, n)
	}
	if nope := st[1]; nope.Requests != 1 || nope.TTFTCount != 0 {
		t.Errorf("nope: %+v; want one answer (its 404) and no latency", nope)
	}
}

// streamAndMiss sends the gateway at url n streamed completions for
// Qwen3-8B, then one for a model nobody serves.
func streamAndMiss(t *testing.T, url string, n int) {
	t.Helper()
	for i := range n {
		resp := postJSON(t, context.Background(), url+openai.PathCompletions,
			fmt.Sprintf(`{"model":"Qwen3-8B","prompt":"request %d","max_tokens":8,"stream":true,"ignore_eos":true}`, i))
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	resp := postJSON(t, context.Background(), url+openai.PathCompletions, `{"model":"nope","prompt":"x"}`)
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
}
