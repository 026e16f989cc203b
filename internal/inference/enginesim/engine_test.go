package enginesim

import (
	"strings"
	"testing"
	"time"

	"github.com/gangway/gangway/internal/hardware"
	"github.com/gangway/gangway/internal/inference/openai"
	"github.com/google/go-cmp/cmp"
)

func mustConfig(t testing.TB, model, gpu string, tp int, quant string) hardware.Config {
	t.Helper()
	c, err := hardware.NewConfig(model, gpu, tp, quant)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// runToIdle steps e in virtual time from now until it has no work and
// returns the time reached.
func runToIdle(t testing.TB, e *Engine, now time.Duration) time.Duration {
	t.Helper()
	for i := 0; e.HasWork(); i++ {
		if i > 1_000_000 {
			t.Fatal("engine did not drain")
		}
		res := e.Step(now)
		if res.Duration <= 0 {
			t.Fatalf("step with work took %v", res.Duration)
		}
		now += res.Duration
	}
	return now
}

func seqTokens(start, n int) []uint32 {
	out := make([]uint32, n)
	for i := range out {
		out[i] = uint32(start + i)
	}
	return out
}

// Published: 16–20k prefill tokens/s for Qwen3-32B on 2×H100. The
// engine, fed long unique prompts and asked for one token each, must land
// in that band through its scheduler, not just the formula.
func TestPrefillThroughputMatchesPublished(t *testing.T) {
	e, err := NewEngine(mustConfig(t, "Qwen3-32B", "H100", 2, "bf16"))
	if err != nil {
		t.Fatal(err)
	}
	var total int
	for i := range 40 {
		r := &Request{Prompt: seqTokens(i*100_000, 3000), MaxTokens: 1}
		total += len(r.Prompt)
		if err := e.Add(r, 0); err != nil {
			t.Fatal(err)
		}
	}
	end := runToIdle(t, e, 0)
	rate := float64(total) / end.Seconds()
	if rate < 16_000 || rate > 20_000 {
		t.Errorf("prefill throughput = %.0f tokens/s, published 16–20k", rate)
	}
	t.Logf("prefill %.0f tokens/s", rate)
}

func TestChunkedPrefillRespectsBudget(t *testing.T) {
	c := mustConfig(t, "Qwen3-8B", "H100", 1, "bf16")
	c.MaxNumBatchedTokens = 2048
	e, err := NewEngine(c)
	if err != nil {
		t.Fatal(err)
	}
	long := &Request{Prompt: seqTokens(0, 5000), MaxTokens: 3}
	short := &Request{Prompt: seqTokens(10_000, 100), MaxTokens: 3}
	e.Add(long, 0)
	e.Add(short, 0)
	var now time.Duration
	var firsts []*Request
	steps := 0
	for e.HasWork() {
		res := e.Step(now)
		steps++
		if res.Tokens > 2048 {
			t.Fatalf("step %d computed %d tokens, budget 2048", steps, res.Tokens)
		}
		now += res.Duration
		for _, ev := range res.Events {
			if ev.First {
				firsts = append(firsts, ev.Req)
			}
		}
	}
	// Step 1 takes 2048 of the long prompt; the short one waits for budget
	// (FCFS) and rides along in step 3 with the long prompt's last chunk.
	if len(firsts) != 2 || firsts[0] != long && firsts[1] != long {
		t.Fatalf("both requests should produce a first token, got %d", len(firsts))
	}
	if got := long.FirstToken(); got <= 0 || len(long.Output()) != 3 || long.FinishReason() != FinishLength {
		t.Errorf("long request: first token %v, output %d, reason %q", got, len(long.Output()), long.FinishReason())
	}
	if steps < 5 {
		t.Errorf("ran %d steps; 5000 tokens in 2048-token chunks plus 2 decodes need at least 5", steps)
	}
}

func TestPrefixCacheHitsSharedPrefix(t *testing.T) {
	e, err := NewEngine(mustConfig(t, "Qwen3-8B", "H100", 1, "bf16"))
	if err != nil {
		t.Fatal(err)
	}
	prefix := seqTokens(0, 4096)
	a := &Request{Prompt: append(append([]uint32(nil), prefix...), seqTokens(50_000, 100)...), MaxTokens: 2}
	e.Add(a, 0)
	now := runToIdle(t, e, 0)
	ttftCold := a.FirstToken() - a.Arrival()

	b := &Request{Prompt: append(append([]uint32(nil), prefix...), seqTokens(60_000, 100)...), MaxTokens: 2}
	e.Add(b, now)
	runToIdle(t, e, now)
	ttftWarm := b.FirstToken() - b.Arrival()

	if got := b.CachedPromptTokens(); got != 4096 {
		t.Errorf("second request found %d cached prompt tokens, want 4096 (the shared prefix)", got)
	}
	if ttftWarm*3 > ttftCold {
		t.Errorf("warm TTFT %v should be far below cold %v", ttftWarm, ttftCold)
	}
	st := e.Stats()
	if diff := cmp.Diff([]int64{int64(len(a.Prompt) + len(b.Prompt)), 4096}, []int64{st.PrefixQueries, st.PrefixHits}); diff != "" {
		t.Errorf("prefix cache queries/hits (-want +got):\n%s", diff)
	}

	// A fully cached prompt still computes its last token.
	c := &Request{Prompt: append([]uint32(nil), prefix...), MaxTokens: 1}
	e.Add(c, 0)
	runToIdle(t, e, 0)
	if got := c.CachedPromptTokens(); got != 4096-16 {
		t.Errorf("fully cached prompt hit %d tokens, want %d (last block recomputed)", got, 4096-16)
	}
}

func TestPrefixCachingDisabled(t *testing.T) {
	c := mustConfig(t, "Qwen3-8B", "H100", 1, "bf16")
	c.DisablePrefixCaching = true
	e, _ := NewEngine(c)
	for range 2 {
		r := &Request{Prompt: seqTokens(0, 1000), MaxTokens: 1}
		e.Add(r, 0)
		runToIdle(t, e, 0)
		if r.CachedPromptTokens() != 0 {
			t.Fatalf("cache hit with prefix caching disabled")
		}
	}
}

func TestLRUEvictsLeastRecentlyUsed(t *testing.T) {
	c := mustConfig(t, "Qwen3-8B", "H100", 1, "bf16")
	c.NumGPUBlocksOverride = 100 // 1600 tokens
	c.MaxModelLen = 1600
	e, err := NewEngine(c)
	if err != nil {
		t.Fatal(err)
	}
	run := func(start int) *Request {
		r := &Request{Prompt: seqTokens(start, 640), MaxTokens: 1} // 40 blocks
		if err := e.Add(r, 0); err != nil {
			t.Fatal(err)
		}
		runToIdle(t, e, 0)
		return r
	}
	run(0)      // A
	run(10_000) // B
	run(0)      // A again: now most recent
	run(20_000) // C: 40 more blocks force evicting 20 of the oldest, B's
	a := run(0) // A is still cached
	b := run(10_000)
	if a.CachedPromptTokens() != 624 {
		t.Errorf("A cached %d tokens, want 624 (recently used, kept)", a.CachedPromptTokens())
	}
	if b.CachedPromptTokens() == 624 {
		t.Errorf("B fully cached; it was least recently used and should have lost blocks")
	}
	if e.Stats().Evictions == 0 {
		t.Error("no evictions counted")
	}
}

func TestPreemptionByRecompute(t *testing.T) {
	c := mustConfig(t, "Qwen3-8B", "H100", 1, "bf16")
	c.NumGPUBlocksOverride = 64 // 1024 tokens
	c.MaxModelLen = 1024
	e, err := NewEngine(c)
	if err != nil {
		t.Fatal(err)
	}
	var reqs []*Request
	for i := range 4 {
		// Each fits alone (200 + 300 tokens) but four cannot decode together.
		r := &Request{Prompt: seqTokens(i*1000, 200), MaxTokens: 300, Seed: uint64(i)}
		reqs = append(reqs, r)
		e.Add(r, 0)
	}
	maxUsage := 0.0
	var now time.Duration
	for e.HasWork() {
		res := e.Step(now)
		now += res.Duration
		maxUsage = max(maxUsage, e.Load().KVUsage)
	}
	if e.Stats().Preemptions == 0 {
		t.Fatal("expected preemptions with 64 blocks and 4×500-token requests")
	}
	for i, r := range reqs {
		if len(r.Output()) != 300 || r.FinishReason() != FinishLength {
			t.Errorf("request %d: %d tokens, reason %q; want 300, length", i, len(r.Output()), r.FinishReason())
		}
		// Preemption must not change what is generated.
		for j, tok := range r.Output() {
			if tok != openai.GeneratedToken(r.Seed, j) {
				t.Fatalf("request %d token %d differs after recompute", i, j)
			}
		}
	}
	if maxUsage > 1 {
		t.Errorf("KV usage reached %v", maxUsage)
	}
	if got := e.Load(); got.KVUsage != 0 || got.Running != 0 {
		t.Errorf("idle engine load = %+v, want empty", got)
	}
}

func TestAbortFreesBlocks(t *testing.T) {
	e, _ := NewEngine(mustConfig(t, "Qwen3-8B", "H100", 1, "bf16"))
	r := &Request{Prompt: seqTokens(0, 500), MaxTokens: 100}
	e.Add(r, 0)
	e.Step(0)
	if e.Load().Running != 1 || e.Load().KVUsage == 0 {
		t.Fatalf("load after one step = %+v", e.Load())
	}
	e.Abort(r, time.Second)
	if got := e.Load(); got.Running != 0 || got.KVUsage != 0 || e.HasWork() {
		t.Errorf("after abort load = %+v", got)
	}
	if r.FinishReason() != FinishAbort || e.Stats().Finished[FinishAbort] != 1 {
		t.Errorf("abort not recorded: %q", r.FinishReason())
	}
}

func TestAddRejects(t *testing.T) {
	c := mustConfig(t, "Llama-3-8B", "H100", 1, "bf16")
	e, _ := NewEngine(c)
	tests := []struct {
		name string
		r    *Request
	}{
		{"empty prompt", &Request{MaxTokens: 1}},
		{"zero max tokens", &Request{Prompt: []uint32{1}}},
		{"too long", &Request{Prompt: seqTokens(0, 8000), MaxTokens: 500}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := e.Add(tc.r, 0); err == nil {
				t.Error("Add succeeded")
			}
		})
	}
	if e.HasWork() {
		t.Error("rejected requests were queued")
	}
}

