package planner

import (
	"fmt"
	"math"
	"sort"
)

// Hardware behaviour the planner takes as known rather than fitted.
const (
	// nvlinkEfficiency is the NCCL bus bandwidth over NVLink as a fraction
	// of one direction's bandwidth (nccl-tests all_reduce on DGX A100
	// ≈ 235 of 300 GB/s, DGX H100 ≈ 360 of 450 GB/s).
	nvlinkEfficiency = 0.8
	// hbmEfficiency is the fraction of HBM bandwidth streaming elementwise
	// kernels reach.
	hbmEfficiency = 0.8
	// Per-collective latencies.
	nvlinkLatency = 10e-6
	netLatency    = 25e-6
	// fusedAttentionEfficiency is a fused attention kernel's throughput
	// relative to the stack's matmuls: FlashAttention-2 reaches about 0.9
	// of cuBLAS on A100 and about 0.5 on H100, FlashAttention-3 and cuDNN
	// about 0.9 on H100 (Dao 2023; Shah et al. 2024).
	fusedAttentionEfficiency = 0.7
	// optimizerBytesPerParam: an fp32 Adam update reads master weight,
	// gradient, m and v and writes master, m, v and the 16-bit weight.
	optimizerBytesPerParam = 30
)

// TimeBreakdown is where one step's time goes, in seconds, along the
// critical path. The parts add up to the step time.
type TimeBreakdown struct {
	// Compute: tensor-core work (matmuls and attention), recomputation
	// included.
	Compute float64 `json:"compute_s"`
	// MemoryBound: elementwise kernels limited by HBM bandwidth (norms,
	// activations, softmax, dropout, residual adds, loss).
	MemoryBound float64 `json:"memory_bound_s"`
	// TPComm: tensor-parallel all-reduces / all-gathers / reduce-scatters.
	TPComm float64 `json:"tp_comm_s"`
	// PPComm: pipeline point-to-point sends.
	PPComm float64 `json:"pp_comm_s"`
	// Bubble: pipeline fill and drain.
	Bubble float64 `json:"bubble_s"`
	// EPComm: expert-parallel all-to-all (MoE dispatch and combine).
	EPComm float64 `json:"ep_comm_s,omitempty"`
	// MoEHost: the host's issue time of the MoE layers' kernels that the
	// GPU waits for, dropless routing synchronising the two every layer
	// (moeHostOps).
	MoEHost float64 `json:"moe_host_s,omitempty"`
	// DPComm: data-parallel communication not hidden behind compute.
	DPComm float64 `json:"dp_comm_s"`
	// Optimizer: the optimizer step and gradient bookkeeping.
	Optimizer float64 `json:"optimizer_s"`
}

// Total is the sum of the parts.
func (t TimeBreakdown) Total() float64 {
	return t.Compute + t.MemoryBound + t.TPComm + t.EPComm + t.MoEHost + t.PPComm + t.Bubble + t.DPComm + t.Optimizer
}

// Bottleneck names the largest part other than compute when it takes at
// least a tenth of the step, else "compute".
func (t TimeBreakdown) Bottleneck() string {
	parts := []struct {
		name string
		v    float64
	}{
		{"memory-bound kernels", t.MemoryBound},
		{"tensor-parallel communication", t.TPComm},
		{"expert-parallel all-to-all", t.EPComm},
		{"host-bound MoE dispatch", t.MoEHost},
		{"pipeline communication", t.PPComm},
		{"pipeline bubble", t.Bubble},
		{"data-parallel communication", t.DPComm},
		{"optimizer step", t.Optimizer},
	}
	sort.SliceStable(parts, func(i, k int) bool { return parts[i].v > parts[k].v })
	if parts[0].v >= 0.1*t.Total() {
		return parts[0].name
	}
	return "compute"
}

// Estimate is the planner's prediction for one layout.
type Estimate struct {
	Config Config          `json:"config"`
	Memory MemoryBreakdown `json:"memory"`
	// UsableBytes is what the GPU offers after headroom; Fits is
	// Memory.TotalBytes ≤ UsableBytes.
	UsableBytes int64         `json:"usable_bytes"`
	Fits        bool          `json:"fits"`
	Time        TimeBreakdown `json:"time"`
	StepSeconds float64       `json:"step_s"`
	// MicroBatches is the number of micro-batches per pipeline per step.
	MicroBatches       int     `json:"micro_batches"`
	TokensPerSecPerGPU float64 `json:"tokens_per_s_per_gpu"`
	ModelFLOPs         float64 `json:"model_flops"`
	HardwareFLOPs      float64 `json:"hardware_flops"`
	MFU                float64 `json:"mfu"`
	HFU                float64 `json:"hfu"`
	// BubbleFraction is the bubble's share of the pipeline time.
	BubbleFraction float64 `json:"bubble_fraction"`
	Bottleneck     string  `json:"bottleneck"`
	// Stack names the stack and its fitted efficiencies.
	Stack string `json:"stack"`
}

