package planner

import (
	"math"
	"testing"
)

func TestRingCollectivesByHand(t *testing.T) {
	// 8 ranks, 1 GB, 100 GB/s bus bandwidth: all-reduce moves 2·7/8 GB per
	// rank (17.5 ms), all-gather 7/8 GB (8.75 ms).
	if got := ringAllReduce(1e9, 8, 100e9, 0); !near(got, 0.0175, 1e-12) {
		t.Errorf("all-reduce = %v s, want 0.0175", got)
	}
	if got := ringGather(1e9, 8, 100e9, 0); !near(got, 0.00875, 1e-12) {
		t.Errorf("all-gather = %v s, want 0.00875", got)
	}
	if ringAllReduce(1e9, 1, 1, 1) != 0 || ringGather(1e9, 1, 1, 1) != 0 {
		t.Error("a group of one must not communicate")
	}
}

func testJob(t *testing.T, model, gpu string, gpus int, kind StackKind) Job {
	t.Helper()
	cat := DefaultCatalog()
	m, err := cat.Model(model)
	if err != nil {
		t.Fatal(err)
	}
	g, err := cat.GPU(gpu)
	if err != nil {
		t.Fatal(err)
	}
	return Job{Model: m, Cluster: Cluster{GPU: g, GPUs: gpus}, Stack: DefaultStacks()[kind], Seq: 2048, GlobalBatch: 512}
}

func TestBandwidths(t *testing.T) {
	j := testJob(t, "llama3-8b", "H100", 64, Megatron)
	st := j.Stack
	nvlink := 900e9 / 2 * nvlinkEfficiency
	nic := 400e9 / 8 * st.NetworkEfficiency
	for _, tt := range []struct {
		name string
		c    Config
		want float64
	}{
		// TP=8 fills the node: each DP group has one GPU per node and one
		// NIC per node.
		{"tp8 dp8: one NIC", Config{TP: 8, PP: 1, DP: 8}, nic},
		// TP=1: eight members of the DP group per node share eight NICs.
		{"tp1 dp64: eight NICs", Config{TP: 1, PP: 1, DP: 64}, 8 * nic},
		{"tp2 dp32: four NICs", Config{TP: 2, PP: 1, DP: 32}, 4 * nic},
		// The whole DP group inside one node: NVLink.
		{"tp2 dp4 pp8: NVLink", Config{TP: 2, PP: 8, DP: 4}, nvlink},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, _ := dpBandwidth(j, tt.c)
			if !near(got, tt.want, 1e-12) {
				t.Errorf("dp bandwidth = %.4g, want %.4g", got, tt.want)
			}
		})
	}
	if got, _ := tpBandwidth(j, 8); !near(got, nvlink, 1e-12) {
		t.Errorf("tp bandwidth = %.4g, want NVLink %.4g", got, nvlink)
	}
	if got, _ := ppBandwidth(j, Config{TP: 8, PP: 8, DP: 1}); !near(got, 400e9/8*st.NetworkEfficiency, 1e-12) {
		t.Errorf("pp bandwidth across nodes = %.4g, want one NIC", got)
	}
}

// With identical stages and no communication, 1F1B's bubble is (p−1)/m of
// the steady state and interleaving divides it by v (Narayanan et al. 2021,
// Sec. 2.2).
func TestPipelineBubble(t *testing.T) {
	m := Model{Name: "uniform", Layers: 24, Hidden: 1024, Heads: 16, KVHeads: 16, FFN: 4096, Vocab: 8, MLP: MLPGELU}
	g, _ := DefaultCatalog().GPU("A100")
	// Put all 8 GPUs in one NVLink domain so p2p is NVLink; the tiny vocab
	// makes the last stage (almost) equal to the others.
	j := Job{Model: m, Cluster: Cluster{GPU: g, GPUs: 8}, Stack: DefaultStacks()[Megatron], Seq: 1024, GlobalBatch: 32}
	for _, tt := range []struct {
		name string
		v    int
	}{{"1F1B", 1}, {"interleaved v=2", 2}, {"interleaved v=3", 3}} {
		t.Run(tt.name, func(t *testing.T) {
			c := Config{TP: 1, PP: 8, VP: tt.v, DP: 1, MicroBatch: 1, Recompute: RecomputeNone}
			e := Predict(j, c)
			steady := e.Time.Total() - e.Time.Bubble - e.Time.DPComm - e.Time.Optimizer
			want := 7.0 / (32 * float64(tt.v))
			if got := e.Time.Bubble / steady; math.Abs(got-want) > 0.002 {
				t.Errorf("bubble/steady = %.4f, want (p−1)/(v·m) = %.4f", got, want)
			}
		})
	}
}