func TestStopAfterEndsWithStop(t *testing.T) {
	e, _ := NewEngine(mustConfig(t, "Qwen3-8B", "H100", 1, "bf16"))
	r := &Request{Prompt: seqTokens(0, 10), MaxTokens: 50, StopAfter: 7}
	e.Add(r, 0)
	runToIdle(t, e, 0)
	if len(r.Output()) != 7 || r.FinishReason() != FinishStop {
		t.Errorf("got %d tokens, reason %q; want 7, stop", len(r.Output()), r.FinishReason())
	}
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }

func TestDeterministic(t *testing.T) {
	run := func() (time.Duration, []uint32) {
		e, _ := NewEngine(mustConfig(t, "Qwen3-32B", "H100", 2, "bf16"))
		var reqs []*Request
		for i := range 20 {
			r := &Request{Prompt: seqTokens(i%3*7000, 2000+i*10), MaxTokens: 20 + i, Seed: uint64(i)}
			reqs = append(reqs, r)
			e.Add(r, time.Duration(i)*time.Millisecond)
		}
		end := runToIdle(t, e, 0)
		return end, reqs[19].Output()
	}
	e1, o1 := run()
	e2, o2 := run()
	if e1 != e2 || !cmp.Equal(o1, o2) {
		t.Errorf("two identical runs differ: %v vs %v", e1, e2)
	}
}

func BenchmarkEngineStep(b *testing.B) {
	c, _ := hardware.NewConfig("Qwen3-32B", "H100", 2, "bf16")
	e, _ := NewEngine(c)
	var now time.Duration
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if e.Load().Running+e.Load().Waiting < 64 {
			e.Add(&Request{Prompt: seqTokens(i%10*10000, 2000), MaxTokens: 200, Seed: uint64(i)}, now)
		}
		now += e.Step(now).Duration
	}
}

func TestNewEngineRefusesWhatDoesNotFit(t *testing.T) {
	if _, err := NewEngine(mustConfig(t, "Qwen3-32B", "H100", 1, "bf16")); err == nil || !contains(err.Error(), "max_model_len") {
		t.Errorf("Qwen3-32B on one H100 should not fit: %v", err)
	}
}
