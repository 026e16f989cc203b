package openai

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// promptBodies are bodies of the shapes clients send; the scan must take
// every one of them without falling back.
var promptBodies = []struct{ path, body string }{
	{PathCompletions, `{"model":"m","prompt":"hi","max_tokens":3,"stream":true}`},
	{PathCompletions, ` { "model" : "m" , "prompt" : "a \"quoted\" line\nand a tab\t and \u00e9 \ud83d\ude00" , "ignore_eos" : true , "n" : 1 } `},
	{PathCompletions, `{"model":"m","prompt":"x","max_tokens":null,"max_completion_tokens":7,"stream":false,"stream_options":{"include_usage":true},"temperature":0.7,"top_p":1e-3,"stop":["a","b"],"logit_bias":{"50256":-100},"user":null}`},
	{PathChatCompletions, `{"model":"Qwen3-8B","messages":[{"role":"system","content":"You are terse."},{"role":"user","content":"hello\nthere","name":"bob"},{"role":"assistant","content":null}],"max_tokens":5,"stream":true,"stream_options":{"include_usage":false}}`},
	{PathChatCompletions, `{"messages":[{"content":"late role","role":"user"}],"model":"m","tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object","properties":{}}}}]}`},
	{PathCompletions, fmt.Sprintf(`{"model":"sim","prompt":%q,"max_tokens":16,"stream":true,"ignore_eos":true}`, strings.Repeat("cluster gpu token cache ", 9000))},
}

func TestScanPromptTakesTheUsualBodies(t *testing.T) {
	opts := cmpopts.IgnoreUnexported(PromptRequest{})
	for i, tc := range promptBodies {
		fast, ok := scanPrompt(nil, tc.path, []byte(tc.body))
		if !ok {
			t.Errorf("body %d fell back to encoding/json: %.200s", i, tc.body)
			continue
		}
		ref, err := parsePromptJSON(tc.path, []byte(tc.body))
		if err != nil {
			t.Fatalf("body %d: reference: %v", i, err)
		}
		if d := cmp.Diff(ref, fast, opts); d != "" {
			t.Errorf("body %d: scan differs from encoding/json (-want +got):\n%s", i, d)
		}
	}
}