func TestPredictOrderings(t *testing.T) {
	j := testJob(t, "llama3-70b", "H100", 256, Megatron)
	base := Config{TP: 8, PP: 4, VP: 1, DP: 8, MicroBatch: 1, SP: true, Recompute: RecomputeNone}
	none := Predict(j, base)
	sel, full := base, base
	sel.Recompute, full.Recompute = RecomputeSelective, RecomputeFull
	es, ef := Predict(j, sel), Predict(j, full)
	if !(none.StepSeconds <= es.StepSeconds && es.StepSeconds < ef.StepSeconds) {
		t.Errorf("step times none %.3f, selective %.3f, full %.3f: recomputation must cost time", none.StepSeconds, es.StepSeconds, ef.StepSeconds)
	}
	if !(none.Memory.ActivationBytes >= es.Memory.ActivationBytes && es.Memory.ActivationBytes > ef.Memory.ActivationBytes) {
		t.Errorf("activations none %d, selective %d, full %d: recomputation must save memory",
			none.Memory.ActivationBytes, es.Memory.ActivationBytes, ef.Memory.ActivationBytes)
	}
	// MFU ignores recomputation; HFU counts it.
	if ef.HFU <= ef.MFU || none.HFU != none.MFU {
		t.Errorf("full recompute: HFU %.3f must exceed MFU %.3f; without it they are equal (%.3f, %.3f)", ef.HFU, ef.MFU, none.HFU, none.MFU)
	}
	// Tokens/s per GPU and step time describe the same thing.
	if got := float64(j.GlobalBatch*j.Seq) / none.StepSeconds / 256; !near(none.TokensPerSecPerGPU, got, 1e-12) {
		t.Errorf("tokens/s/GPU %.2f, want %.2f", none.TokensPerSecPerGPU, got)
	}
	if parts := none.Time.Total(); !near(parts, none.StepSeconds, 1e-12) {
		t.Errorf("time parts %.4f do not add up to step %.4f", parts, none.StepSeconds)
	}
}

func TestOverlapHidesDataParallelTime(t *testing.T) {
	j := testJob(t, "llama3-8b", "H100", 64, Megatron)
	c := Config{TP: 1, PP: 1, VP: 1, DP: 64, MicroBatch: 1, Recompute: RecomputeSelective, ZeRO: 1}
	off, on := false, true
	j.OverlapDP = &off
	exposed := Predict(j, c)
	j.OverlapDP = &on
	hidden := Predict(j, c)
	if !(hidden.Time.DPComm < exposed.Time.DPComm && hidden.Time.DPComm > 0) {
		t.Errorf("DP time with overlap %.4f s, without %.4f s: overlap must hide some but not all", hidden.Time.DPComm, exposed.Time.DPComm)
	}
	// Without overlap the DP time is the reduce-scatter plus all-gather of
	// the whole model: (d−1)/d·P·(4+2) bytes over eight NICs.
	bw, lat := dpBandwidth(j, c)
	p := float64(j.Model.Params())
	want := 63.0/64*p*4/bw + 63.0/64*p*2/bw + 2*lat
	if !near(exposed.Time.DPComm, want, 1e-9) {
		t.Errorf("DP time %.5f s, want %.5f s", exposed.Time.DPComm, want)
	}
}