// matmulPeak is the dense tensor-core peak for the job's precision.
func matmulPeak(j Job) float64 {
	if j.Precision == FP8 && j.Cluster.GPU.FP8FLOPS > 0 {
		return j.Cluster.GPU.FP8FLOPS
	}
	return j.Cluster.GPU.BF16FLOPS
}

// ringAllReduce is the time of a ring all-reduce of size bytes over n
// ranks at bus bandwidth bw (Thakur et al. 2005; nccl-tests' busbw).
func ringAllReduce(bytes float64, n int, bw, latency float64) float64 {
	if n <= 1 {
		return 0
	}
	return 2*float64(n-1)/float64(n)*bytes/bw + latency
}

// ringGather is an all-gather or reduce-scatter of a size-bytes buffer.
func ringGather(bytes float64, n int, bw, latency float64) float64 {
	if n <= 1 {
		return 0
	}
	return float64(n-1)/float64(n)*bytes/bw + latency
}

// tpBandwidth is the bus bandwidth of a TP group of t.
func tpBandwidth(j Job, t int) (bw, lat float64) {
	nv := j.Cluster.GPU.NVLinkBytesPerSec / 2 * nvlinkEfficiency
	if t <= j.Cluster.domain() {
		return nv, nvlinkLatency
	}
	return math.Min(nv, float64(j.Cluster.domain())*j.Cluster.nicBytesPerSec()*j.Stack.NetworkEfficiency), netLatency
}

// dpBandwidth is the bus bandwidth of a data-parallel group: NVLink when the
// whole group sits in one NVLink domain, otherwise the NICs of the group's
// members in one domain (ranks are ordered TP, then DP, then PP).
func dpBandwidth(j Job, c Config) (bw, lat float64) {
	c.DP = c.dpGroup()
	dom := j.Cluster.domain()
	nv := j.Cluster.GPU.NVLinkBytesPerSec / 2 * nvlinkEfficiency
	k := 1
	if c.TP < dom {
		k = dom / c.TP
	}
	if c.TP*c.DP <= dom {
		return nv, nvlinkLatency
	}
	if k > c.DP {
		k = c.DP
	}
	return math.Min(nv, float64(k)*j.Cluster.nicBytesPerSec()*j.Stack.NetworkEfficiency), netLatency
}

// expertDPBandwidth is the bus bandwidth of an expert-data-parallel group:
// the dp·cp/ep ranks holding the same experts, one in every ep
// consecutive data-parallel ranks (ranks ordered TP, CP, EP within DP,
// PP, as Megatron-Core orders them), so tp·cp·ep ranks apart. NVLink when
// the whole group sits in one domain, else the NICs of its members in one
// domain — one, when an EP group fills the domain.
func expertDPBandwidth(j Job, c Config) (bw, lat float64) {
	dom := j.Cluster.domain()
	stride := c.TP * c.cp() * c.ep()
	d := c.dpGroup() / c.ep()
	nv := j.Cluster.GPU.NVLinkBytesPerSec / 2 * nvlinkEfficiency
	if stride*d <= dom {
		return nv, nvlinkLatency
	}
	k := min(max(dom/stride, 1), d)
	return math.Min(nv, float64(k)*j.Cluster.nicBytesPerSec()*j.Stack.NetworkEfficiency), netLatency
}

// stageExpertParams is the routed-expert weights on one GPU of the first
// (or, with last, the last) pipeline stage: its layers' experts split by
// ep and TP.
func stageExpertParams(j Job, c Config, last bool) float64 {
	m := j.Model
	if !m.MoE() {
		return 0
	}
	perLayer := float64(m.RoutedExpertParams()) / float64(m.Layers) / float64(c.ep()) / float64(c.TP)
	if c.PP <= 1 {
		return perLayer * float64(m.Layers)
	}
	lay := stageLayers(j, c)
	if last {
		return perLayer * float64(lay.last)
	}
	return perLayer * float64(lay.first)
}

