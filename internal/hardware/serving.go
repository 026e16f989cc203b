package hardware

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// Config is one engine replica: a model served on TP GPUs of one kind with
// vLLM's scheduler limits. The zero values of the optional fields take
// vLLM's defaults (see WithDefaults). Its Capacity is gangway's one answer
// to "does model M fit on N×GPU, with how many KV-cache tokens": the
// planner's `plan serve`, the engine simulator and the gateway all ask it.
type Config struct {
	Model Model
	GPU   GPU
	TP    int       // tensor-parallel size (GPUs per replica)
	Quant Precision // weight quantization; "" means bf16

	GPUMemoryUtilization float64 // fraction of device memory vLLM may use; default 0.9
	BlockSize            int     // tokens per KV block; default 16
	MaxNumSeqs           int     // sequences per step; default 256
	MaxNumBatchedTokens  int     // token budget per step (chunked prefill); default 8192
	MaxModelLen          int     // longest prompt+output; default the model's
	DisablePrefixCaching bool    // vLLM's --no-enable-prefix-caching
	KVCacheFP8           bool    // --kv-cache-dtype fp8 (1 byte per element instead of 2)
	NumGPUBlocksOverride int     // vLLM's --num-gpu-blocks-override: fixes the KV block count (tests)

	Efficiency Efficiency // fitted constants of the roofline; zero fields take defaults
}

// Efficiency holds the named, fitted constants of the step-time model:
// what fraction of each peak a real engine reaches and what it pays per
// step regardless of work.
type Efficiency struct {
	Compute          float64       // fraction of peak matmul FLOP/s reached in prefill; default 0.65
	Memory           float64       // fraction of HBM bandwidth reached in decode; default 0.8
	Network          float64       // fraction of NVLink bandwidth an all-reduce reaches; default 0.8
	AllReduceLatency time.Duration // fixed cost of one all-reduce; default 8µs
	StepOverhead     time.Duration // scheduling, sampling, kernel launch per step; default 2ms
	PerSeqOverhead   time.Duration // per sequence in the batch (input prep, detokenize); default 10µs
	NonTorchBytes    int64         // CUDA context, cuBLAS workspace per GPU; default 0.9 GiB
	CommBufferBytes  int64         // NCCL and custom all-reduce buffers per GPU when TP>1; default 1 GiB
}

// Defaults of a Config's optional fields (vLLM's, where vLLM has one).
const (
	// DefaultMemoryUtilization is vLLM's gpu_memory_utilization default.
	DefaultMemoryUtilization = 0.9
	// DefaultMaxModelLen is the context served when neither the Config nor
	// the model's MaxContext says.
	DefaultMaxModelLen = 8192
)

// DefaultEfficiency is used for every zero field of Config.Efficiency.
var DefaultEfficiency = Efficiency{
	Compute:          0.65,
	Memory:           0.8,
	Network:          0.8,
	AllReduceLatency: 8 * time.Microsecond,
	StepOverhead:     2 * time.Millisecond,
	PerSeqOverhead:   10 * time.Microsecond,
	NonTorchBytes:    9 * gib / 10,
	CommBufferBytes:  1 * gib,
}

// NewConfig builds a Config from names, with vLLM defaults for the rest.
func NewConfig(model, gpu string, tp int, quant string) (Config, error) {
	m, err := LookupModel(model)
	if err != nil {
		return Config{}, err
	}
	g, err := LookupGPU(gpu)
	if err != nil {
		return Config{}, err
	}
	q, err := ParseQuant(quant)
	if err != nil {
		return Config{}, err
	}
	c := Config{Model: m, GPU: g, TP: tp, Quant: q}.WithDefaults()
	return c, c.Validate()
}