func TestTensorParallelTimeByHand(t *testing.T) {
	// One forward pass without SP: two all-reduces of b·s·h 16-bit values.
	j := testJob(t, "megatron-175b", "A100", 64, Megatron)
	c := Config{TP: 8, PP: 8, VP: 1, DP: 1, MicroBatch: 1}
	lc := costOfLayer(j, c)
	bw := 600e9 / 2 * nvlinkEfficiency
	v := 2048.0 * 12288 * 2
	want := 2 * (2*7.0/8*v/bw + nvlinkLatency)
	if !near(lc.tpPass, want, 1e-12) {
		t.Errorf("tp pass = %.6g s, want %.6g", lc.tpPass, want)
	}
	// Forward compute: the four projections of one micro-batch on one of
	// 8 GPUs, each at the fitted efficiency times its shape efficiency
	// (all are compute-bound here), plus fused causal attention (half the
	// attention FLOPs at its own efficiency).
	peak := 312e12 * j.Stack.ComputeEfficiency
	T, h := 2048.0, 12288.0
	k := func(k float64) float64 { return k / (k + gemmKOverhead) }
	mm := 2*T*(3*h/8)*h/(peak*k(h)) + // QKV
		2*T*h*(h/8)/(peak*k(h/8)) + // attention output
		2*T*(4*h/8)*h/(peak*k(h)) + // MLP up
		2*T*h*(4*h/8)/(peak*k(4*h/8)) // MLP down
	fl := LayerForwardFLOPs(j.Model, 1, 2048)
	if want := mm + fl.Attention/2/8/(peak*fusedAttentionEfficiency); !near(lc.fwdCompute, want, 1e-12) {
		t.Errorf("forward compute (fused attention) = %.6g s, want %.6g", lc.fwdCompute, want)
	}
	// Unfused: scores and context are batched GEMMs over 12 heads with
	// K (or N) = the 128-wide head; the scores GEMM writes 2048² 16-bit
	// values per head and is bound by HBM on A100 (intensity ≈ 114
	// FLOP/byte under a ridge of 312/1.6 ≈ 195).
	off := false
	j.FlashAttention = &off
	hbm := 2.0e12 * hbmEfficiency
	heads := 96.0 / 8
	scores := math.Max(2*T*T*128*heads/(peak*k(128)), 2*(T*128+128*T+T*T)*heads/hbm)
	context := math.Max(2*T*128*T*heads/(peak*k(T)), 2*(T*T+T*128+T*128)*heads/hbm)
	if got, want := costOfLayer(j, c).fwdCompute, mm+scores+context; !near(got, want, 1e-12) {
		t.Errorf("forward compute (unfused) = %.6g s, want %.6g", got, want)
	}
}

func TestGEMMShapeEfficiency(t *testing.T) {
	for _, tt := range []struct {
		name string
		g    gemm
		want float64
	}{
		{"aligned, long K", gemm{4096, 4096, 4096, 1}, 4096.0 / 4160},
		{"N of 64 fills half a tile", gemm{4096, 64, 4096, 1}, 0.5 * 4096 / 4160},
		{"N of 1000 wastes 24 of 1024", gemm{4096, 1000, 4096, 1}, 1000.0 / 1024 * 4096 / 4160},
		{"head-dimension K", gemm{2048, 2048, 128, 1}, 128.0 / 192},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.g.shapeEfficiency(); !near(got, tt.want, 1e-12) {
				t.Errorf("shapeEfficiency = %.6f, want %.6f", got, tt.want)
			}
		})
	}
	// A GEMM with one token row is bound by reading its weights.
	g := gemm{1, 8192, 8192, 1}
	peak, hbm := 989e12, 3.35e12
	if got, want := g.roofline(peak, hbm, 2), g.bytes(2)/hbm; !near(got, want, 1e-12) {
		t.Errorf("one-row GEMM %.3g s, want the weight read %.3g s", got, want)
	}
	// dgrad and wgrad have the forward's FLOPs.
	if g.dgrad().flops() != g.flops() || g.wgrad().flops() != g.flops() {
		t.Error("backward GEMMs must have the forward's FLOPs")
	}
}

func TestConfigValidate(t *testing.T) {
	j := testJob(t, "llama3-70b", "H100", 64, Megatron)
	for _, tt := range []struct {
		name string
		c    Config
		ok   bool
	}{
		{"valid", Config{TP: 8, PP: 4, VP: 2, DP: 2, MicroBatch: 1}, true},
		{"tp does not divide heads", Config{TP: 3, PP: 1, DP: 1, MicroBatch: 1}, false},
		{"interleave need not divide the layers", Config{TP: 8, PP: 4, VP: 3, DP: 2, MicroBatch: 1}, true},
		{"context parallel", Config{TP: 8, PP: 1, DP: 2, CP: 4, MicroBatch: 1}, true},
		{"cp must divide the sequence", Config{TP: 8, PP: 1, DP: 2, CP: 3, MicroBatch: 1}, false},
		{"explicit split", Config{TP: 8, PP: 4, DP: 2, MicroBatch: 1, FirstStageLayers: 17, LastStageLayers: 15}, true},
		{"split over the layers", Config{TP: 8, PP: 4, DP: 2, MicroBatch: 1, FirstStageLayers: 50, LastStageLayers: 40}, false},
		{"batch not divisible", Config{TP: 8, PP: 1, DP: 3, MicroBatch: 1}, false},
		{"zero micro-batch", Config{TP: 8, PP: 1, DP: 8, MicroBatch: 0}, false},
		{"more stages than layers", Config{TP: 1, PP: 81, DP: 1, MicroBatch: 1}, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.c.Validate(j)
			if (err == nil) != tt.ok {
				t.Errorf("Validate() = %v, want ok=%v", err, tt.ok)
			}
		})
	}
}