// ppBandwidth is the bandwidth of one pipeline send: NVLink when the whole
// job sits in one NVLink domain, else one GPU's NIC.
func ppBandwidth(j Job, c Config) (bw, lat float64) {
	if c.GPUs() <= j.Cluster.domain() {
		return j.Cluster.GPU.NVLinkBytesPerSec / 2 * nvlinkEfficiency, nvlinkLatency
	}
	return j.Cluster.nicBytesPerSec() * j.Stack.NetworkEfficiency, netLatency
}

// layerCost is one transformer layer's work for one micro-batch on one GPU.
type layerCost struct {
	fwdCompute float64 // seconds of tensor-core work, forward
	bwdCompute float64 // seconds of tensor-core work, backward (dgrad + wgrad)
	fwdMemory  float64 // seconds of elementwise kernels, forward
	bwdMemory  float64 // seconds of elementwise kernels, backward
	coreComp   float64 // forward attention-core tensor-core seconds
	coreMemory float64 // forward attention-core elementwise seconds
	tpPass     float64 // TP communication seconds of one forward pass
	// tpBwdExtra: under sequence parallelism the backward pass all-gathers
	// each column-parallel layer's input again to form its weight gradient
	// (Korthikanti et al. 2022, Sec. 4.2.2).
	tpBwdExtra float64
	// cpFwd, cpBwd: context-parallel K/V exchange not hidden behind the
	// attention core, forward and backward.
	cpFwd, cpBwd float64
	// fwdCast, bwdCast: FP8 casts (with transposes) of the forward GEMMs'
	// inputs and the backward's output gradients.
	fwdCast, bwdCast float64
	// epPass: expert-parallel all-to-all (dispatch and combine) of one
	// forward pass, averaged over the layers; the backward pass repeats it.
	epPass float64
	// hostFwd, hostBwd: host-bound MoE time of the forward and backward
	// pass, averaged over the layers (moeHostOps).
	hostFwd, hostBwd float64
}

// expertAllToAll is one all-to-all in which each GPU of an expert-parallel
// group sends bytes in all, bytes/ep to each member. The group is ep
// consecutive data-parallel ranks (ranks ordered TP, CP, DP): the members
// in the GPU's NVLink domain are reached over NVLink, the others over the
// GPU's NIC, both at once; the slower side sets the time. Not overlapped
// with compute (Megatron-LM's default; DeepSeek-V3's DualPipe overlap is
// not modelled).
func expertAllToAll(j Job, c Config, bytes float64) float64 {
	ep := c.ep()
	if ep <= 1 {
		return 0
	}
	per := bytes / float64(ep)
	inDomain := min(ep, max(j.Cluster.domain()/(c.TP*c.cp()), 1))
	nv := j.Cluster.GPU.NVLinkBytesPerSec / 2 * nvlinkEfficiency
	tm, lat := float64(inDomain-1)*per/nv, nvlinkLatency
	if remote := ep - inDomain; remote > 0 {
		tm = math.Max(tm, float64(remote)*per/(j.Cluster.nicBytesPerSec()*j.Stack.NetworkEfficiency))
		lat = netLatency
	}
	return tm + lat
}

// cpBandwidth is one ring send of a context-parallel group (ranks ordered
// TP, CP, DP, PP): NVLink when TP·CP fits in an NVLink domain, else one
// GPU's NIC.
func cpBandwidth(j Job, c Config) (bw, lat float64) {
	if c.TP*c.cp() <= j.Cluster.domain() {
		return j.Cluster.GPU.NVLinkBytesPerSec / 2 * nvlinkEfficiency, nvlinkLatency
	}
	return j.Cluster.nicBytesPerSec() * j.Stack.NetworkEfficiency, netLatency
}

