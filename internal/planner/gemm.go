package planner

import "math"

// The per-GEMM roofline. A transformer layer is a handful of matrix
// multiplications whose shapes follow from the model, the micro-batch and
// the layout (layerGEMMs); each is timed as the slower of its tensor-core
// work and its HBM traffic:
//
//	time = max(FLOPs / (peak · ComputeEfficiency · shapeEfficiency),
//	           bytes / (HBM bandwidth · hbmEfficiency))
//
// ComputeEfficiency, the one fitted compute number, is then the fraction
// of peak a large, tile-aligned GEMM sustains in the stack; everything
// that makes small or odd shapes slower is derived here, not fitted.

const (
	// gemmTile is the CTA tile edge cuBLAS and CUTLASS pick for large
	// 16-bit GEMMs on A100 and H100 (128×128, 128×256 and 256×128 tiles;
	// 128 is the granularity all three share). A GEMM is computed in whole
	// tiles, so an M or N of x costs ⌈x/128⌉·128: N = 64 runs at half the
	// rate, N = 1,000 at 98%.
	gemmTile = 128
	// gemmKOverhead is the fixed cost of one output tile in units of the
	// K loop: a 128×128 tile's main loop loads (128+128)·2 bytes per unit
	// of K, its epilogue writes the 32 KiB 16-bit tile and its prologue
	// fills a 3–4 stage pipeline before the first MMA, about 64 units of K
	// together. Efficiency along K is K/(K+64): 0.98 at K = 4096, 0.67 at
	// the K = 128 of a head-dimension GEMM.
	gemmKOverhead = 64
)

// gemm is batch independent products C[m×n] = A[m×k]·B[k×n].
type gemm struct{ m, n, k, batch float64 }

func (g gemm) flops() float64 { return 2 * g.m * g.n * g.k * g.batch }

// bytes is the HBM traffic of reading A and B with elements of in bytes
// and writing C once with elements of 2 (16-bit outputs, FP8 GEMMs'
// too).
func (g gemm) bytes(in float64) float64 {
	return (in*(g.m*g.k+g.k*g.n) + 2*g.m*g.n) * g.batch
}

// dgrad and wgrad are the backward GEMMs of C = A·B: dA = dC·Bᵀ
// (m×k from m×n by n×k) and dB = Aᵀ·dC (k×n from k×m by m×n).
func (g gemm) dgrad() gemm { return gemm{g.m, g.k, g.n, g.batch} }
func (g gemm) wgrad() gemm { return gemm{g.k, g.n, g.m, g.batch} }

// tileFraction is the useful fraction of the whole tiles covering x.
func tileFraction(x float64) float64 {
	if x <= 0 {
		return 1
	}
	return x / (math.Ceil(x/gemmTile) * gemmTile)
}

// shapeEfficiency is the fraction of a large aligned GEMM's rate a GEMM of
// this shape reaches: tile quantization in M and N, the per-tile overhead
// along K. Wave quantization (tiles not filling the last wave of SMs) is
// not modelled: the catalog has no SM counts, and at the planner's shapes
// (thousands of tokens by thousands of columns) there are many waves.
func (g gemm) shapeEfficiency() float64 {
	return tileFraction(g.m) * tileFraction(g.n) * g.k / (g.k + gemmKOverhead)
}

// roofline is the time of one GEMM at a tensor-core rate of peak FLOP/s
// (already scaled by the stack's efficiency) and an HBM rate of hbm
// bytes/s, with elem-byte inputs.
func (g gemm) roofline(peak, hbm, elem float64) float64 {
	if g.m <= 0 || g.n <= 0 || g.k <= 0 || g.batch <= 0 {
		return 0
	}
	return math.Max(g.flops()/(peak*g.shapeEfficiency()), g.bytes(elem)/hbm)
}

// layerGEMMs is the projections of one transformer layer for one
// micro-batch of tokens tokens on one GPU of a TP group of t: the fused
// QKV projection (query heads split by t; key/value heads split by t or,
// with fewer of them than t, one per GPU), the attention output projection,
// the MLP's first matrix (gate and up fused for SwiGLU, as Megatron's
// linear_fc1) and its second.
func layerGEMMs(m Model, tokens float64, t int) []gemm {
	tf := float64(t)
	h, q, f := float64(m.Hidden), float64(m.QHidden()), float64(m.FFN)
	kvPerGPU := math.Max(float64(m.KVHeads)/tf, 1) * float64(m.HeadDim())
	up := f / tf
	if m.MLP == MLPSwiGLU {
		up *= 2
	}
	return []gemm{
		{tokens, q/tf + 2*kvPerGPU, h, 1}, // QKV
		{tokens, h, q / tf, 1},            // attention output
		{tokens, up, h, 1},                // MLP up (and gate)
		{tokens, h, f / tf, 1},            // MLP down
	}
}

// attentionGEMMs is the unfused attention core on one GPU for b sequences
// whose s/cp local queries attend to all s keys: scores Q·Kᵀ and context
// softmax·V, batched over the GPU's heads.
func attentionGEMMs(m Model, b, s, t, cp int) []gemm {
	heads := float64(b) * float64(m.Heads) / float64(t)
	sq, sk, d := float64(s)/float64(cp), float64(s), float64(m.HeadDim())
	return []gemm{
		{sq, sk, d, heads}, // scores
		{sq, d, sk, heads}, // context
	}
}

// gemmsTime is the forward and backward (dgrad + wgrad) roofline time of a
// list of GEMMs.
func gemmsTime(gs []gemm, peak, hbm, elem float64) (fwd, bwd float64) {
	for _, g := range gs {
		fwd += g.roofline(peak, hbm, elem)
		bwd += g.dgrad().roofline(peak, hbm, elem) + g.wgrad().roofline(peak, hbm, elem)
	}
	return fwd, bwd
}

// moeGEMMs is a mixture-of-experts layer's MLP on one GPU of an
// expert-parallel group of ep (and a TP group of t, which splits each
// expert's FFN as it splits a dense MLP): the router (tokens × experts),
// the GPU's experts/ep routed experts as one grouped GEMM, each taking
// its share of the group's tokens·k assignments (times the capacity
// factor when padded to capacity), and the shared experts, which every
// token passes through.
func moeGEMMs(m Model, tokens float64, t, ep int, tokensFactor float64) []gemm {
	tf := float64(t)
	h, ef := float64(m.Hidden), float64(m.ExpertFFNWidth())/tf
	up := ef
	if m.MLP == MLPSwiGLU {
		up *= 2
	}
	e := float64(m.Experts)
	perExpert := tokens * float64(m.ExpertsPerToken) * float64(ep) / e * tokensFactor
	local := e / float64(ep)
	gs := []gemm{
		{tokens, e, h, 1},         // router
		{perExpert, up, h, local}, // routed experts' up (and gate)
		{perExpert, h, ef, local}, // routed experts' down
	}
	if s := float64(m.SharedExperts); s > 0 {
		gs = append(gs, gemm{tokens, s * up, h, 1}, gemm{tokens, h, s * ef, 1})
	}
	return gs
}
