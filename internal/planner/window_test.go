package planner

import (
	"strings"
	"testing"
)

// Sliding-window attention: a windowed layer's query at position x
// attends to min(window, x) keys, so GPT-OSS's 128-token window on every
// other layer cuts its attention work at 4,096 tokens nearly in half; the
// fused kernel's time follows, unfused attention (which computes and
// masks the whole s×s scores) does not.
func TestSlidingWindowAttention(t *testing.T) {
	full := Model{Name: "oss", Layers: 36, Hidden: 2880, Heads: 64, KVHeads: 8, HeadSize: 64, FFN: 2880,
		Vocab: 201088, MLP: MLPSwiGLU, RoPE: true}
	win := full
	win.SlidingWindow, win.WindowedLayers = 128, 18
	if err := win.Validate(); err != nil {
		t.Fatal(err)
	}
	// ∫₀⁴⁰⁹⁶ min(128, x) dx = 4096·128 − 128²/2 = 516,096 key pairs per
	// sequence; doubled to the full-attention convention and divided by
	// the 4,096 queries, 252 keys per query; half the layers at 4,096.
	if got, want := attentionKeys(win, 4096), 0.5*4096+0.5*252; got != want {
		t.Errorf("attentionKeys = %v, want %v", got, want)
	}
	if got := attentionKeys(full, 4096); got != 4096 {
		t.Errorf("full attention: attentionKeys = %v, want 4096", got)
	}
	// A window as long as the sequence is full attention.
	long := win
	long.SlidingWindow = 8192
	if got := attentionKeys(long, 4096); got != 4096 {
		t.Errorf("window ≥ seq: attentionKeys = %v, want 4096", got)
	}
	fw, ww := LayerForwardFLOPs(full, 1, 4096), LayerForwardFLOPs(win, 1, 4096)
	if ww.Matmul != fw.Matmul || !near(ww.Attention, fw.Attention*(0.5+0.5*252.0/4096), 1e-12) {
		t.Errorf("windowed layer FLOPs %+v vs full %+v", ww, fw)
	}

	job := func(m Model, flash bool) Job {
		j := testJob(t, "llama3-8b", "H100", 8, Megatron)
		j.Model, j.Seq, j.GlobalBatch = m, 4096, 64
		j.FlashAttention = &flash
		return j
	}
	c := Config{TP: 1, PP: 1, DP: 8, MicroBatch: 1}
	fFull, fWin := costOfLayer(job(full, true), c), costOfLayer(job(win, true), c)
	if !(fWin.coreComp < 0.6*fFull.coreComp) {
		t.Errorf("fused attention core %.3g s windowed vs %.3g s full: want about half", fWin.coreComp, fFull.coreComp)
	}
	uFull, uWin := costOfLayer(job(full, false), c), costOfLayer(job(win, false), c)
	if uWin.coreComp != uFull.coreComp {
		t.Errorf("unfused attention computes the whole s×s scores: %.3g vs %.3g s", uWin.coreComp, uFull.coreComp)
	}
}

// model.sliding_window (window_size) and sliding_window_layers: absent
// layers means every layer; a bad value makes the vector not evaluated
// with the field, the value and what is accepted.
func TestVectorSlidingWindowSchema(t *testing.T) {
	vec := func(id, extra string) string {
		return `{"id":"` + id + `","hardware":{"gpu":"H100","count":8},
  "model":{"layers":4,"hidden":1024,"heads":8,"ffn":4096,"vocab":1000,"seq":1024,"mlp":"swiglu"` + extra + `},
  "training":{"gbs":8},"parallel":{"tp":1,"dp":8},
  "measured":{"tokens_per_s_per_gpu":1000},"tolerance":{"metric":"tokens_per_s_per_gpu","rel":0.5}}`
	}
	vs, err := ParseVectors([]byte("[" + strings.Join([]string{
		vec("all", `,"window_size":256`),
		vec("half", `,"sliding_window":256,"sliding_window_layers":2`),
		vec("negative", `,"sliding_window":-1`),
		vec("too-many", `,"sliding_window":256,"sliding_window_layers":5`),
		vec("no-window", `,"sliding_window_layers":2`),
	}, ",") + "]"))
	if err != nil {
		t.Fatal(err)
	}
	if m := vs[0].Model.model("all", Megatron); m.SlidingWindow != 256 || m.WindowedLayers != 4 {
		t.Errorf("window_size without layers: window %d on %d layers, want 256 on all 4", m.SlidingWindow, m.WindowedLayers)
	}
	if m := vs[1].Model.model("half", Megatron); m.SlidingWindow != 256 || m.WindowedLayers != 2 {
		t.Errorf("window %d on %d layers, want 256 on 2", m.SlidingWindow, m.WindowedLayers)
	}
	rep := Evaluate(vs, DefaultCatalog(), DefaultStacks())
	want := map[string]string{
		"negative":  "sliding_window must not be negative (0: full attention), got -1",
		"too-many":  "sliding_window_layers must be 0–4 (the layers), got 5",
		"no-window": "sliding_window (0) and sliding_window_layers (2) must both be set or both be 0",
	}
	checkNotEvaluated(t, rep, want)
	if len(rep.Vectors) != 2 {
		t.Errorf("want the two valid vectors evaluated, got %d", len(rep.Vectors))
	}
}