// WithDefaults returns c with zero fields set to vLLM's defaults.
func (c Config) WithDefaults() Config {
	if c.Quant == "" {
		c.Quant = BF16
	}
	if c.TP == 0 {
		c.TP = 1
	}
	if c.GPUMemoryUtilization == 0 {
		c.GPUMemoryUtilization = DefaultMemoryUtilization
	}
	if c.BlockSize == 0 {
		c.BlockSize = 16
	}
	if c.MaxNumSeqs == 0 {
		c.MaxNumSeqs = 256
	}
	if c.MaxNumBatchedTokens == 0 {
		c.MaxNumBatchedTokens = 8192
	}
	if c.MaxModelLen == 0 {
		c.MaxModelLen = c.Model.MaxContext
	}
	if c.MaxModelLen == 0 {
		c.MaxModelLen = DefaultMaxModelLen
	}
	e, d := &c.Efficiency, DefaultEfficiency
	if e.Compute == 0 {
		e.Compute = d.Compute
	}
	if e.Memory == 0 {
		e.Memory = d.Memory
	}
	if e.Network == 0 {
		e.Network = d.Network
	}
	if e.AllReduceLatency == 0 {
		e.AllReduceLatency = d.AllReduceLatency
	}
	if e.StepOverhead == 0 {
		e.StepOverhead = d.StepOverhead
	}
	if e.PerSeqOverhead == 0 {
		e.PerSeqOverhead = d.PerSeqOverhead
	}
	if e.NonTorchBytes == 0 {
		e.NonTorchBytes = d.NonTorchBytes
	}
	if e.CommBufferBytes == 0 {
		e.CommBufferBytes = d.CommBufferBytes
	}
	return c
}

// Validate reports the first invalid field, by name. Call it on a config
// that has been through WithDefaults.
func (c Config) Validate() error {
	var errs []error
	if c.Model.Layers <= 0 || c.Model.Hidden <= 0 || c.Model.Heads <= 0 || c.Model.KVHeads <= 0 || c.Model.HeadDim() <= 0 || c.Model.FFN <= 0 || c.Model.Vocab <= 0 {
		errs = append(errs, fmt.Errorf("model %q: layers, hidden, heads, kv_heads, head_dim, ffn and vocab must all be positive", c.Model.Name))
	}
	if c.GPU.MemoryBytes <= 0 || c.GPU.BF16FLOPS <= 0 || c.GPU.HBMBytesPerSec <= 0 {
		errs = append(errs, fmt.Errorf("gpu %q: memory, bf16 FLOP/s and HBM bandwidth must be positive", c.GPU.Name))
	}
	if c.TP < 1 {
		errs = append(errs, fmt.Errorf("tp: %d, want at least 1", c.TP))
	} else if c.Model.Heads > 0 && c.Model.Heads%c.TP != 0 {
		errs = append(errs, fmt.Errorf("tp: %d does not divide the %d attention heads of %s", c.TP, c.Model.Heads, c.Model.Name))
	} else if c.TP > 1 && c.GPU.NVLinkBytesPerSec <= 0 {
		errs = append(errs, fmt.Errorf("tp: %d needs NVLink bandwidth for gpu %q", c.TP, c.GPU.Name))
	}
	if _, err := ParseQuant(string(c.Quant)); err != nil {
		errs = append(errs, fmt.Errorf("quant: %w", err))
	}
	if c.GPUMemoryUtilization <= 0 || c.GPUMemoryUtilization > 1 {
		errs = append(errs, fmt.Errorf("gpu_memory_utilization: %v, want in (0, 1]", c.GPUMemoryUtilization))
	}
	if c.BlockSize <= 0 || c.BlockSize&(c.BlockSize-1) != 0 {
		errs = append(errs, fmt.Errorf("block_size: %d, want a positive power of two", c.BlockSize))
	}
	if c.MaxNumSeqs < 1 {
		errs = append(errs, fmt.Errorf("max_num_seqs: %d, want at least 1", c.MaxNumSeqs))
	}
	if c.MaxNumBatchedTokens < 1 {
		errs = append(errs, fmt.Errorf("max_num_batched_tokens: %d, want at least 1", c.MaxNumBatchedTokens))
	}
	if c.MaxModelLen < 2 {
		errs = append(errs, fmt.Errorf("max_model_len: %d, want at least 2", c.MaxModelLen))
	}
	e := c.Efficiency
	for _, f := range []struct {
		name string
		v    float64
	}{{"efficiency.compute", e.Compute}, {"efficiency.memory", e.Memory}, {"efficiency.network", e.Network}} {
		if f.v <= 0 || f.v > 1 {
			errs = append(errs, fmt.Errorf("%s: %v, want in (0, 1]", f.name, f.v))
		}
	}
	return errors.Join(errs...)
}