func costOfLayer(j Job, c Config) layerCost {
	m := j.Model
	b, s, t := c.MicroBatch, j.Seq, c.TP
	tf := float64(t)
	peakMM := matmulPeak(j) * j.Stack.ComputeEfficiency
	peakAttn := j.Cluster.GPU.BF16FLOPS * j.Stack.ComputeEfficiency
	hbm := j.Cluster.GPU.HBMBytesPerSec * hbmEfficiency
	cp := float64(c.cp())
	// Context parallelism: each GPU holds s/cp of every sequence's tokens
	// and computes their attention against all s keys (load-balanced
	// causal chunks), so both matmul and attention work divide by cp.
	T := float64(b) * float64(s) / cp
	elem := 2.0
	if j.fp8() {
		elem = 1
	}
	proj := layerGEMMs(m, T, t)
	mmFwd, mmBwd := gemmsTime(proj, peakMM, hbm, elem)
	var castFwd, castBwd float64
	if j.fp8() {
		castFwd, castBwd = fp8CastTime(j, proj, hbm)
	}
	fr := j.moeFraction()
	if fr > 0 {
		// MoE layers replace the dense MLP (the last two projections) by
		// the router and experts; per-layer figures are the average over
		// dense and MoE layers.
		moe := moeGEMMs(m, T, t, c.ep(), j.expertTokensFactor())
		dF, dB := gemmsTime(proj[2:], peakMM, hbm, elem)
		eF, eB := gemmsTime(moe, peakMM, hbm, elem)
		mmFwd += fr * (eF - dF)
		mmBwd += fr * (eB - dB)
		if j.fp8() {
			dF, dB = fp8CastTime(j, proj[2:], hbm)
			eF, eB = fp8CastTime(j, moe[1:], hbm) // the router stays in 16 bits
			castFwd += fr * (eF - dF)
			castBwd += fr * (eB - dB)
		}
	}
	var attnFwd, attnBwd float64
	if j.flash() {
		// One fused kernel: no s×s scores in HBM, the masked half of
		// causal attention skipped, at its own fraction of the matmul rate.
		attnFwd = LayerForwardFLOPs(m, b, s).Attention / tf / cp / 2 / (peakAttn * fusedAttentionEfficiency)
		attnBwd = 2 * attnFwd
	} else {
		attnFwd, attnBwd = gemmsTime(attentionGEMMs(m, b, s, t, c.cp()), peakAttn, hbm, 2)
	}
	h := float64(m.Hidden)
	fwdB, bwdB, coreB := elementwiseBytes(j, c)
	lc := layerCost{
		fwdCompute: mmFwd + attnFwd,
		bwdCompute: mmBwd + attnBwd,
		fwdMemory:  T * fwdB / hbm,
		bwdMemory:  T * bwdB / hbm,
		fwdCast:    castFwd,
		bwdCast:    castBwd,
		coreComp:   attnFwd,
		coreMemory: T * coreB / hbm,
	}
	if c.cp() > 1 && j.CPAllGather {
		// All-gather K and V of the cp chunks before the attention core
		// (forward), and in the backward gather them again and
		// reduce-scatter their gradients; nothing hides them.
		bw, lat := cpBandwidth(j, c)
		kvHeads := math.Max(float64(m.KVHeads)/tf, 1)
		chunk := T * 2 * kvHeads * float64(m.HeadDim()) * 2
		gather := ringGather(chunk*cp, c.cp(), bw, lat)
		lc.cpFwd = gather
		lc.cpBwd = 2 * gather
	} else if c.cp() > 1 {
		// Ring attention: cp−1 steps each pass one chunk's K and V to the
		// next rank while the current chunk is computed (forward); the
		// backward pass sends K, V and their gradients. Only what the
		// attention core does not cover is exposed.
		bw, lat := cpBandwidth(j, c)
		kvHeads := math.Max(float64(m.KVHeads)/tf, 1)
		step := T * 2 * kvHeads * float64(m.HeadDim()) * 2
		ring := float64(c.cp()-1) * (step/bw + lat)
		lc.cpFwd = math.Max(0, ring-lc.coreComp)
		lc.cpBwd = math.Max(0, 2*ring-2*lc.coreComp)
	}
	if fr > 0 && j.CapacityFactor == 0 {
		fo, bo := moeHostOps(j, c)
		lc.hostFwd = fr * fo * j.Stack.MoEHostOpSeconds
		lc.hostBwd = fr * bo * j.Stack.MoEHostOpSeconds
	}
	if fr > 0 && c.ep() > 1 {
		// Dispatch and combine: each GPU sends its tokens' k copies (its
		// 1/t share under TP) to the experts' GPUs and receives them back.
		lc.epPass = fr * 2 * expertAllToAll(j, c, T*float64(m.ExpertsPerToken)*h*2/tf)
	}
	if t > 1 {
		bw, lat := tpBandwidth(j, t)
		v := T * h * 2
		if c.SP {
			lc.tpPass = 2 * (2*ringGather(v, t, bw, 0) + 2*lat)
			lc.tpBwdExtra = 2 * ringGather(v, t, bw, lat)
		} else {
			lc.tpPass = 2 * ringAllReduce(v, t, bw, lat)
		}
		if j.TPCommOverlap && c.SP {
			lc.tpPass = math.Max(lc.tpPass/tf, lc.tpPass-mmFwd)
			lc.tpBwdExtra = math.Max(lc.tpBwdExtra/tf, lc.tpBwdExtra-(mmBwd-mmFwd))
		}
	}
	return lc
}

