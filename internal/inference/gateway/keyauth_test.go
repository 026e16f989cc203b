package gateway

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gangway/gangway/internal/inference/openai"
	"github.com/google/go-cmp/cmp"
)

// fakeEngine answers every completion with a usage block of completion
// tokens (what the test sets) and records the auth headers it saw.
type fakeEngine struct {
	*httptest.Server
	mu         sync.Mutex // guards the fields below
	completion int
	authSeen   []string // Authorization + "|" + X-Api-Key of each completion
}

func newFakeEngine(t *testing.T, completion int) *fakeEngine {
	t.Helper()
	e := &fakeEngine{completion: completion}
	e.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case openai.PathMetrics:
			io.WriteString(w, "vllm:num_requests_running 0\n")
		case openai.PathCompletions, openai.PathChatCompletions:
			io.Copy(io.Discard, r.Body)
			e.mu.Lock()
			e.authSeen = append(e.authSeen, r.Header.Get("Authorization")+"|"+r.Header.Get("X-Api-Key"))
			n := e.completion
			e.mu.Unlock()
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"id":"cmpl-1","object":"text_completion","choices":[{"index":0,"text":"ok"}],"usage":{"prompt_tokens":10,"completion_tokens":%d,"total_tokens":%d}}`, n, n+10)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(e.Close)
	return e
}

func (e *fakeEngine) setCompletion(n int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.completion = n
}

// keyMap is a Keys over plaintext keys, for tests.
type keyMap map[string]KeyInfo

func (m keyMap) Lookup(key string) (KeyInfo, bool) { k, ok := m[key]; return k, ok }

// keyedGateway fronts e, serving models "m" and "other", with keys.
func keyedGateway(t *testing.T, e *fakeEngine, keys Keys) (*Gateway, string) {
	t.Helper()
	g, hs := newTestGateway(t, Static{{URL: e.URL, Model: "m"}, {URL: e.URL + "/", Model: "other"}}, Config{Policy: PolicyRoundRobin, Keys: keys})
	return g, hs.URL
}

// prompt40 is 40 bytes: 10 tokens of the shared tokenizer.
const prompt40 = "0123456789012345678901234567890123456789"

func completionBody(model string, maxTokens int) string {
	return fmt.Sprintf(`{"model":%q,"prompt":%q,"max_tokens":%d}`, model, prompt40, maxTokens)
}

type keyAnswer struct {
	code   int
	header http.Header
	body   []byte
}

func call(t *testing.T, method, url string, body string, hdr map[string]string) keyAnswer {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return keyAnswer{resp.StatusCode, resp.Header, b}
}

// openAIError decodes OpenAI's error body, failing unless it has exactly
// the fields message, type, param (null) and code.
func openAIError(t *testing.T, b []byte) (typ, code string) {
	t.Helper()
	var outer map[string]map[string]any
	if err := json.Unmarshal(b, &outer); err != nil || len(outer) != 1 || outer["error"] == nil {
		t.Fatalf("body %s: want {\"error\":{...}} (%v)", b, err)
	}
	in := outer["error"]
	keys := make([]string, 0, len(in))
	for k := range in {
		keys = append(keys, k)
	}
	if diff := cmp.Diff([]string{"code", "message", "param", "type"}, sortedStrings(keys)); diff != "" {
		t.Errorf("error fields (-want +got):\n%s", diff)
	}
	if p, ok := in["param"]; !ok || p != nil {
		t.Errorf("param = %v, want null", p)
	}
	if m, _ := in["message"].(string); m == "" {
		t.Errorf("no message in %s", b)
	}
	typ, _ = in["type"].(string)
	code, _ = in["code"].(string)
	return typ, code
}

func sortedStrings(s []string) []string {
	out := append([]string(nil), s...)
	for i := range out {
		for j := i + 1; j < len(out); j++ {
			if out[j] < out[i] {
				out[i], out[j] = out[j], out[i]
			}
		}
	}
	return out
}

func TestKeyAuth(t *testing.T) {
	e := newFakeEngine(t, 2)
	const good, onlyM = "sk-gw-good-key-0000000000", "sk-gw-only-m-0000000000"
	_, gw := keyedGateway(t, e, keyMap{good: {Name: "all"}, onlyM: {Name: "only-m", Models: []string{"m"}}})
	for _, tc := range []struct {
		name     string
		hdr      map[string]string
		model    string
		code     int
		typ, err string // OpenAI error type and code; "" for 200
	}{
		{"no key", nil, "m", 401, "invalid_request_error", "invalid_api_key"},
		{"wrong key", map[string]string{"Authorization": "Bearer sk-gw-wrong-0000000000"}, "m", 401, "invalid_request_error", "invalid_api_key"},
		{"not bearer", map[string]string{"Authorization": "Basic " + good}, "m", 401, "invalid_request_error", "invalid_api_key"},
		{"empty bearer", map[string]string{"Authorization": "Bearer "}, "m", 401, "invalid_request_error", "invalid_api_key"},
		{"bearer", map[string]string{"Authorization": "Bearer " + good}, "m", 200, "", ""},
		{"bearer, scheme in lower case", map[string]string{"Authorization": "bearer " + good}, "other", 200, "", ""},
		{"x-api-key", map[string]string{"x-api-key": good}, "m", 200, "", ""},
		{"model allowed", map[string]string{"Authorization": "Bearer " + onlyM}, "m", 200, "", ""},
		{"model not allowed", map[string]string{"Authorization": "Bearer " + onlyM}, "other", 404, "invalid_request_error", "model_not_found"},
		{"model not allowed, nor served", map[string]string{"Authorization": "Bearer " + onlyM}, "nope", 404, "invalid_request_error", "model_not_found"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := call(t, http.MethodPost, gw+openai.PathCompletions, completionBody(tc.model, 4), tc.hdr)
			if a.code != tc.code {
				t.Fatalf("status %d, want %d: %s", a.code, tc.code, a.body)
			}
			if tc.code == 200 {
				if !strings.Contains(string(a.body), `"completion_tokens":2`) {
					t.Errorf("not the engine's answer: %s", a.body)
				}
				return
			}
			typ, code := openAIError(t, a.body)
			if typ != tc.typ || code != tc.err {
				t.Errorf("type %q code %q, want %q %q", typ, code, tc.typ, tc.err)
			}
		})
	}
	e.mu.Lock()
	seen := e.authSeen
	e.mu.Unlock()
	if len(seen) != 4 {
		t.Errorf("the engine got %d requests, want the 4 answered 200", len(seen))
	}
	for _, s := range seen {
		if s != "|" {
			t.Errorf("the engine saw the gateway's key: %q", s)
		}
	}
}

func TestKeyModelList(t *testing.T) {
	e := newFakeEngine(t, 1)
	_, gw := keyedGateway(t, e, keyMap{"sk-gw-only-m-0000000000": {Name: "only-m", Models: []string{"m"}}, "sk-gw-all-00000000000000": {Name: "all"}})
	for _, tc := range []struct {
		name string
		key  string
		code int
		want []string
	}{
		{"no key", "", 401, nil},
		{"restricted key", "sk-gw-only-m-0000000000", 200, []string{"m"}},
		{"key for all", "sk-gw-all-00000000000000", 200, []string{"m", "other"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hdr := map[string]string{}
			if tc.key != "" {
				hdr["Authorization"] = "Bearer " + tc.key
			}
			a := call(t, http.MethodGet, gw+openai.PathModels, "", hdr)
			if a.code != tc.code {
				t.Fatalf("status %d, want %d: %s", a.code, tc.code, a.body)
			}
			if a.code != 200 {
				openAIError(t, a.body)
				return
			}
			var list struct{ Data []struct{ ID string } }
			json.Unmarshal(a.body, &list)
			var got []string
			for _, m := range list.Data {
				got = append(got, m.ID)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("models (-want +got):\n%s", diff)
			}
		})
	}
}

// Without Keys the gateway serves anyone, as it did before keys.
func TestNoKeysNoAuth(t *testing.T) {
	e := newFakeEngine(t, 1)
	_, gw := keyedGateway(t, e, nil)
	a := call(t, http.MethodPost, gw+openai.PathCompletions, completionBody("m", 4), map[string]string{"Authorization": "Bearer upstream-token"})
	if a.code != 200 || a.header.Get("X-Ratelimit-Limit-Requests") != "" {
		t.Fatalf("status %d, headers %v: %s", a.code, a.header, a.body)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.authSeen[0] != "Bearer upstream-token|" {
		t.Errorf("without Keys the client's Authorization goes to the engine as before; it saw %q", e.authSeen[0])
	}
}

// The limits hold a minute's worth and refill by 1/60 of it a second: a
// third request within 30 s of the first two cannot pass a limit of 2 a
// minute, however slowly the test runs.
func TestKeyRequestsPerMinute(t *testing.T) {
	e := newFakeEngine(t, 1)
	const key = "sk-gw-rpm-000000000000000"
	g, gw := keyedGateway(t, e, keyMap{key: {Name: "rpm", RequestsPerMinute: 2}})
	hdr := map[string]string{"Authorization": "Bearer " + key}
	for i, want := range []struct {
		code      int
		remaining string
	}{{200, "1"}, {200, "0"}, {429, "0"}} {
		a := call(t, http.MethodPost, gw+openai.PathCompletions, completionBody("m", 4), hdr)
		if a.code != want.code {
			t.Fatalf("request %d: status %d, want %d: %s", i+1, a.code, want.code, a.body)
		}
		if got := a.header.Get("X-Ratelimit-Limit-Requests"); got != "2" {
			t.Errorf("request %d: x-ratelimit-limit-requests %q, want 2", i+1, got)
		}
		if got := a.header.Get("X-Ratelimit-Remaining-Requests"); got != want.remaining {
			t.Errorf("request %d: x-ratelimit-remaining-requests %q, want %s", i+1, got, want.remaining)
		}
		if a.header.Get("X-Ratelimit-Limit-Tokens") != "" {
			t.Errorf("request %d: token headers without a token limit", i+1)
		}
		if a.code == 429 {
			typ, code := openAIError(t, a.body)
			if typ != "requests" || code != "rate_limit_exceeded" {
				t.Errorf("type %q code %q, want requests rate_limit_exceeded", typ, code)
			}
			if s, err := strconv.Atoi(a.header.Get("Retry-After")); err != nil || s < 1 || s > 30 {
				t.Errorf("Retry-After %q, want 1 to 30 seconds (one request refills in 30)", a.header.Get("Retry-After"))
			}
		}
	}
	if u := g.Usage()["rpm"]; u.Requests != 2 || u.RequestLimited != 1 {
		t.Errorf("usage %+v, want 2 requests and 1 refused", u)
	}
}

func TestKeyTokensPerMinute(t *testing.T) {
	const key = "sk-gw-tpm-000000000000000"
	hdr := map[string]string{"Authorization": "Bearer " + key}
	// Each request reserves its 10 prompt tokens and max_tokens, and
	// settles to the completion tokens the engine reports. A limit of 100
	// refills 10 tokens in 6 s; every refused request below lacks 30 or
	// more (18 s). TestKeyStateAccounts checks the counts exactly.
	for _, tc := range []struct {
		name       string
		completion int   // what the engine reports
		maxTokens  []int // of each request
		want       []int // status of each
		retry      bool  // the 429 carries Retry-After
	}{
		{"used as reserved", 40, []int{40, 40, 40}, []int{200, 200, 429}, true},
		// A reservation settled below its size gives the rest back: the
		// third request finds 80 tokens (100 - 2×10 used), not 0.
		{"settled below the reservation", 0, []int{40, 40, 70, 90}, []int{200, 200, 200, 429}, true},
		{"alone over the limit", 0, []int{100, 40}, []int{429, 200}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newFakeEngine(t, tc.completion)
			_, gw := keyedGateway(t, e, keyMap{key: {Name: "tpm", TokensPerMinute: 100}})
			for i, mt := range tc.maxTokens {
				a := call(t, http.MethodPost, gw+openai.PathCompletions, completionBody("m", mt), hdr)
				if a.code != tc.want[i] {
					t.Fatalf("request %d: status %d, want %d: %s", i+1, a.code, tc.want[i], a.body)
				}
				if got := a.header.Get("X-Ratelimit-Limit-Tokens"); got != "100" {
					t.Errorf("request %d: x-ratelimit-limit-tokens %q", i+1, got)
				}
				if _, err := strconv.Atoi(a.header.Get("X-Ratelimit-Remaining-Tokens")); err != nil {
					t.Errorf("request %d: x-ratelimit-remaining-tokens %q", i+1, a.header.Get("X-Ratelimit-Remaining-Tokens"))
				}
				if a.code != 429 {
					continue
				}
				typ, code := openAIError(t, a.body)
				if typ != "tokens" || code != "rate_limit_exceeded" {
					t.Errorf("type %q code %q, want tokens rate_limit_exceeded", typ, code)
				}
				if got := a.header.Get("Retry-After") != ""; got != tc.retry {
					t.Errorf("Retry-After %q; want one: %v", a.header.Get("Retry-After"), tc.retry)
				}
			}
		})
	}
}

// TestKeyStateAccounts walks one key's token bucket through reservations
// and settlements on a synthetic clock: 600 tokens a minute is 10 a
// second.
func TestKeyStateAccounts(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	ks := &keyState{name: "k"}
	ks.setLimitsLocked(0, 600, t0)
	admit := func(n int) func(time.Time) *limitRefusal {
		return func(now time.Time) *limitRefusal { return ks.admit(now, n) }
	}
	settle := func(reserved, prompt, completion int, reached bool) func(time.Time) *limitRefusal {
		return func(now time.Time) *limitRefusal { ks.settle(now, reserved, prompt, completion, reached); return nil }
	}
	for _, s := range []struct {
		name      string
		at        float64 // seconds after t0
		do        func(time.Time) *limitRefusal
		refused   bool
		retry     time.Duration
		remaining int // x-ratelimit-remaining-tokens after the step
		reset     time.Duration
	}{
		{"reserve 300 of 600", 0, admit(300), false, 0, 300, 30 * time.Second},
		{"it used 150: 150 back", 0, settle(300, 100, 50, true), false, 0, 450, 15 * time.Second},
		{"reserve the 450 left", 0, admit(450), false, 0, 0, time.Minute},
		{"nothing left: 10 tokens take 1 s", 0, admit(10), true, time.Second, 0, time.Minute},
		{"it used 500: 50 into debt", 0, settle(450, 100, 400, true), false, 0, 0, time.Minute + 5*time.Second},
		{"5 s pay the debt, 10 more need 1 s", 5, admit(10), true, time.Second, 0, time.Minute},
		{"6 s later there are 10", 6, admit(10), false, 0, 0, time.Minute},
		{"it reached no engine: all 10 back", 6, settle(10, 5, 0, false), false, 0, 10, 59 * time.Second},
		{"54 s refill 540; 1000 back fill the bucket, no more", 60, settle(1000, 0, 0, false), false, 0, 600, 0},
		{"more than the limit at once: never", 60, admit(601), true, 0, 600, 0},
		{"the whole limit at once", 60, admit(600), false, 0, 0, time.Minute},
		{"and not one more: the credit was capped", 60, admit(1), true, 100 * time.Millisecond, 0, time.Minute},
	} {
		now := t0.Add(time.Duration(s.at * float64(time.Second)))
		r := s.do(now)
		if (r != nil) != s.refused || (r != nil && (!r.tokens || r.retryAfter != s.retry)) {
			t.Errorf("%s: refusal %+v, want refused %v after %v", s.name, r, s.refused, s.retry)
		}
		h := ks.headers(now)
		if h.remainingToks != s.remaining || h.resetToks != s.reset {
			t.Errorf("%s: remaining %d, reset %v; want %d, %v", s.name, h.remainingToks, h.resetToks, s.remaining, s.reset)
		}
	}
	if diff := cmp.Diff(KeyUsage{Requests: 4, PromptTokens: 200, CompletionTokens: 450, TokenLimited: 4}, ks.usage); diff != "" {
		t.Errorf("usage (-want +got):\n%s", diff)
	}
}

func TestKeyUsage(t *testing.T) {
	e := newFakeEngine(t, 7)
	const a, b = "sk-gw-usage-a-0000000000", "sk-gw-usage-b-0000000000"
	g, gw := keyedGateway(t, e, keyMap{a: {Name: "a", RequestsPerMinute: 2}, b: {Name: "b", Models: []string{"other"}}})
	for _, r := range []struct {
		key, model string
	}{{a, "m"}, {a, "other"}, {a, "m"}, {b, "other"}, {b, "m"}, {"", "m"}, {"sk-gw-nobody-000000000", "m"}} {
		hdr := map[string]string{}
		if r.key != "" {
			hdr["x-api-key"] = r.key
		}
		call(t, http.MethodPost, gw+openai.PathCompletions, completionBody(r.model, 16), hdr)
	}
	want := map[string]KeyUsage{
		"a": {Requests: 2, PromptTokens: 20, CompletionTokens: 14, RequestLimited: 1},
		"b": {Requests: 1, PromptTokens: 10, CompletionTokens: 7, ModelDenied: 1},
		"":  {Unauthorized: 2},
	}
	if diff := cmp.Diff(want, g.Usage()); diff != "" {
		t.Errorf("Usage (-want +got):\n%s", diff)
	}

	got := map[string]float64{}
	for _, s := range samplesOf(t, gw) {
		if strings.HasPrefix(s.Name, "gangway_gateway_key_") {
			k := s.Name + "{" + s.Label("key")
			if r := s.Label("reason"); r != "" {
				k += "," + r
			}
			got[k+"}"] = s.Value
		}
	}
	wantMetrics := map[string]float64{
		"gangway_gateway_key_requests_total{a}":             2,
		"gangway_gateway_key_requests_total{b}":             1,
		"gangway_gateway_key_prompt_tokens_total{a}":        20,
		"gangway_gateway_key_prompt_tokens_total{b}":        10,
		"gangway_gateway_key_completion_tokens_total{a}":    14,
		"gangway_gateway_key_completion_tokens_total{b}":    7,
		"gangway_gateway_key_refusals_total{,unauthorized}": 2,
		"gangway_gateway_key_refusals_total{a,model}":       0,
		"gangway_gateway_key_refusals_total{a,requests}":    1,
		"gangway_gateway_key_refusals_total{a,tokens}":      0,
		"gangway_gateway_key_refusals_total{b,model}":       1,
		"gangway_gateway_key_refusals_total{b,requests}":    0,
		"gangway_gateway_key_refusals_total{b,tokens}":      0,
	}
	if diff := cmp.Diff(wantMetrics, got); diff != "" {
		t.Errorf("key metrics (-want +got):\n%s", diff)
	}
}