// An escape-free completions prompt is not copied; a rendered one goes
// into the scratch buffer.
func TestParsePromptIntoReusesBuffers(t *testing.T) {
	body := []byte(`{"model":"m","prompt":"abcdefgh"}`)
	p, err := ParsePromptInto(nil, PathCompletions, body)
	if err != nil {
		t.Fatal(err)
	}
	if &p.Prompt[0] != &body[bytes.Index(body, []byte("abcdefgh"))] || p.Scratch() != nil {
		t.Error("escape-free prompt was copied")
	}
	scratch := make([]byte, 0, 256)
	p, err = ParsePromptInto(scratch, PathChatCompletions, []byte(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if &p.Prompt[0] != &scratch[:1][0] || cap(p.Scratch()) != 256 {
		t.Error("chat prompt not rendered into the scratch buffer")
	}
	if got, want := string(p.Prompt), ChatPrompt([]ChatMessage{{Role: "user", Content: "hi"}}); got != want {
		t.Errorf("rendered %q, want %q", got, want)
	}
}

// The scan's answers are encoding/json's: whenever it claims a body, the
// reference decodes that body to the same request without error. And
// ParsePrompt never panics.
func FuzzParsePromptAgrees(f *testing.F) {
	for _, tc := range promptBodies {
		if len(tc.body) < 4096 { // a big seed makes every minimization slow
			f.Add(tc.path, tc.body)
		}
	}
	for _, body := range []string{
		`{"model":"m","prompt":"x","max_tokens":-1}`, `{"model":"m","prompt":"x","max_tokens":1.0}`,
		`{"model":"m","prompt":"x","Model":"n"}`, `{"model":"m","prompt":"x","prompt":"y"}`,
		`{"model":"m","prompt":"\ud800x"}`, "{\"model\":\"m\",\"prompt\":\"\xff\xfe\"}", `{"model":"m","prompt":"x"} x`,
		`{"model":"m","prompt":"x","n":2}`, `{"model":"m","prompt":""}`, `{"model":"m","prompt":[1,2]}`,
		`{"model":"m","prompt":"x","stream":"yes"}`, `{"model":"m","prompt":"x","ſtream":true}`, `{"model":"m\u0000","prompt":"x"}`,
	} {
		f.Add(PathCompletions, body)
	}
	f.Add(PathChatCompletions, `{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"x"}]}]}`)
	f.Add(PathChatCompletions, `{"model":"m","messages":[{"role":"","content":"x"}]}`)
	f.Add(PathChatCompletions, `{"model":"m","messages":[{"role":"user","ROLE":"x","content":"x"}]}`)
	opts := cmpopts.IgnoreUnexported(PromptRequest{})
	f.Fuzz(func(t *testing.T, path, body string) {
		fast, ok := scanPrompt(nil, path, []byte(body))
		ref, err := parsePromptJSON(path, []byte(body))
		if ok {
			if err != nil {
				t.Fatalf("scan accepted %q, encoding/json: %v", body, err)
			}
			if d := cmp.Diff(ref, fast, opts); d != "" {
				t.Fatalf("%q: scan differs from encoding/json (-want +got):\n%s", body, d)
			}
		}
		p, err := ParsePrompt(path, []byte(body))
		if err == nil && (p.Model == "" || (len(p.Prompt) == 0 && len(p.TokenIDs) == 0)) {
			t.Fatalf("accepted %q as %+v", body, p)
		}
	})
}

// The old tokenizer, with a division per token: Tokenize must agree.
func tokenizeByDivision(text string, vocab int) []uint32 {
	n := (len(text) + BytesPerToken - 1) / BytesPerToken
	out := make([]uint32, n)
	mod := uint32(1 << 31)
	if vocab > 0 {
		mod = uint32(vocab)
	}
	full := len(text) / BytesPerToken
	for i := range full {
		j := i * BytesPerToken
		v := uint32(text[j]) | uint32(text[j+1])<<8 | uint32(text[j+2])<<16 | uint32(text[j+3])<<24
		out[i] = uint32(mix64(uint64(v))>>32) % mod
	}
	if full < n {
		v := uint64(len(text) - full*BytesPerToken)
		for j := full * BytesPerToken; j < len(text); j++ {
			v = v<<8 | uint64(text[j])
		}
		out[full] = uint32(mix64(v|1<<40)>>32) % mod
	}
	return out
}

func TestTokenizeAndSeedAgreeWithTheirDefinitions(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, vocab := range []int{0, 1, 7, 1000, 151936, 1<<31 - 1, 1 << 31} {
		for range 50 {
			b := make([]byte, rng.IntN(300))
			for i := range b {
				b[i] = byte(rng.IntN(256))
			}
			want := tokenizeByDivision(string(b), vocab)
			if d := cmp.Diff(want, Tokenize(b, vocab)); d != "" {
				t.Fatalf("vocab %d, %d bytes: %s", vocab, len(b), d)
			}
			p := PromptRequest{Prompt: b}
			if p.Seed(vocab) != PromptSeed(want) {
				t.Fatalf("vocab %d: seed differs from PromptSeed(Tokenize)", vocab)
			}
		}
	}
}

// BenchmarkParsePrompt compares the scan with encoding/json on the
// overhead benchmark's bodies.
func BenchmarkParsePrompt(b *testing.B) {
	for _, size := range []int{1000, 220_000} {
		body := fmt.Appendf(nil, `{"model":"sim","prompt":%q,"max_tokens":16,"stream":true,"ignore_eos":true}`, strings.Repeat("word ", size/5))
		b.Run(fmt.Sprintf("scan/%dB", size), func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				if _, err := ParsePrompt(PathCompletions, body); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(fmt.Sprintf("encoding-json/%dB", size), func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				if _, err := parsePromptJSON(PathCompletions, body); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func FuzzParsePrompt(f *testing.F) {
	f.Add(PathCompletions, `{"model":"m","prompt":"hi","max_tokens":3,"stream":true}`)
	f.Add(PathCompletions, `{"model":"m","prompt":[[1,2,3]]}`)
	f.Add(PathChatCompletions, `{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"x"}]}]}`)
	f.Fuzz(func(t *testing.T, path, body string) {
		p, err := ParsePrompt(path, []byte(body))
		if err != nil {
			return
		}
		if p.Model == "" || (len(p.Prompt) == 0 && len(p.TokenIDs) == 0) || p.MaxTokens < 0 {
			t.Fatalf("accepted %q as %+v", body, p)
		}
		if p.NumTokens() != len(p.Tokens(1000)) {
			t.Fatal("NumTokens disagrees with Tokens")
		}
	})
}