// layerTimes is one layer's forward, backward and recompute seconds for one
// micro-batch, split into compute, memory-bound, TP (and CP) and EP
// communication.
func (lc layerCost) times(r Recompute) (comp, mem, tp, ep float64) {
	comp = lc.fwdCompute + lc.bwdCompute
	mem = lc.fwdMemory + lc.bwdMemory + lc.fwdCast + lc.bwdCast
	tp = 2*lc.tpPass + lc.tpBwdExtra + lc.cpFwd + lc.cpBwd
	ep = 2 * lc.epPass
	switch r {
	case RecomputeFull:
		comp += lc.fwdCompute
		mem += lc.fwdMemory + lc.fwdCast
		tp += lc.tpPass + lc.cpFwd
		ep += lc.epPass
	case RecomputeSelective:
		comp += lc.coreComp
		mem += lc.coreMemory
	}
	return comp, mem, tp, ep
}

// host is the host-bound MoE seconds of one layer for one micro-batch,
// forward, backward and what recomputation re-runs (full recomputation
// repeats the forward, dispatch and all).
func (lc layerCost) host(r Recompute) float64 {
	h := lc.hostFwd + lc.hostBwd
	if r == RecomputeFull {
		h += lc.hostFwd
	}
	return h
}

// logitsCost is the output layer and loss for one micro-batch on one GPU:
// forward and backward.
func logitsCost(j Job, c Config) (comp, mem, tp float64) {
	m := j.Model
	tf := float64(c.TP)
	T := float64(c.MicroBatch) * float64(j.localSeq(c))
	f, b := gemmsTime([]gemm{{T, float64(m.Vocab) / tf, float64(m.Hidden), 1}},
		j.Cluster.GPU.BF16FLOPS*j.Stack.ComputeEfficiency, j.Cluster.GPU.HBMBytesPerSec*hbmEfficiency, 2) // BF16 under FP8 too
	comp = f + b
	// Cross-entropy over the vocabulary shard: read the 16-bit logits,
	// write fp32 softmax, read it back and write 16-bit gradients.
	mem = T * float64(m.Vocab) / tf * (2 + 4 + 4 + 2) / (j.Cluster.GPU.HBMBytesPerSec * hbmEfficiency)
	if c.TP > 1 {
		bw, lat := tpBandwidth(j, c.TP)
		tp = ringAllReduce(T*float64(m.Hidden)*2, c.TP, bw, lat)
	}
	return comp, mem, tp
}

// logitsInLayers is the output layer's time in units of one layer's time,
// used to balance pipeline stages.
func logitsInLayers(j Job, c Config) float64 {
	if c.MicroBatch <= 0 || c.TP <= 0 {
		return 0
	}
	lc, lm, lt := logitsCost(j, c)
	layer := costOfLayer(j, c)
	cc, cm, ct, ce := layer.times(c.Recompute)
	ct += ce + layer.host(c.Recompute)
	if cc+cm+ct == 0 {
		return 0
	}
	return (lc + lm + lt) / (cc + cm + ct)
}

// stageParams is the parameters held by the first and last pipeline rank.
func stageParams(j Job, c Config) (first, last float64) {
	m := j.Model
	lay := stageLayers(j, c)
	tf := float64(c.TP)
	lp := layerParamsOnGPU(m, c) * tf
	if c.PP <= 1 {
		p := (float64(m.Params()) - expertParamsOffGPU(m, c)) / tf
		return p, p
	}
	first = (float64(lay.first)*lp + float64(m.EmbeddingParams())) / tf
	last = (float64(lay.last)*lp + float64(m.OutputParams())) / tf
	if m.TiedEmbeddings {
		last += float64(m.Vocab) * float64(m.Hidden) / tf
	}
	return first, last
}

