package infcli

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// syncBuffer is a bytes.Buffer safe to read while a command writes it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

var listenRE = regexp.MustCompile(`listening on (http://\S+)`)

// start runs Main in the background and returns the URL it listens on
// and a stop function that cancels it and returns its exit code.
func start(t *testing.T, args ...string) (string, func() int) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var out, errOut syncBuffer
	done := make(chan int, 1)
	go func() { done <- Main(ctx, args, &out, &errOut) }()
	deadline := time.Now().Add(20 * time.Second)
	for {
		if m := listenRE.FindStringSubmatch(out.String()); m != nil {
			return m[1], func() int { cancel(); return <-done }
		}
		select {
		case code := <-done:
			cancel()
			t.Fatalf("%v exited %d: %s", args, code, errOut.String())
		default:
		}
		if time.Now().After(deadline) {
			cancel()
			<-done
			t.Fatalf("%v never listened: %s", args, errOut.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestUsage(t *testing.T) {
	tests := []struct {
		args []string
		code int
		want string
	}{
		{nil, 2, "usage"},
		{[]string{"frobnicate"}, 2, "unknown command"},
		{[]string{"bench"}, 2, "usage: gangway bench inference"},
		{[]string{"engine-sim", "--time", "sideways"}, 2, "time mode"},
		{[]string{"engine-sim", "--model", "GPT-9"}, 2, "unknown model"},
		{[]string{"gateway"}, 2, "--endpoints is required"},
		{[]string{"gateway", "--endpoints", "localhost:1"}, 2, "endpoint 1"},
		{[]string{"gateway", "--endpoints", "http://127.0.0.1:1", "--policy", "psychic"}, 2, "unknown policy"},
		{[]string{"bench", "inference", "-o", "xml"}, 2, "want table, json or yaml"},
		{[]string{"bench", "inference", "--scenario", "nope"}, 1, "unknown scenario"},
		{[]string{"engine-sim", "stray"}, 2, "unexpected argument"},
		{[]string{"gateway", "--endpoints", "http://127.0.0.1:1", "--api-keys", "/nonexistent/keys.yaml"}, 2, "--api-keys: read key file"},
		{[]string{"gateway", "--new-api-key", "a b"}, 2, `keys[0].name: "a b"`},
	}
	for _, tc := range tests {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			var out, errOut bytes.Buffer
			code := Main(context.Background(), tc.args, &out, &errOut)
			if code != tc.code || !strings.Contains(errOut.String(), tc.want) {
				t.Errorf("exit %d, stderr %q; want %d containing %q", code, errOut.String(), tc.code, tc.want)
			}
		})
	}
}

func TestEngineSimAndGateway(t *testing.T) {
	engine, stopEngine := start(t, "engine-sim", "--listen", "127.0.0.1:0", "--model", "Qwen3-8B", "--time", "zero")
	gw, stopGateway := start(t, "gateway", "--listen", "127.0.0.1:0", "--endpoints", engine)

	// The gateway learns the model from the engine on its first refresh.
	var resp *http.Response
	deadline := time.Now().Add(10 * time.Second)
	for {
		var err error
		resp, err = http.Post(gw+"/v1/completions", "application/json",
			strings.NewReader(`{"model":"Qwen3-8B","prompt":"hello","max_tokens":3,"stream":true,"ignore_eos":true}`))
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode == 200 || time.Now().After(deadline) {
			break
		}
		resp.Body.Close()
		time.Sleep(20 * time.Millisecond)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.HasSuffix(string(b), "data: [DONE]\n\n") {
		t.Fatalf("through the gateway: %d %s", resp.StatusCode, b)
	}
	if code := stopGateway(); code != 0 {
		t.Errorf("gateway exit %d", code)
	}
	if code := stopEngine(); code != 0 {
		t.Errorf("engine-sim exit %d", code)
	}
}

func TestEngineSimPicksTP(t *testing.T) {
	var errOut syncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	var out syncBuffer
	go func() {
		done <- Main(ctx, []string{"engine-sim", "--listen", "127.0.0.1:0", "--model", "Qwen3-32B", "--gpu", "H100"}, &out, &errOut)
	}()
	for !strings.Contains(out.String(), "listening") {
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	<-done
	if !strings.Contains(errOut.String(), "Qwen3-32B on 2 × H100") {
		t.Errorf("want the smallest TP that fits (2): %s", errOut.String())
	}
}

func TestBenchInferenceJSON(t *testing.T) {
	var out, errOut bytes.Buffer
	code := Main(context.Background(), []string{"bench", "inference", "-o", "json", "--quick", "--scenario", "noreuse", "--policy", "round-robin,prefix-affinity"}, &out, &errOut)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	var rep struct {
		Results []map[string]any `json:"results"`
		Checks  []map[string]any `json:"checks"`
	}
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out.String())
	}
	if len(rep.Results) != 2 || len(rep.Checks) != 1 {
		t.Fatalf("results %d, checks %d", len(rep.Results), len(rep.Checks))
	}
	for _, k := range []string{"scenario", "policy", "ttft_p50_ms", "ttft_p99_ms", "tpot_p50_ms", "e2e_p99_ms", "goodput", "requests"} {
		if _, ok := rep.Results[0][k]; !ok {
			t.Errorf("result lacks %q: %v", k, rep.Results[0])
		}
	}
}

func TestBenchInferenceText(t *testing.T) {
	var out, errOut bytes.Buffer
	code := Main(context.Background(), []string{"bench", "inference", "--quick", "--scenario", "noreuse", "--policy", "round-robin,prefix-affinity"}, &out, &errOut)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	for _, want := range []string{"ttft p99 ms", "prefix-affinity", "round-robin", "noreuse: default TTFT p99"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}

func TestEngineSimReplicas(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	var out, errOut syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- Main(ctx, []string{"engine-sim", "--replicas", "3", "--listen", "127.0.0.1:0", "--model", "Qwen3-8B", "--time", "zero"}, &out, &errOut)
	}()
	var urls []string
	for deadline := time.Now().Add(20 * time.Second); len(urls) < 3; time.Sleep(10 * time.Millisecond) {
		urls = nil
		for _, m := range listenRE.FindAllStringSubmatch(out.String(), -1) {
			urls = append(urls, m[1])
		}
		if time.Now().After(deadline) {
			cancel()
			<-done
			t.Fatalf("listening on %v: %s", urls, errOut.String())
		}
	}
	for _, u := range urls {
		resp, err := http.Post(u+"/v1/completions", "application/json", strings.NewReader(`{"model":"Qwen3-8B","prompt":"hi","max_tokens":2}`))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Errorf("%s: status %d", u, resp.StatusCode)
		}
	}
	cancel()
	if code := <-done; code != 0 {
		t.Errorf("exit %d", code)
	}
	http.DefaultClient.CloseIdleConnections()
}

