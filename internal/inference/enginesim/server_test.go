package enginesim

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gangway/gangway/internal/inference/openai"
	"github.com/gangway/gangway/internal/inference/promtext"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// startServer runs a simulated Qwen3-8B engine on an httptest server; the
// engine clock runs 50× faster than the wall clock.
func startServer(t *testing.T, mode TimeMode) (*Server, *httptest.Server) {
	t.Helper()
	s, err := NewServer(ServerConfig{Engine: mustConfig(t, "Qwen3-8B", "H100", 1, "bf16"), Time: mode, TimeScale: 50})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); s.Run(ctx) }()
	hs := httptest.NewServer(s)
	t.Cleanup(func() {
		hs.Close()
		cancel()
		<-done
	})
	return s, hs
}

func post(t *testing.T, url, body string) *http.Response {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// sseEvents reads an SSE body and returns the data payloads.
func sseEvents(t *testing.T, r io.Reader) []string {
	t.Helper()
	var out []string
	sc := bufio.NewScanner(r)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			continue
		}
		d, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			t.Fatalf("SSE line without data: %q", line)
		}
		out = append(out, d)
	}
	return out
}

func TestCompletionsNonStreaming(t *testing.T) {
	for _, mode := range []TimeMode{TimeReal, TimeZero} {
		t.Run(string(mode), func(t *testing.T) {
			_, hs := startServer(t, mode)
			resp := post(t, hs.URL+openai.PathCompletions, `{"model":"Qwen3-8B","prompt":"Hello there, engine","max_tokens":5,"ignore_eos":true}`)
			defer resp.Body.Close()
			if resp.StatusCode != 200 {
				b, _ := io.ReadAll(resp.Body)
				t.Fatalf("status %d: %s", resp.StatusCode, b)
			}
			var got struct {
				Object  string
				Model   string
				Choices []struct {
					Text         string
					FinishReason string `json:"finish_reason"`
				}
				Usage openai.Usage
			}
			if err := json.NewDecoder(resp.Body).Decode(&got); err != nil {
				t.Fatal(err)
			}
			wantUsage := openai.Usage{PromptTokens: 5, CompletionTokens: 5, TotalTokens: 10}
			if got.Object != "text_completion" || got.Model != "Qwen3-8B" || len(got.Choices) != 1 || got.Choices[0].FinishReason != "length" || got.Usage != wantUsage {
				t.Errorf("response = %+v", got)
			}
			if n := strings.Count(got.Choices[0].Text, " "); n != 5 {
				t.Errorf("text %q has %d words, want 5", got.Choices[0].Text, n)
			}
		})
	}
}

func TestCompletionsStreaming(t *testing.T) {
	_, hs := startServer(t, TimeReal)
	resp := post(t, hs.URL+openai.PathCompletions, `{"model":"Qwen3-8B","prompt":"Stream me","max_tokens":4,"stream":true,"stream_options":{"include_usage":true},"ignore_eos":true}`)
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
		t.Fatalf("content type %q", ct)
	}
	ev := sseEvents(t, resp.Body)
	if len(ev) != 6 || ev[5] != "[DONE]" {
		t.Fatalf("want 4 token events, a usage event and [DONE]; got %q", ev)
	}
	var last, usage struct {
		Choices []struct {
			Text         string
			FinishReason *string `json:"finish_reason"`
		}
		Usage *openai.Usage
	}
	json.Unmarshal([]byte(ev[3]), &last)
	json.Unmarshal([]byte(ev[4]), &usage)
	if len(last.Choices) != 1 || last.Choices[0].FinishReason == nil || *last.Choices[0].FinishReason != "length" {
		t.Errorf("last token event = %s", ev[3])
	}
	if usage.Usage == nil || usage.Usage.CompletionTokens != 4 || len(usage.Choices) != 0 {
		t.Errorf("usage event = %s", ev[4])
	}
}

func TestChatStreaming(t *testing.T) {
	_, hs := startServer(t, TimeReal)
	resp := post(t, hs.URL+openai.PathChatCompletions, `{"model":"Qwen3-8B","messages":[{"role":"system","content":"Be brief."},{"role":"user","content":[{"type":"text","text":"Hi"}]}],"max_tokens":3,"stream":true}`)
	defer resp.Body.Close()
	ev := sseEvents(t, resp.Body)
	if len(ev) != 5 || ev[4] != "[DONE]" {
		t.Fatalf("want role, 3 content events and [DONE]; got %q", ev)
	}
	var first struct {
		Object  string
		Choices []struct{ Delta openai.ChatDelta }
	}
	json.Unmarshal([]byte(ev[0]), &first)
	if first.Object != "chat.completion.chunk" || first.Choices[0].Delta.Role != "assistant" {
		t.Errorf("first event = %s", ev[0])
	}
}

