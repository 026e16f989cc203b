package planner

import "testing"

// TestElementwiseTimeByHand derives each elementwise kernel's bytes per
// token from the kernel table's reads and writes and checks the layer's
// memory-bound seconds equal bytes / (HBM bandwidth · 0.8).
func TestElementwiseTimeByHand(t *testing.T) {
	t.Run("llama3-8b H100 TP2+SP flash", func(t *testing.T) {
		j := testJob(t, "llama3-8b", "H100", 64, Megatron)
		if !j.Model.RoPE {
			t.Fatal("llama3-8b should use RoPE")
		}
		on := true
		j.FlashAttention = &on
		c := Config{TP: 2, PP: 1, VP: 1, DP: 32, MicroBatch: 1, SP: true}
		h, q, kv, f := 4096.0, 4096.0, 1024.0, 14336.0
		// Per token, 16-bit elements: two norms (r x, w y | r x, r dy,
		// w dx) and two residual adds (2r+w | 2r+w) on h/2 under SP; RoPE
		// on q and k (r, w | r, w) split by TP; SwiGLU (r gate, r up, w |
		// r gate, r up, r dy, w dgate, w dup) on f/2.
		fwd := 2*(h/2)*2*2 + 2*(h/2)*3*2 + (q+kv)/2*2*2 + f/2*3*2
		bwd := 2*(h/2)*3*2 + 2*(h/2)*3*2 + (q+kv)/2*2*2 + f/2*5*2
		if fwd != 94208 || bwd != 131072 {
			t.Fatalf("hand arithmetic: fwd %v bwd %v", fwd, bwd)
		}
		hbm := 3.35e12 * 0.8
		T := 2048.0
		lc := costOfLayer(j, c)
		checkElementwise(t, lc, T*fwd/hbm, T*bwd/hbm)
		if lc.coreMemory != 0 {
			t.Errorf("fused attention has no elementwise core, got %.6g s", lc.coreMemory)
		}
	})
	t.Run("megatron-175b A100 TP8 unfused with dropout", func(t *testing.T) {
		j := testJob(t, "megatron-175b", "A100", 64, Megatron)
		if j.Model.RoPE || !j.dropout() {
			t.Fatal("GPT: learned positions, dropout")
		}
		off := false
		j.FlashAttention = &off
		c := Config{TP: 8, PP: 8, VP: 1, DP: 1, MicroBatch: 1}
		h, f, as := 12288.0, 49152.0, 96.0*2048
		// Norms and residual adds on all of h (no SP); the fused
		// bias-dropout-add writes a 1-byte mask (backward: r dy, r mask,
		// w dx); GeLU (r, w | r x, r dy, w dx) on f/8; softmax (r, w | r y,
		// r dy, w dx) and attention dropout (r, w, mask | r dy, r mask,
		// w dx) on a·s/8.
		core := as / 8 * (2*2 + (2*2 + 1))
		fwd := 2*h*4 + 2*h*6 + 2*h*1 + f/8*4 + core
		bwd := 2*h*6 + 2*h*6 + 2*h*5 + f/8*6 + as/8*(6+5)
		hbm := 2.0e12 * 0.8
		T := 2048.0
		lc := costOfLayer(j, c)
		checkElementwise(t, lc, T*fwd/hbm, T*bwd/hbm)
		if want := T * core / hbm; !near(lc.coreMemory, want, 1e-12) {
			t.Errorf("core elementwise = %.6g s, want %.6g", lc.coreMemory, want)
		}
		// Selective recomputation re-runs the core's forward kernels, full
		// the whole forward.
		_, none, _, _ := lc.times(RecomputeNone)
		_, sel, _, _ := lc.times(RecomputeSelective)
		_, full, _, _ := lc.times(RecomputeFull)
		if !near(sel-none, lc.coreMemory, 1e-12) || !near(full-none, lc.fwdMemory+lc.fwdCast, 1e-12) {
			t.Errorf("recompute adds %.6g (selective), %.6g (full)", sel-none, full-none)
		}
	})
}

// checkElementwise compares a layer's forward and backward elementwise
// seconds with the hand-computed ones.
func checkElementwise(t *testing.T, lc layerCost, fwd, bwd float64) {
	t.Helper()
	if !near(lc.fwdMemory, fwd, 1e-12) {
		t.Errorf("forward elementwise = %.6g s, want %.6g", lc.fwdMemory, fwd)
	}
	if !near(lc.bwdMemory, bwd, 1e-12) {
		t.Errorf("backward elementwise = %.6g s, want %.6g", lc.bwdMemory, bwd)
	}
}
