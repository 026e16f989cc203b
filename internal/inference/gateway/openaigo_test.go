package gateway

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	oa "github.com/gangway/gangway/internal/inference/openai"
)

// The official OpenAI Go client, pointed at the gateway in front of two
// simulated vLLM replicas, as a user's program would be: it lists and
// gets models, completes and chats, streamed and not, with usage, embeds,
// and reads every error's message.

func openaiClient(gw string) openai.Client {
	return openai.NewClient(option.WithBaseURL(gw+"/v1/"), option.WithAPIKey("unused"), option.WithMaxRetries(0))
}

func TestOpenAIGoClient(t *testing.T) {
	e1, e2 := startEngine(t), startEngine(t)
	_, gw := startGateway(t, "", e1.URL, e2.URL)
	c := openaiClient(gw.URL)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	t.Run("models", func(t *testing.T) {
		page, err := c.Models.List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(page.Data) != 1 {
			t.Fatalf("models %+v, want one", page.Data)
		}
		m := page.Data[0]
		if m.ID != "Qwen3-8B" || m.Created == 0 || m.OwnedBy == "" || !strings.Contains(m.RawJSON(), `"max_model_len":40960`) || !strings.Contains(m.RawJSON(), `"root":"Qwen3-8B"`) {
			t.Errorf("model %s", m.RawJSON())
		}
		got, err := c.Models.Get(ctx, "Qwen3-8B")
		if err != nil || got.ID != "Qwen3-8B" || got.Created != m.Created {
			t.Errorf("get: %+v, %v", got, err)
		}
	})

	t.Run("completions", func(t *testing.T) {
		ids := map[string]bool{}
		for i := range 6 {
			r, err := c.Completions.New(ctx, openai.CompletionNewParams{
				Model: "Qwen3-8B", Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String(fmt.Sprintf("prompt %d", i))}, MaxTokens: openai.Int(5),
			})
			if err != nil {
				t.Fatal(err)
			}
			if len(r.Choices) != 1 || r.Usage.CompletionTokens == 0 || r.Usage.PromptTokens == 0 || r.Usage.TotalTokens != r.Usage.PromptTokens+r.Usage.CompletionTokens {
				t.Errorf("completion %s", r.RawJSON())
			}
			if ids[r.ID] {
				t.Errorf("response id %s repeated", r.ID)
			}
			ids[r.ID] = true
		}
	})

	t.Run("completions streamed", func(t *testing.T) {
		s := c.Completions.NewStreaming(ctx, openai.CompletionNewParams{
			Model: "Qwen3-8B", Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("stream me")}, MaxTokens: openai.Int(6),
			StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
		})
		var text strings.Builder
		var usage int64
		for s.Next() {
			ch := s.Current()
			for _, c := range ch.Choices {
				text.WriteString(c.Text)
			}
			usage = max(usage, ch.Usage.CompletionTokens)
		}
		if err := s.Err(); err != nil || text.Len() == 0 || usage == 0 {
			t.Errorf("stream: %q, usage %d, %v", text.String(), usage, err)
		}
	})

	t.Run("chat", func(t *testing.T) {
		r, err := c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
			Model: "Qwen3-8B", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hello")}, MaxTokens: openai.Int(5),
		})
		if err != nil {
			t.Fatal(err)
		}
		if len(r.Choices) != 1 || r.Choices[0].Message.Content == "" || r.Usage.CompletionTokens == 0 || !strings.HasPrefix(r.ID, "chatcmpl-") {
			t.Errorf("chat %s", r.RawJSON())
		}
	})

	t.Run("chat streamed", func(t *testing.T) {
		s := c.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{
			Model: "Qwen3-8B", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hello")}, MaxTokens: openai.Int(5),
			StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
		})
		var acc openai.ChatCompletionAccumulator
		for s.Next() {
			acc.AddChunk(s.Current())
		}
		if err := s.Err(); err != nil {
			t.Fatal(err)
		}
		if len(acc.Choices) != 1 || acc.Choices[0].Message.Content == "" || acc.Usage.CompletionTokens != 5 {
			t.Errorf("accumulated %+v, usage %+v", acc.Choices, acc.Usage)
		}
	})

	t.Run("embeddings", func(t *testing.T) {
		r, err := c.Embeddings.New(ctx, openai.EmbeddingNewParams{Model: "Qwen3-8B", Input: openai.EmbeddingNewParamsInputUnion{OfArrayOfStrings: []string{"a cat", "a dog"}}})
		if err != nil {
			t.Fatal(err)
		}
		if len(r.Data) != 2 || len(r.Data[0].Embedding) != 1024 || r.Usage.PromptTokens == 0 {
			t.Fatalf("embeddings: %d, dims %d, usage %+v", len(r.Data), len(r.Data[0].Embedding), r.Usage)
		}
		b64, err := c.Embeddings.New(ctx, openai.EmbeddingNewParams{Model: "Qwen3-8B", Input: openai.EmbeddingNewParamsInputUnion{OfString: openai.String("a cat")},
			EncodingFormat: openai.EmbeddingNewParamsEncodingFormatBase64, Dimensions: openai.Int(64)})
		if err != nil {
			t.Fatal(err)
		}
		if len(b64.Data) != 1 || len(b64.Data[0].Embedding) != 64 {
			t.Fatalf("base64 embedding: %+v", b64.Data)
		}
		var norm float64
		for _, x := range b64.Data[0].Embedding {
			norm += x * x
		}
		if norm < 0.99 || norm > 1.01 {
			t.Errorf("embedding's squared norm %v, want 1", norm)
		}
	})

	// Every error reaches the client with its message, status and code.
	for _, tc := range []struct {
		name   string
		call   func() error
		status int
		code   string
		msg    string
	}{
		{"unknown model", func() error {
			_, err := c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "gpt-9", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("x")}})
			return err
		}, 404, "model_not_found", "The model `gpt-9` does not exist."},
		{"get unknown model", func() error { _, err := c.Models.Get(ctx, "gpt-9"); return err }, 404, "model_not_found", "gpt-9"},
		{"bad max_tokens", func() error {
			_, err := c.Completions.New(ctx, openai.CompletionNewParams{Model: "Qwen3-8B", Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("x")}, MaxTokens: openai.Int(-3)})
			return err
		}, 400, "invalid_value", `field "max_tokens": -3, want at least 1`},
		{"too long", func() error {
			_, err := c.Completions.New(ctx, openai.CompletionNewParams{Model: "Qwen3-8B", Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("x")}, MaxTokens: openai.Int(100000)})
			return err
		}, 400, "context_length_exceeded", "maximum context length is 40960 tokens"},
		{"n > 1", func() error {
			_, err := c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "Qwen3-8B", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("x")}, N: openai.Int(2)})
			return err
		}, 400, "unsupported_parameter", `field "n"`},
		{"tools", func() error {
			_, err := c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "Qwen3-8B", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("x")},
				Tools: []openai.ChatCompletionToolUnionParam{openai.ChatCompletionFunctionTool(openai.FunctionDefinitionParam{Name: "lookup"})}})
			return err
		}, 400, "unsupported_parameter", `field "tools"`},
		{"stream of an unknown model", func() error {
			s := c.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{Model: "gpt-9", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("x")}})
			for s.Next() {
			}
			return s.Err()
		}, 404, "model_not_found", "gpt-9"},
	} {
		t.Run("error "+tc.name, func(t *testing.T) {
			err := tc.call()
			var ae *openai.Error
			if !errors.As(err, &ae) {
				t.Fatalf("err %v (%T), want an *openai.Error", err, err)
			}
			if ae.StatusCode != tc.status || ae.Code != tc.code || !strings.Contains(ae.Message, tc.msg) || ae.Type == "" {
				t.Errorf("status %d, code %q, type %q, message %q; want %d, %q, containing %q", ae.StatusCode, ae.Code, ae.Type, ae.Message, tc.status, tc.code, tc.msg)
			}
		})
	}
}