// Capacity is where a replica's memory goes, per GPU, and what is left
// for the KV cache.
type Capacity struct {
	UsableBytesPerGPU     int64 // GPU.AllocatableBytes × utilization
	WeightBytesPerGPU     int64
	ActivationBytesPerGPU int64 // peak of the profiling forward pass and sampler
	OverheadBytesPerGPU   int64 // non-torch memory and communication buffers
	KVBytesPerGPU         int64
	KVBytesPerToken       int64 // per GPU
	KVBlocks              int   // blocks of BlockSize tokens
	KVTokens              int64 // KVBlocks × BlockSize

	// Fits is false when the KV cache cannot hold one request of
	// MaxModelLen tokens (vLLM refuses to start); Reason says why.
	Fits   bool
	Reason string
}

// KVHeadsPerGPU is the number of KV heads each GPU stores: KV heads are
// split across TP ranks and replicated once TP exceeds them.
func (c Config) KVHeadsPerGPU() int {
	return max(1, c.Model.KVHeads/c.TP)
}

// KVBytesPerToken is the KV-cache footprint of one token on one GPU.
func (c Config) KVBytesPerToken() int64 {
	elem := int64(2)
	if c.KVCacheFP8 {
		elem = 1
	}
	return 2 * int64(c.Model.Layers) * int64(c.KVHeadsPerGPU()) * int64(c.Model.HeadDim()) * elem
}

// WeightBytesPerGPU is the weights one GPU holds: WeightsBytes split
// evenly over the TP group.
func (c Config) WeightBytesPerGPU() int64 {
	return WeightsBytes(c.Model, c.Quant) / int64(c.TP)
}

// Capacity computes the memory plan the way vLLM's profiler does: usable
// memory minus weights, the activation peak of a max_num_batched_tokens
// forward pass plus the sampler, and non-torch allocations.
func (c Config) Capacity() Capacity {
	m := c.Model
	var cp Capacity
	cp.UsableBytesPerGPU = int64(float64(c.GPU.AllocatableBytes()) * c.GPUMemoryUtilization)
	cp.WeightBytesPerGPU = c.WeightBytesPerGPU()
	tp := int64(c.TP)
	perToken := 4*int64(m.Hidden) + 3*int64(m.FFN)/tp + int64((m.Heads+2*m.KVHeads)*m.HeadDim())/tp
	act := int64(c.MaxNumBatchedTokens) * perToken * 2
	sampler := int64(c.MaxNumSeqs) * int64(m.Vocab) * 4 * 3 // fp32 logits, probs, sort buffer
	cp.ActivationBytesPerGPU = act + sampler
	cp.OverheadBytesPerGPU = c.Efficiency.NonTorchBytes
	if c.TP > 1 {
		cp.OverheadBytesPerGPU += c.Efficiency.CommBufferBytes
	}
	cp.KVBytesPerGPU = cp.UsableBytesPerGPU - cp.WeightBytesPerGPU - cp.ActivationBytesPerGPU - cp.OverheadBytesPerGPU
	cp.KVBytesPerToken = c.KVBytesPerToken()
	if cp.KVBytesPerGPU > 0 {
		cp.KVBlocks = int(cp.KVBytesPerGPU / (cp.KVBytesPerToken * int64(c.BlockSize)))
	}
	if c.NumGPUBlocksOverride > 0 {
		cp.KVBlocks = c.NumGPUBlocksOverride
		cp.KVBytesPerGPU = int64(cp.KVBlocks) * cp.KVBytesPerToken * int64(c.BlockSize)
	}
	cp.KVTokens = int64(cp.KVBlocks) * int64(c.BlockSize)
	switch {
	case cp.KVBytesPerGPU <= 0:
		cp.Reason = fmt.Sprintf("weights need %.1f GiB per GPU and %.1f GiB is usable: no room for the KV cache at tp=%d",
			float64(cp.WeightBytesPerGPU)/gib, float64(cp.UsableBytesPerGPU)/gib, c.TP)
	case cp.KVTokens < int64(c.MaxModelLen):
		cp.Reason = fmt.Sprintf("KV cache holds %d tokens, fewer than max_model_len %d", cp.KVTokens, c.MaxModelLen)
	default:
		cp.Fits = true
	}
	return cp
}