func TestReplicaAddrs(t *testing.T) {
	for _, tc := range []struct {
		listen string
		n      int
		want   []string
	}{
		{"127.0.0.1:8000", 3, []string{"127.0.0.1:8000", "127.0.0.1:8001", "127.0.0.1:8002"}},
		{"127.0.0.1:0", 2, []string{"127.0.0.1:0", "127.0.0.1:0"}},
		{"127.0.0.1:65535", 2, nil},
		{"nohost", 1, nil},
	} {
		got, err := replicaAddrs(tc.listen, tc.n)
		if (err != nil) != (tc.want == nil) || !slices.Equal(got, tc.want) {
			t.Errorf("replicaAddrs(%q, %d) = %v, %v; want %v", tc.listen, tc.n, got, err, tc.want)
		}
	}
}

func TestGatewayAPIKeys(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := Main(context.Background(), []string{"gateway", "--new-api-key", "team-a"}, &out, &errOut); code != 0 {
		t.Fatalf("--new-api-key: exit %d: %s", code, errOut.String())
	}
	m := regexp.MustCompile(`(?m)^#   (sk-gw-\S+)$`).FindStringSubmatch(out.String())
	if m == nil {
		t.Fatalf("no key in %q", out.String())
	}
	secret := m[1]
	// What --new-api-key prints is a key file's entry as it stands.
	keyFile := filepath.Join(t.TempDir(), "keys.yaml")
	if err := os.WriteFile(keyFile, []byte("keys:\n"+out.String()+"    requestsPerMinute: 100\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	engine, stopEngine := start(t, "engine-sim", "--listen", "127.0.0.1:0", "--model", "Qwen3-8B", "--time", "zero")
	gw, stopGateway := start(t, "gateway", "--listen", "127.0.0.1:0", "--endpoints", engine, "--api-keys", keyFile)
	post := func(key string) (int, string) {
		req, _ := http.NewRequest(http.MethodPost, gw+"/v1/completions",
			strings.NewReader(`{"model":"Qwen3-8B","prompt":"hello","max_tokens":3}`))
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := post(""); code != 401 || !strings.Contains(body, `"invalid_api_key"`) {
		t.Errorf("without a key: %d %s", code, body)
	}
	// The gateway learns the model from the engine on its first refresh.
	deadline := time.Now().Add(10 * time.Second)
	for {
		code, body := post(secret)
		if code == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("with the key: %d %s", code, body)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if code := stopGateway(); code != 0 {
		t.Errorf("gateway exit %d", code)
	}
	if code := stopEngine(); code != 0 {
		t.Errorf("engine-sim exit %d", code)
	}
}

// TestGatewayDebugListener checks that a standalone gateway serves, on
// its loopback debug listener, its own series beside Go's and pprof.
func TestGatewayDebugListener(t *testing.T) {
	engine, stopEngine := start(t, "engine-sim", "--listen", "127.0.0.1:0", "--model", "Qwen3-8B", "--time", "zero")
	defer stopEngine()
	ctx, cancel := context.WithCancel(context.Background())
	var out, errOut syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- Main(ctx, []string{"gateway", "--listen", "127.0.0.1:0", "--endpoints", engine}, &out, &errOut)
	}()
	debugRE := regexp.MustCompile(`debug \(metrics, pprof\) on (http://\S+)`)
	var debug string
	for deadline := time.Now().Add(20 * time.Second); debug == "" && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if m := debugRE.FindStringSubmatch(out.String()); m != nil {
			debug = m[1]
		}
	}
	if debug == "" {
		cancel()
		<-done
		t.Fatalf("no debug listener printed: %s %s", out.String(), errOut.String())
	}
	if !strings.HasPrefix(debug, "http://127.0.0.1:") {
		t.Errorf("debug listener %s, want loopback by default", debug)
	}
	for path, want := range map[string]string{
		"/metrics":      "go_goroutines",
		"/debug/pprof/": "goroutine",
	} {
		resp, err := http.Get(debug + path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.Contains(string(b), want) {
			t.Errorf("GET %s: %d, want 200 with %q", path, resp.StatusCode, want)
		}
		if path == "/metrics" && !strings.Contains(string(b), "gangway_gateway_") {
			t.Errorf("GET /metrics on the debug listener has no gateway series")
		}
	}
	cancel()
	if code := <-done; code != 0 {
		t.Errorf("gateway exit %d: %s", code, errOut.String())
	}
}