// recordingEngine answers like a vLLM replica that serves every path: its
// model list, and for any other request the path it took and its body's
// size, so a test sees what the gateway forwarded where.
type recordingEngine struct {
	*httptest.Server
	mu    sync.Mutex
	paths []string
}

func newRecordingEngine(t *testing.T, model string) *recordingEngine {
	e := &recordingEngine{}
	e.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == oa.PathModels {
			oa.WriteJSON(w, 200, oa.ModelList{Object: "list", Data: []oa.Model{{ID: model, Object: "model", Created: 1, OwnedBy: "vllm"}}})
			return
		}
		if r.URL.Path == oa.PathMetrics {
			return
		}
		b, _ := io.ReadAll(r.Body)
		e.mu.Lock()
		e.paths = append(e.paths, r.Method+" "+r.URL.Path)
		e.mu.Unlock()
		oa.WriteJSON(w, 200, map[string]any{"path": r.URL.Path, "bytes": len(b)})
	}))
	t.Cleanup(e.Close)
	return e
}

func (e *recordingEngine) seen() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]string(nil), e.paths...)
}

// Every POST that names a model reaches that model's replicas, whatever
// its path (embeddings, responses, rerank, score, tokenize, audio as a
// multipart form); a known path with the wrong method is a 405 with
// Allow, an unknown one a 404, both in OpenAI's shape.
func TestGatewayRoutesEveryModelPath(t *testing.T) {
	rerank, whisper := newRecordingEngine(t, "bge-reranker"), newRecordingEngine(t, "whisper")
	_, gw := newTestGateway(t, Static{{URL: rerank.URL}, {URL: whisper.URL}}, Config{})
	for _, path := range []string{"/v1/rerank", "/rerank", "/v2/rerank", "/v1/score", "/v1/responses", "/tokenize", "/v1/embeddings"} {
		resp, err := http.Post(gw.URL+path, "application/json", strings.NewReader(`{"model":"bge-reranker","query":"q","documents":["a","b"]}`))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.Contains(string(b), `"path":"`+path+`"`) {
			t.Errorf("POST %s: %d %s", path, resp.StatusCode, b)
		}
	}
	var form bytes.Buffer
	mw := multipart.NewWriter(&form)
	fw, _ := mw.CreateFormFile("file", "speech.wav")
	fw.Write(bytes.Repeat([]byte{1}, 50000))
	mw.WriteField("model", "whisper")
	mw.Close()
	resp, err := http.Post(gw.URL+"/v1/audio/transcriptions", mw.FormDataContentType(), &form)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(b), `"path":"/v1/audio/transcriptions"`) {
		t.Errorf("transcription: %d %s", resp.StatusCode, b)
	}
	if got := whisper.seen(); len(got) != 1 || got[0] != "POST /v1/audio/transcriptions" {
		t.Errorf("whisper's replica saw %v, want the transcription only", got)
	}
	if got := rerank.seen(); len(got) != 7 {
		t.Errorf("the reranker's replica saw %v, want the 7 JSON requests", got)
	}

	for _, tc := range []struct {
		method, path string
		status       int
		allow, msg   string
	}{
		{"POST", "/v1/models", 405, "GET", "use GET"},
		{"DELETE", "/v1/models/whisper", 405, "GET", "use GET"},
		{"GET", "/v1/chat/completions", 405, "POST", "use POST"},
		{"GET", "/tokenize", 405, "POST", "use POST"},
		{"GET", "/nowhere", 404, "", "Invalid URL (GET /nowhere)"},
		{"POST", "/v1/embeddings", 400, "", `model\": required`},
	} {
		req, _ := http.NewRequest(tc.method, gw.URL+tc.path, strings.NewReader(`{}`))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.status || resp.Header.Get("Allow") != tc.allow || !strings.Contains(string(b), tc.msg) || !strings.Contains(string(b), `"error":{`) {
			t.Errorf("%s %s: %d (Allow %q) %s; want %d (Allow %q) containing %q", tc.method, tc.path, resp.StatusCode, resp.Header.Get("Allow"), b, tc.status, tc.allow, tc.msg)
		}
	}
}