// TPDegrees lists the tensor-parallel sizes a model can be served with
// inside an NVLink domain of domain GPUs (8 when domain is 0): the
// powers of two that divide its attention heads.
func TPDegrees(m Model, domain int) []int {
	if domain <= 0 {
		domain = 8
	}
	var out []int
	for tp := 1; tp <= domain; tp *= 2 {
		if m.Heads%tp == 0 {
			out = append(out, tp)
		}
	}
	return out
}

// MinTP returns the smallest of TPDegrees(c.Model, c.GPU.NVLinkDomain)
// at which c.Model fits on c.GPU, and that configuration's capacity. ok
// is false when even the largest is not enough; tp and cp are then the
// largest's.
func MinTP(c Config) (tp int, cp Capacity, ok bool) {
	for _, tp = range TPDegrees(c.Model, c.GPU.NVLinkDomain) {
		d := c
		d.TP = tp
		cp = d.WithDefaults().Capacity()
		if cp.Fits {
			return tp, cp, true
		}
	}
	return tp, cp, false
}

// StepShape summarises the work of one engine step.
type StepShape struct {
	Tokens       int     // tokens computed this step (prefill chunks + one per decode)
	Seqs         int     // sequences in the batch
	LogitSeqs    int     // sequences that sample a token this step
	AttnPairs    float64 // Σ over computed tokens of the positions each attends to
	KVReadTokens int64   // Σ over sequences of the KV tokens attention reads
}

// Add appends one sequence's share: n new tokens on top of ctx cached
// ones; sample is whether it yields a token this step.
func (s *StepShape) Add(ctx, n int, sample bool) {
	s.Tokens += n
	s.Seqs++
	if sample {
		s.LogitSeqs++
	}
	s.AttnPairs += float64(n)*float64(ctx) + float64(n)*float64(n+1)/2
	s.KVReadTokens += int64(ctx + n)
}

// StepTime is the roofline estimate of one step: the larger of its
// compute time and its HBM time, both per GPU, plus 2 all-reduces per
// layer across the TP group and the fixed per-step and per-sequence costs.
func (c Config) StepTime(s StepShape) time.Duration {
	if s.Tokens == 0 {
		return 0
	}
	m := c.Model
	tp := float64(c.TP)
	e := c.Efficiency
	flops := 2*float64(m.Layers)*float64(m.LayerMatmulParams())*float64(s.Tokens) +
		4*float64(m.Layers)*float64(m.QHidden())*s.AttnPairs +
		2*float64(m.Hidden)*float64(m.Vocab)*float64(s.LogitSeqs)
	compute := flops / (tp * c.Quant.PeakFLOPS(c.GPU) * e.Compute)
	bytes := float64(c.WeightBytesPerGPU()) + float64(s.KVReadTokens)*float64(c.KVBytesPerToken())
	memory := bytes / (c.GPU.HBMBytesPerSec * e.Memory)
	sec := math.Max(compute, memory)
	if c.TP > 1 {
		msg := float64(s.Tokens) * float64(m.Hidden) * 2
		perDir := c.GPU.NVLinkBytesPerSec / 2 * e.Network
		ar := e.AllReduceLatency.Seconds() + 2*(tp-1)/tp*msg/perDir
		sec += 2 * float64(m.Layers) * ar
	}
	sec += e.StepOverhead.Seconds() + float64(s.Seqs)*e.PerSeqOverhead.Seconds()
	return time.Duration(sec * float64(time.Second))
}

// PrefillTime estimates how long the engine, otherwise idle, takes to
// prefill n new tokens on top of ctx cached ones, in chunks of
// MaxNumBatchedTokens.
func (c Config) PrefillTime(ctx, n int) time.Duration {
	var d time.Duration
	for n > 0 {
		k := min(n, c.MaxNumBatchedTokens)
		var s StepShape
		s.Add(ctx, k, k == n)
		d += c.StepTime(s)
		ctx += k
		n -= k
	}
	return d
}

// DecodeStepTime estimates one decode step of batch sequences whose
// contexts average ctx tokens.
func (c Config) DecodeStepTime(batch, ctx int) time.Duration {
	var s StepShape
	for range batch {
		s.Add(ctx, 1, true)
	}
	return c.StepTime(s)
}
