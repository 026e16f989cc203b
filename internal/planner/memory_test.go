package planner

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

// Korthikanti et al. 2022, Table 2, for GPT (ffn = 4h, MHA, dropout).
func TestActivationsMatchKorthikantiTable2(t *testing.T) {
	m, _ := DefaultCatalog().Model("megatron-175b")
	s, b, h, a := 2048.0, 2.0, float64(m.Hidden), float64(m.Heads)
	sbh := s * b * h
	for _, tt := range []struct {
		name string
		t    int
		sp   bool
		r    Recompute
		want float64
	}{
		{"no parallelism", 1, false, RecomputeNone, sbh * (34 + 5*a*s/h)},
		{"tensor parallel", 8, false, RecomputeNone, sbh * (10 + 24.0/8 + 5*a*s/(h*8))},
		{"tensor + sequence parallel", 8, true, RecomputeNone, sbh * (34.0/8 + 5*a*s/(h*8))},
		{"tensor parallel + selective", 8, false, RecomputeSelective, sbh * (10 + 24.0/8)},
		{"tensor + sequence parallel + selective", 8, true, RecomputeSelective, sbh * 34.0 / 8},
		{"full recompute", 8, false, RecomputeFull, 2 * sbh},
		{"full recompute + sequence parallel", 8, true, RecomputeFull, 2 * sbh / 8},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := ActivationBytesPerLayer(m, 2, 2048, tt.t, tt.sp, true, false, tt.r)
			if !near(got, tt.want, 1e-12) {
				t.Errorf("got %.6g bytes, want %.6g", got, tt.want)
			}
		})
	}
}

func TestActivationsGQASwiGLUByHand(t *testing.T) {
	// h=8, 4 heads, 2 KV heads (kv width 4), ffn 16, SwiGLU, no dropout;
	// s=4, b=1, t=2, no SP, no recompute, unfused attention.
	m := Model{Name: "tiny", Layers: 1, Hidden: 8, Heads: 4, KVHeads: 2, FFN: 16, Vocab: 10, MLP: MLPSwiGLU}
	// replicated: 8·sbh = 8·32 = 256
	// split:      (Q 2sbh=64 + K,V 4sb·kv=64 + O-input 2sbh=64 + 6sbf=384)/2 = 288
	// core:       2·a·s²·b/t = 2·4·16/2 = 64
	if got := ActivationBytesPerLayer(m, 1, 4, 2, false, false, false, RecomputeNone); got != 256+288+64 {
		t.Errorf("unfused: got %v, want %v", got, 256+288+64)
	}
	// Fused attention keeps fp32 log-sum-exp instead: 4·a·s·b/t = 32.
	if got := ActivationBytesPerLayer(m, 1, 4, 2, false, false, true, RecomputeNone); got != 256+288+32 {
		t.Errorf("fused: got %v, want %v", got, 256+288+32)
	}
}

func TestInFlightChunks(t *testing.T) {
	for _, tt := range []struct {
		name          string
		rank, p, v, m int
		want          int
	}{
		{"1F1B first rank", 0, 8, 1, 64, 8},
		{"1F1B last rank", 7, 8, 1, 64, 1},
		{"1F1B few micro-batches", 0, 8, 1, 3, 3},
		{"unknown micro-batches", 0, 8, 1, 0, 8},
		// Interleaved: 2(p−1) + (v−1)p + 1 chunks = pv + p − 1.
		{"interleaved first rank", 0, 8, 3, 64, 31},
		{"interleaved last rank", 7, 8, 3, 64, 17},
		{"interleaved few micro-batches", 0, 8, 3, 2, 6},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := inFlightChunks(tt.rank, tt.p, tt.v, tt.m); got != tt.want {
				t.Errorf("got %d, want %d", got, tt.want)
			}
		})
	}
}

// The first stage's interleaved activation memory is L layers times
// 1 + (p−1)/(pv) (Korthikanti Sec. 4.2.3).
func TestFirstStageInterleaveFactor(t *testing.T) {
	m, _ := DefaultCatalog().Model("megatron-175b")
	off := false
	j := Job{Model: m, Stack: DefaultStacks()[Megatron], Seq: 2048, FlashAttention: &off}
	c := Config{TP: 8, PP: 8, VP: 3, DP: 1, MicroBatch: 1, SP: true, Recompute: RecomputeSelective}
	perLayer := ActivationBytesPerLayer(m, 1, 2048, 8, true, true, false, RecomputeSelective)
	want := perLayer * 96 * (1 + 7.0/24)
	if got := FirstStageLayerActivationBytes(j, c); !near(got, want, 1e-12) {
		t.Errorf("got %.6g, want %.6g", got, want)
	}
}