func TestChatNonStreamingDefaultsAndEOS(t *testing.T) {
	_, hs := startServer(t, TimeZero)
	// No max_tokens on chat: vLLM allows the rest of the context; the
	// simulated EOS ends the answer first.
	resp := post(t, hs.URL+openai.PathChatCompletions, `{"model":"Qwen3-8B","messages":[{"role":"user","content":"Tell me everything"}]}`)
	defer resp.Body.Close()
	var got struct {
		Object  string
		Choices []struct {
			Message      openai.ChatDelta
			FinishReason string `json:"finish_reason"`
		}
		Usage openai.Usage
	}
	json.NewDecoder(resp.Body).Decode(&got)
	if got.Object != "chat.completion" || got.Choices[0].FinishReason != "stop" || got.Usage.CompletionTokens < 64 || got.Usage.CompletionTokens > 1087 {
		t.Errorf("response = %+v", got)
	}
	if got.Choices[0].Message.Role != "assistant" {
		t.Errorf("role = %q", got.Choices[0].Message.Role)
	}
}

func TestAPIErrors(t *testing.T) {
	_, hs := startServer(t, TimeZero)
	tests := []struct {
		name, path, body string
		status           int
		code, msg        string
	}{
		{"unknown model", openai.PathCompletions, `{"model":"gpt-4","prompt":"x"}`, 404, "model_not_found", "The model `gpt-4` does not exist."},
		{"no prompt", openai.PathCompletions, `{"model":"Qwen3-8B"}`, 400, "invalid_value", `field "prompt": required`},
		{"bad json", openai.PathCompletions, `{"model":`, 400, "invalid_value", "request body"},
		{"too long", openai.PathCompletions, `{"model":"Qwen3-8B","prompt":"abcd","max_tokens":40960}`, 400, "context_length_exceeded", "maximum context length is 40960 tokens"},
		{"n>1", openai.PathCompletions, `{"model":"Qwen3-8B","prompt":"x","n":2}`, 400, "unsupported_parameter", `field "n"`},
		{"n=0", openai.PathCompletions, `{"model":"Qwen3-8B","prompt":"x","n":0}`, 400, "invalid_value", `field "n": 0, want at least 1`},
		{"tools", openai.PathChatCompletions, `{"model":"Qwen3-8B","messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"f"}}]}`, 400, "unsupported_parameter", `field "tools"`},
		{"logprobs", openai.PathCompletions, `{"model":"Qwen3-8B","prompt":"x","logprobs":2}`, 400, "unsupported_parameter", `field "logprobs"`},
		{"json format", openai.PathChatCompletions, `{"model":"Qwen3-8B","messages":[{"role":"user","content":"x"}],"response_format":{"type":"json_object"}}`, 400, "unsupported_parameter", `field "response_format"`},
		{"no messages", openai.PathChatCompletions, `{"model":"Qwen3-8B","messages":[]}`, 400, "invalid_value", `field "messages"`},
		{"image part", openai.PathChatCompletions, `{"model":"Qwen3-8B","messages":[{"role":"user","content":[{"type":"image_url"}]}]}`, 400, "invalid_value", `messages[0].content`},
		{"token out of vocab", openai.PathCompletions, `{"model":"Qwen3-8B","prompt":[1,2,999999999]}`, 400, "invalid_value", "outside the vocabulary"},
		{"unknown path", "/v1/frobnicate", `{}`, 404, "unknown_url", "Invalid URL (POST /v1/frobnicate)"},
		{"wrong method", openai.PathModels, `{}`, 405, "method_not_allowed", "use GET"},
		{"unknown model by id", openai.PathEmbeddings, `{"model":"gpt-4","input":"x"}`, 404, "model_not_found", "gpt-4"},
		{"embedding input", openai.PathEmbeddings, `{"model":"Qwen3-8B","input":{}}`, 400, "invalid_value", `field "input"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp := post(t, hs.URL+tc.path, tc.body)
			defer resp.Body.Close()
			var e openai.ErrorBody
			json.NewDecoder(resp.Body).Decode(&e)
			wantType := "invalid_request_error"
			if resp.StatusCode != tc.status || e.Error.Code != tc.code || e.Error.Type != wantType || !strings.Contains(e.Error.Message, tc.msg) {
				t.Errorf("status %d, error %+v; want %d, code %s, containing %q", resp.StatusCode, e.Error, tc.status, tc.code, tc.msg)
			}
			if tc.status == 405 && resp.Header.Get("Allow") != "GET" {
				t.Errorf("405 without Allow: GET (%q)", resp.Header.Get("Allow"))
			}
		})
	}
}

func TestModelsAndHealth(t *testing.T) {
	_, hs := startServer(t, TimeZero)
	resp, err := http.Get(hs.URL + openai.PathHealth)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("health: %v %v", err, resp)
	}
	resp.Body.Close()
	resp, err = http.Get(hs.URL + openai.PathModels)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var got struct {
		Object string
		Data   []struct {
			ID          string
			MaxModelLen int `json:"max_model_len"`
		}
	}
	json.NewDecoder(resp.Body).Decode(&got)
	if got.Object != "list" || len(got.Data) != 1 || got.Data[0].ID != "Qwen3-8B" || got.Data[0].MaxModelLen != 40960 {
		t.Errorf("models = %+v", got)
	}
}

func scrape(t *testing.T, url string) map[string]float64 {
	t.Helper()
	resp, err := http.Get(url + openai.PathMetrics)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	samples, err := promtext.Parse(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]float64{}
	for _, s := range samples {
		key := s.Name
		if r := s.Label("finished_reason"); r != "" {
			key += "/" + r
		}
		if s.Label("le") == "" {
			m[key] = s.Value
		}
	}
	return m
}

func TestMetricsUseVLLMNames(t *testing.T) {
	_, hs := startServer(t, TimeReal)
	prompt := strings.Repeat("shared system prompt ", 200)
	for i := range 2 {
		resp := post(t, hs.URL+openai.PathCompletions, `{"model":"Qwen3-8B","max_tokens":3,"ignore_eos":true,"prompt":"`+prompt+`q`+string(rune('0'+i))+`"}`)
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	m := scrape(t, hs.URL)
	for _, name := range []string{
		"vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
		"vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total", "vllm:num_preemptions_total",
		"vllm:time_to_first_token_seconds_count", "vllm:inter_token_latency_seconds_count",
		"vllm:e2e_request_latency_seconds_sum", "vllm:cache_config_info", "gangway:engine_info",
	} {
		if _, ok := m[name]; !ok {
			t.Errorf("metric %s missing", name)
		}
	}
	if m["vllm:prefix_cache_hits_total"] < 16*float64(len(prompt)/4/16-1) {
		t.Errorf("second request should hit the shared prompt: hits %v of %v", m["vllm:prefix_cache_hits_total"], m["vllm:prefix_cache_queries_total"])
	}
	if m["vllm:time_to_first_token_seconds_count"] != 2 || m["vllm:inter_token_latency_seconds_count"] != 4 || m["vllm:request_success_total/length"] != 2 {
		t.Errorf("counts: ttft %v itl %v success %v", m["vllm:time_to_first_token_seconds_count"], m["vllm:inter_token_latency_seconds_count"], m["vllm:request_success_total/length"])
	}
}

func TestClientCancelAbortsRequest(t *testing.T) {
	s, hs := startServer(t, TimeReal)
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "POST", hs.URL+openai.PathCompletions,
		strings.NewReader(`{"model":"Qwen3-8B","prompt":"long answer please","max_tokens":30000,"stream":true,"ignore_eos":true}`))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(resp.Body)
	if _, err := br.ReadString('\n'); err != nil { // the first token arrived
		t.Fatal(err)
	}
	cancel()
	resp.Body.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		m := scrape(t, hs.URL)
		if m["vllm:request_success_total/abort"] == 1 && s.Load().Running == 0 && s.Load().KVUsage == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("request not aborted: %v, load %+v", m["vllm:request_success_total/abort"], s.Load())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestConcurrentRequestsBatch(t *testing.T) {
	s, hs := startServer(t, TimeReal)
	var wg sync.WaitGroup
	errs := make(chan string, 16)
	for i := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := http.Post(hs.URL+openai.PathCompletions, "application/json", strings.NewReader(
				`{"model":"Qwen3-8B","max_tokens":20,"ignore_eos":true,"prompt":"request `+string(rune('a'+i))+`"}`))
			if err != nil {
				errs <- err.Error()
				return
			}
			defer resp.Body.Close()
			var got struct{ Usage openai.Usage }
			json.NewDecoder(resp.Body).Decode(&got)
			if got.Usage.CompletionTokens != 20 {
				errs <- "short answer"
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	s.mu.Lock()
	steps := s.eng.Stats().Steps
	s.mu.Unlock()
	// 16 requests × 20 tokens one at a time would need 320 steps.
	if steps >= 16*20 {
		t.Errorf("%d steps for 16 concurrent requests: no continuous batching", steps)
	}
}