// Uneven pipeline splits: Megatron's embedding/loss accounting and
// explicit first/last stage layer counts; the remaining stages share the
// rest, the fullest setting the pace.
func TestStageLayersUneven(t *testing.T) {
	j := testJob(t, "llama3-70b", "H100", 64, Megatron) // 80 layers
	for _, tt := range []struct {
		name string
		c    Config
		want stageLayout
	}{
		{"even", Config{PP: 4}, stageLayout{first: 20, last: 20, middle: 20, most: 20}},
		{"embedding and loss as layers", Config{PP: 6, EmbeddingInSplit: true, LossInSplit: true},
			stageLayout{first: 13, last: 13, middle: 14, most: 14}}, // 82 units / 6 → 14 each
		{"loss only", Config{PP: 3, LossInSplit: true}, stageLayout{first: 27, last: 26, middle: 27, most: 27}},
		{"explicit first and last", Config{PP: 4, FirstStageLayers: 18, LastStageLayers: 16},
			stageLayout{first: 18, last: 16, middle: 23, most: 23}},
		{"explicit first only", Config{PP: 4, FirstStageLayers: 11}, stageLayout{first: 11, last: 23, middle: 23, most: 23}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := tt.c
			c.TP, c.DP, c.MicroBatch = 1, 1, 1
			if got := stageLayers(j, c); got != tt.want {
				t.Errorf("stageLayers = %+v, want %+v", got, tt.want)
			}
		})
	}
}

// Context parallelism divides a layer's per-GPU work and activations by
// cp and adds only the K/V exchange the attention core does not hide.
func TestContextParallel(t *testing.T) {
	j := testJob(t, "llama3-70b", "H100", 64, Megatron)
	j.Seq = 32768
	base := Config{TP: 8, PP: 1, DP: 1, MicroBatch: 1, Recompute: RecomputeSelective, SP: true}
	withCP := base
	withCP.CP = 4
	a, b := costOfLayer(j, base), costOfLayer(j, withCP)
	if r := a.fwdCompute / b.fwdCompute; math.Abs(r-4) > 1e-9 {
		t.Errorf("compute ratio %.3f, want 4", r)
	}
	if b.cpFwd < 0 || b.cpFwd > b.fwdCompute {
		t.Errorf("exposed K/V exchange %.3g s of a %.3g s layer", b.cpFwd, b.fwdCompute)
	}
	ma := ActivationBytesPerLayer(j.Model, 1, j.localSeq(base), 8, true, false, true, RecomputeSelective)
	mb := ActivationBytesPerLayer(j.Model, 1, j.localSeq(withCP), 8, true, false, true, RecomputeSelective)
	if r := ma / mb; math.Abs(r-4) > 0.01 {
		t.Errorf("activation ratio %.3f, want 4", r)
	}
	if got := withCP.GPUs(); got != 32 {
		t.Errorf("GPUs() = %d, want 32", got)
	}
}

// All-gather context parallelism (--cp-comm-type all_gather) exposes the
// gather of the other chunks' K and V in the forward pass and the gather
// plus the gradients' reduce-scatter in the backward, by hand; the ring
// hides its exchange behind the attention core.
func TestContextParallelAllGather(t *testing.T) {
	j := testJob(t, "llama3-405b", "H100", 16384, Megatron)
	j.Seq = 131072
	c := Config{TP: 8, PP: 16, DP: 8, CP: 16, MicroBatch: 1, SP: true}
	ring := costOfLayer(j, c)
	j.CPAllGather = true
	ag := costOfLayer(j, c)
	bw, lat := cpBandwidth(j, c)
	chunk := float64(131072/16) * 2 * 1 * 128 * 2 // tokens · (K, V) · one kv head per GPU · head dim · 2 bytes
	want := 15.0/16*chunk*16/bw + lat
	if math.Abs(ag.cpFwd-want) > 1e-12 || math.Abs(ag.cpBwd-2*want) > 1e-12 {
		t.Errorf("all-gather cp fwd %.4g bwd %.4g, want %.4g and %.4g", ag.cpFwd, ag.cpBwd, want, 2*want)
	}
	if ring.cpFwd != 0 || ag.cpFwd <= ring.cpFwd {
		t.Errorf("ring exposes %.3g s (want 0: hidden behind the attention core), all-gather %.3g s", ring.cpFwd, ag.cpFwd)
	}
}