// Validate checks that a layout can run the job at all (shape, not
// memory). The error says which constraint fails.
func (c Config) Validate(j Job) error {
	m := j.Model
	switch {
	case c.TP < 1 || c.PP < 1 || c.DP < 1 || c.MicroBatch < 1:
		return fmt.Errorf("tp, pp, dp and micro-batch must be at least 1 (got %s)", c)
	case m.Heads%c.TP != 0:
		return fmt.Errorf("tp=%d does not divide the %d attention heads", c.TP, m.Heads)
	case m.KVHeads%c.TP != 0 && c.TP%m.KVHeads != 0:
		return fmt.Errorf("tp=%d and the %d key/value heads do not divide one another", c.TP, m.KVHeads)
	case c.PP*c.vp() > m.Layers:
		return fmt.Errorf("pp×vp=%d exceeds the %d layers", c.PP*c.vp(), m.Layers)
	case c.CP < 0 || (c.cp() > 1 && j.Seq%c.cp() != 0):
		return fmt.Errorf("cp=%d does not divide the sequence of %d tokens", c.CP, j.Seq)
	case c.FirstStageLayers < 0 || c.LastStageLayers < 0 || c.FirstStageLayers+c.LastStageLayers > m.Layers:
		return fmt.Errorf("first (%d) and last (%d) stage layers must be non-negative and at most the %d layers together",
			c.FirstStageLayers, c.LastStageLayers, m.Layers)
	case c.ZeRO < 0 || c.ZeRO > 3:
		return fmt.Errorf("zero stage %d is not 0–3", c.ZeRO)
	case c.EP < 0:
		return fmt.Errorf("ep=%d must not be negative", c.EP)
	case c.ep() > 1 && !m.MoE():
		return fmt.Errorf("ep=%d needs a mixture-of-experts model; %s has no routed experts", c.EP, m.Name)
	case c.ep() > 1 && m.Experts%c.ep() != 0:
		return fmt.Errorf("ep=%d does not divide the %d routed experts", c.EP, m.Experts)
	case c.ep() > 1 && c.dpGroup()%c.ep() != 0:
		return fmt.Errorf("ep=%d does not divide dp×cp=%d (expert parallelism splits the experts over data-parallel ranks)", c.EP, c.dpGroup())
	case j.CapacityFactor < 0 || math.IsNaN(j.CapacityFactor) || math.IsInf(j.CapacityFactor, 0):
		return fmt.Errorf("capacity factor %v must be a finite number ≥ 0 (0: dropless)", j.CapacityFactor)
	}
	if j.GlobalBatch > 0 {
		if j.GlobalBatch%(c.MicroBatch*c.DP) != 0 {
			return fmt.Errorf("global batch %d is not a multiple of micro-batch×dp = %d", j.GlobalBatch, c.MicroBatch*c.DP)
		}
	}
	return nil
}

// Predict estimates memory and step time of one layout. It does not check
// Validate; callers that take layouts from users should.
func Predict(j Job, c Config) Estimate {
	if c.VP < 1 {
		c.VP = 1
	}
	e := Estimate{Config: c, Stack: j.Stack.String()}
	e.Memory = Memory(j, c)
	e.UsableBytes = UsableBytes(j.Cluster.GPU)
	e.Fits = e.Memory.TotalBytes <= e.UsableBytes
	n := j.microBatches(c)
	if n < 1 {
		n = 1
	}
	e.MicroBatches = n
	if c.ZeRO >= 3 && c.PP == 1 {
		e.Time = fsdpTime(j, c, n)
	} else {
		e.Time = pipelineTime(j, c, n)
	}
	e.StepSeconds = e.Time.Total()
	gpus := float64(c.GPUs())
	seqs := n * c.MicroBatch * c.DP
	e.TokensPerSecPerGPU = float64(seqs) * float64(j.Seq) / e.StepSeconds / gpus
	e.ModelFLOPs = ModelFLOPs(j.Model, j.Seq, seqs)
	e.HardwareFLOPs = HardwareFLOPs(j.Model, j.Seq, seqs, c.Recompute)
	peak := matmulPeak(j) * gpus * e.StepSeconds
	e.MFU = e.ModelFLOPs / peak
	e.HFU = e.HardwareFLOPs / peak
	if e.Time.Bubble > 0 {
		pipe := e.Time.Compute + e.Time.MemoryBound + e.Time.TPComm + e.Time.EPComm + e.Time.MoEHost + e.Time.PPComm + e.Time.Bubble
		e.BubbleFraction = e.Time.Bubble / pipe
	}
	e.Bottleneck = e.Time.Bottleneck()
	return e
}