func TestStateBytesPerParam(t *testing.T) {
	st := DefaultStacks()
	for _, tt := range []struct {
		name    string
		stack   StackKind
		prec    Precision
		zero, d int
		want    [3]float64
	}{
		{"megatron: fp32 main grads, 18 bytes", Megatron, BF16, 0, 8, [3]float64{2, 4, 12}},
		{"megatron distributed optimizer", Megatron, BF16, 1, 8, [3]float64{2, 4, 1.5}},
		{"zero-0 fp16", DeepSpeed, FP16, 0, 8, [3]float64{2, 2, 12}},
		{"zero-1 fp16", DeepSpeed, FP16, 1, 8, [3]float64{2, 2, 1.5}},
		{"zero-2", DeepSpeed, FP16, 2, 8, [3]float64{2, 0.25, 1.5}},
		{"zero-3", DeepSpeed, BF16, 3, 8, [3]float64{0.25, 0.25, 1.5}},
		{"deepspeed bf16 optimizer keeps fp32 grads", DeepSpeed, BF16, 1, 8, [3]float64{2, 6, 1.5}},
		{"fsdp full shard", FSDP, BF16, 3, 8, [3]float64{0.5, 0.5, 1}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			w, g, o := stateBytesPerParam(st[tt.stack], tt.prec, tt.zero, tt.d)
			if diff := cmp.Diff(tt.want, [3]float64{w, g, o}); diff != "" {
				t.Errorf("(-want +got)\n%s", diff)
			}
		})
	}
}

func TestLayout(t *testing.T) {
	for _, tt := range []struct {
		name     string
		layers   int
		p        int
		balanced bool
		logits   float64
		want     stageLayout
	}{
		{"single stage", 10, 1, false, 0.5, stageLayout{first: 10, last: 10, most: 10}},
		{"even split", 96, 8, false, 0.1, stageLayout{first: 12, last: 12, most: 12, middle: 12}},
		{"uneven split balances the last stage", 70, 12, false, 1, stageLayout{first: 6, last: 4, most: 6, middle: 6}},
		// Llama 3 405B on 16 stages: 126 = 15·8 + 6.
		{"uneven split without logits", 126, 16, false, 0, stageLayout{first: 8, last: 6, most: 8, middle: 8}},
		// BLOOM: 70 layers on 12 stages with an output layer worth about one
		// layer: 5 layers + logits (6.07) would be the slowest stage, so the
		// last gets 4 and the other eleven 6 each.
		{"balanced moves layers off the last stage", 70, 12, true, 1.07, stageLayout{first: 6, last: 4, most: 6, middle: 6}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, layout(tt.layers, tt.p, tt.balanced, tt.logits), cmp.AllowUnexported(stageLayout{})); diff != "" {
				t.Errorf("(-want +got)\n%s", diff)
			}
		})
	}
}

func TestUsableBytes(t *testing.T) {
	g, _ := DefaultCatalog().GPU("H100")
	// 80 GiB · 0.95 − 2 GiB = 74 GiB.
	if got, want := UsableBytes(g), int64(74*gib); got != want {
		t.Errorf("UsableBytes = %d, want %d", got, want)
	}
}

func TestMemoryAddsUp(t *testing.T) {
	m, _ := DefaultCatalog().Model("llama3-70b")
	g, _ := DefaultCatalog().GPU("H100")
	j := Job{Model: m, Cluster: Cluster{GPU: g, GPUs: 64}, Stack: DefaultStacks()[Megatron], Seq: 8192, GlobalBatch: 64}
	c := Config{TP: 8, PP: 4, VP: 1, DP: 2, MicroBatch: 1, SP: true, Recompute: RecomputeSelective}
	mem := Memory(j, c)
	if mem.TotalBytes != mem.WeightsBytes+mem.GradsBytes+mem.OptimizerBytes+mem.ActivationBytes+mem.OtherBytes {
		t.Errorf("parts do not add up: %+v", mem)
	}
	// 80 layers / 4 stages, 18 bytes per param of the first stage.
	params := (20*float64(m.LayerParams()) + float64(m.EmbeddingParams())) / 8
	if got := float64(mem.States()); mem.Stage == "first" && !near(got, 18*params, 1e-6) {
		t.Errorf("first-stage states = %.4g, want %.4g", got, 18*params)
	}
	// ZeRO-1 shrinks only the optimizer states.
	z := c
	z.ZeRO = 1
	mz := Memory(j, z)
	if mz.WeightsBytes != mem.WeightsBytes || mz.OptimizerBytes >= mem.OptimizerBytes {
		t.Errorf("zero-1: weights %d→%d, optimizer %d→%d", mem.WeightsBytes, mz.WeightsBytes, mem.OptimizerBytes, mz.OptimizerBytes)
	}
}