// A replica that breaks a stream off after its first events: the client
// gets an error event, which the OpenAI client raises, not a stream that
// just ends and looks whole.
func TestBrokenStreamEndsWithAnError(t *testing.T) {
	engine := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case oa.PathModels:
			oa.WriteJSON(w, 200, oa.ModelList{Object: "list", Data: []oa.Model{{ID: "m", Object: "model", Created: 1, OwnedBy: "vllm"}}})
			return
		case oa.PathMetrics:
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(200)
		for i := range 2 {
			fmt.Fprintf(w, "data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"t%d\"},\"finish_reason\":null}]}\n\n", i)
		}
		w.(http.Flusher).Flush()
		conn, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			conn.Close() // mid-stream: no final chunk, no [DONE]
		}
	}))
	defer engine.Close()
	_, gw := newTestGateway(t, Static{{URL: engine.URL}}, Config{})
	c := openaiClient(gw.URL)
	s := c.Chat.Completions.NewStreaming(context.Background(), openai.ChatCompletionNewParams{Model: "m", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("x")}})
	var got strings.Builder
	for s.Next() {
		for _, ch := range s.Current().Choices {
			got.WriteString(ch.Delta.Content)
		}
	}
	err := s.Err()
	if got.String() != "t0t1" || err == nil || !strings.Contains(err.Error(), "broke the stream off") {
		t.Errorf("streamed %q, err %v; want t0t1 then the gateway's error", got.String(), err)
	}
}