// pipelineTime models Megatron-LM and DeepSpeed: 1F1B (optionally
// interleaved) over PP ranks, TP inside each layer, then the data-parallel
// gradient reduction and the optimizer step.
func pipelineTime(j Job, c Config, n int) TimeBreakdown {
	m := j.Model
	p, v := c.PP, c.vp()
	lc := costOfLayer(j, c)
	comp, mem, tp, ep := lc.times(c.Recompute)
	host := lc.host(c.Recompute)
	lgC, lgM, lgT := logitsCost(j, c)
	lay := stageLayers(j, c)

	// Pipeline sends: forward activation and backward gradient per chunk.
	var p2p float64
	if p > 1 {
		bw, lat := ppBandwidth(j, c)
		vol := float64(c.MicroBatch) * float64(j.localSeq(c)) * float64(m.Hidden) * 2
		if c.SP || (j.Stack.ScatterGatherP2P && c.TP > 1) {
			vol /= float64(c.TP)
		}
		p2p = 2 * float64(v) * (vol/bw + lat)
	}
	type stage struct{ comp, mem, tp, ep, host, p2p float64 }
	mk := func(layers int, logits bool) stage {
		l := float64(layers)
		s := stage{l * comp, l * mem, l * tp, l * ep, l * host, p2p}
		if logits {
			s.comp += lgC
			s.mem += lgM
			s.tp += lgT
		}
		return s
	}
	total := func(s stage) float64 { return s.comp + s.mem + s.tp + s.ep + s.host + s.p2p }
	var crit stage
	var others float64 // summed time of the ranks other than the critical one
	if p == 1 {
		crit = mk(m.Layers, true)
	} else {
		// First, p−2 identical middle ranks, last.
		kinds := []struct {
			s     stage
			count int
		}{{mk(lay.first, false), 1}, {mk(lay.middle, false), p - 2}, {mk(lay.last, true), 1}}
		ci := 0
		for i, k := range kinds {
			if k.count > 0 && total(k.s) > total(kinds[ci].s) {
				ci = i
			}
		}
		crit = kinds[ci].s
		for i, k := range kinds {
			c := float64(k.count)
			if i == ci {
				c--
			}
			others += c * total(k.s)
		}
	}
	nf := float64(n)
	var tb TimeBreakdown
	tb.Compute = nf * crit.comp
	tb.MemoryBound = nf * crit.mem
	tb.TPComm = nf * crit.tp
	tb.EPComm = nf * crit.ep
	tb.MoEHost = nf * crit.host
	tb.PPComm = nf * crit.p2p
	if p > 1 {
		// Fill and drain: each other rank's work once, divided by the
		// number of chunks per rank (Narayanan et al. 2021, eq. 1–2).
		tb.Bubble = others / float64(v)
	}

	// Data-parallel gradient reduction of the largest rank's parameters:
	// the routed experts' over the expert-data-parallel group, the rest
	// over the whole data-parallel group.
	pFirst, pLast := stageParams(j, c)
	params := math.Max(pFirst, pLast)
	experts := stageExpertParams(j, c, pLast > pFirst)
	// reduce is the gradient reduction of params over a group of d, and
	// under ZeRO ≥ 1 the all-gather of the updated 16-bit weights.
	reduce := func(params float64, d int, bw, lat float64) (grads, gather float64) {
		if d <= 1 || params <= 0 {
			return 0, 0
		}
		g := params * j.Stack.GradReduceBytes
		if c.ZeRO >= 1 {
			return ringGather(g, d, bw, lat), ringGather(params*2, d, bw, lat)
		}
		return ringAllReduce(g, d, bw, lat), 0
	}
	if d := c.dpGroup(); d > 1 {
		bw, lat := dpBandwidth(j, c)
		rs, ag := reduce(params-experts, d, bw, lat)
		ebw, elat := expertDPBandwidth(j, c)
		ers, eag := reduce(experts, d/c.ep(), ebw, elat)
		rs, ag = rs+ers, ag+eag
		dp := rs + ag
		switch {
		case j.overlapDP() && j.Stack.Kind == Megatron:
			// Buckets reduce during the last micro-batch's backward pass
			// and the updated weights are gathered during the next step's
			// first forward (Megatron-Core's overlap_grad_reduce and
			// overlap_param_gather); at least the last bucket of each is
			// exposed.
			dp = math.Max(rs-2.0/3.0*total(crit), 0.1*rs) + math.Max(ag-1.0/3.0*total(crit), 0.1*ag)
		case j.overlapDP():
			// Buckets reduce during the last micro-batch's backward pass;
			// at least the last bucket is exposed.
			dp = math.Max(dp-2.0/3.0*total(crit), 0.1*dp)
		}
		tb.DPComm = dp
	}
	if p > 1 && m.TiedEmbeddings {
		// First and last rank all-reduce the tied embedding's gradient.
		bw, lat := ppBandwidth(j, c)
		tb.DPComm += float64(m.Vocab) * float64(m.Hidden) / float64(c.TP) * j.Stack.GradReduceBytes / bw
		tb.DPComm += lat
	}
	tb.Optimizer = optimizerTime(j, c, params)
	return tb
}

// optimizerTime is the Adam step on the GPU's optimizer shard plus the
// gradient norm and zeroing over its local gradients.
func optimizerTime(j Job, c Config, params float64) float64 {
	shard := params
	if c.ZeRO >= 1 || c.ZeRO >= 3 {
		shard /= float64(c.dpGroup())
	}
	bytes := shard*optimizerBytesPerParam + params*j.Stack.MainGradBytes*2
	if c.ZeRO >= 3 {
		bytes = shard * (optimizerBytesPerParam + 8)
	}
	return bytes / (j.Cluster.GPU.HBMBytesPerSec * hbmEfficiency)
}

// fsdpTime models PyTorch FSDP FULL_SHARD: every micro-batch all-gathers
// each layer's parameters before its forward and again before its
// backward, and reduce-scatters its gradients after. The collectives are
// timed in series with the compute, not hidden behind it: FSDP issues
// them on their own stream, but its rate limiter holds the next gather
// until the current layer is done with its buffer, and NCCL's kernels take
// SMs and HBM bandwidth from the matmuls they overlap. The dev vectors
// show it: D10 (one micro-batch of 2, communication ≈ 40% of compute)
// reaches 40% MFU where D9 (micro-batch 8, communication ≈ 13%) sustains
// 57% HFU, and the overlapped model could only match both with a network
// efficiency of 0.23 that held for no other stack (leave-one-out 28% on
// D9 and 20% on D10, against 7% and 8% timed in series with one shared
// fit).
func fsdpTime(j Job, c Config, n int) TimeBreakdown {
	m := j.Model
	lc := costOfLayer(j, c)
	bw, lat := dpBandwidth(j, c)
	tf := float64(c.TP)
	lp := layerParamsOnGPU(m, c)
	d := c.dpGroup()
	ag := ringGather(lp*2, d, bw, lat)
	rs := ringGather(lp*j.Stack.GradReduceBytes, d, bw, lat)
	fwdC := lc.fwdCompute
	fwdM := lc.fwdMemory + lc.fwdCast
	bwdC := lc.bwdCompute
	bwdM := lc.bwdMemory + lc.bwdCast
	switch c.Recompute {
	case RecomputeFull:
		bwdC += lc.fwdCompute
		bwdM += lc.fwdMemory + lc.fwdCast
	case RecomputeSelective:
		bwdC += lc.coreComp
		bwdM += lc.coreMemory
	}
	exposed := 2*ag + rs
	lgC, lgM, lgT := logitsCost(j, c)
	embP := float64(m.EmbeddingParams()+m.OutputParams()) / tf
	embComm := ringGather(embP*2, d, bw, lat)*2 + ringGather(embP*j.Stack.GradReduceBytes, d, bw, lat)
	nf := float64(m.Layers) * float64(n)
	var tb TimeBreakdown
	tb.Compute = nf*(fwdC+bwdC) + float64(n)*lgC
	tb.MemoryBound = nf*(fwdM+bwdM) + float64(n)*lgM
	tpTime := 2*lc.tpPass + lc.tpBwdExtra + lc.cpFwd + lc.cpBwd
	epTime := 2 * lc.epPass
	if c.Recompute == RecomputeFull {
		tpTime += lc.tpPass + lc.cpFwd
		epTime += lc.epPass
	}
	tb.EPComm = nf * epTime
	tb.MoEHost = nf * lc.host(c.Recompute)
	tb.TPComm = nf*tpTime + float64(n)*lgT
	tb.DPComm = nf*exposed + float64(n)*embComm
	tb.Optimizer = optimizerTime(j, c, (float64(m.Params())-expertParamsOffGPU(m, c))/tf)
	return tb
}

// expertParamsOffGPU is the routed-expert weights of the whole model a
// GPU does not hold under expert parallelism, before the TP split.
func expertParamsOffGPU(m Model, c Config) float64 {
	return float64(m.RoutedExpertParams()) * (1 - 1/float64(c.ep()))
}

// layerParamsOnGPU is one layer's weights on one GPU, averaged over the
// layers: split by TP, the routed experts also by EP.
func layerParamsOnGPU(m Model, c Config) float64 {
	return (float64(m.LayerParams()) - expertParamsOffGPU(m, c)/float64(m.Layers)) / float64(c.TP)
}
