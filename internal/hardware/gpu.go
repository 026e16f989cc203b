package hardware

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// GPU is one accelerator model and the system it usually ships in.
// Throughputs are dense (no sparsity) tensor-core peaks from the vendor's
// data sheet.
type GPU struct {
	// Name is the canonical name ("H100-SXM-80GB"): what agents report in
	// api.GPU.Model and what every table prints.
	Name string
	// Aliases are the other names LookupGPU accepts: what users type
	// ("h100", "H100-SXM").
	Aliases []string
	// NVMLName is the product name NVML reports (nvmlDeviceGetName,
	// nvidia-smi's name column); "" where no capture of it was published.
	NVMLName string
	// MemoryBytes is the data sheet's memory ("80 GB"), read as GiB.
	MemoryBytes int64
	// DeviceMemoryBytes is the total as the driver reports it (NVML's and
	// cudaMemGetInfo's), a little below MemoryBytes because the driver
	// reserves some; 0 where no capture of it was published. The agent's
	// fake GPUs report it, and vLLM sizes its KV cache from it.
	DeviceMemoryBytes int64
	// HBMBytesPerSec is the HBM bandwidth.
	HBMBytesPerSec float64
	// BF16FLOPS is the dense BF16 (and FP16) peak.
	BF16FLOPS float64
	// FP8FLOPS is the dense FP8 peak; 0 where the GPU has no FP8.
	FP8FLOPS float64
	// TF32FLOPS is the dense TF32 peak; 0 where not known.
	TF32FLOPS float64
	// INT8OPS is the dense INT8 peak; 0 where not known.
	INT8OPS float64
	// NVLinkBytesPerSec is the NVLink bandwidth per GPU as vendors quote
	// it: both directions added (A100: 600 GB/s, i.e. 300 GB/s each way).
	NVLinkBytesPerSec float64
	// NVLinkDomain is how many GPUs share one NVLink switch fabric.
	NVLinkDomain int
	// GPUsPerNode is the usual number of GPUs per machine.
	GPUsPerNode int
	// NICBitsPerSec is the inter-node network bandwidth per GPU (one NIC
	// per GPU, rail-optimised).
	NICBitsPerSec float64
}

const (
	mib  = 1 << 20
	gib  = 1 << 30
	gbs  = 1e9
	tera = 1e12
)

// gpus is the catalog. Figures are those of the table "Hardware numbers"
// in /work/shared/BENCHMARKS.md, and the vendor's data sheets where that
// table is silent. Where the three tables this one replaces disagreed:
//
//   - Memory: the planner used the data sheet's figure read as GiB, the
//     agent and the simulator what NVML reports (published nvidia-smi
//     output; for the H100 81559 MiB, 361 MiB less). Both are facts, so
//     both are kept, named for what they are: MemoryBytes is the data
//     sheet's (BENCHMARKS.md's), DeviceMemoryBytes NVML's, and
//     AllocatableBytes says which the serving memory model uses.
//   - A100 HBM bandwidth is BENCHMARKS.md's 2.0 TB/s (the planner's; the
//     data sheet says 2,039 GB/s, which the engine simulator used). The
//     planner's dev-vector errors were measured with 2.0.
//   - Names are the agent's (they are on the wire in api.GPU.Model); the
//     planner's and the simulator's names are aliases.
//
// TF32 and INT8 are the data sheets' sparse figures halved, and so is
// FP8: NVIDIA's H100 Tensor Core GPU datasheet gives the H100 SXM "FP8
// Tensor Core 3,958 teraFLOPS" with sparsity (1,979 dense), the H200
// datasheet the same 3,958 for the H200 SXM, and the HGX B200 datasheet
// 72 PFLOPS FP8 (sparse) for eight B200s, 9 per GPU (4,500 dense). The
// A100 has no FP8 tensor cores.
var gpus = []GPU{
	{Name: "A100-SXM4-80GB", NVMLName: "NVIDIA A100-SXM4-80GB",
		Aliases:     []string{"A100", "A100-SXM", "A100-SXM4", "A100-80GB", "A100-SXM-80GB", "NVIDIA-A100"},
		MemoryBytes: 80 * gib, DeviceMemoryBytes: 81920 * mib, HBMBytesPerSec: 2.0 * tera,
		BF16FLOPS: 312 * tera, TF32FLOPS: 156 * tera, INT8OPS: 624 * tera,
		NVLinkBytesPerSec: 600 * gbs, NVLinkDomain: 8, GPUsPerNode: 8, NICBitsPerSec: 200e9},
	{Name: "H100-SXM-80GB", NVMLName: "NVIDIA H100 80GB HBM3",
		Aliases:     []string{"H100", "H100-SXM", "H100-SXM5", "H100-SXM5-80GB", "H100-80GB", "NVIDIA-H100"},
		MemoryBytes: 80 * gib, DeviceMemoryBytes: 81559 * mib, HBMBytesPerSec: 3.35 * tera,
		BF16FLOPS: 989 * tera, FP8FLOPS: 1979 * tera, TF32FLOPS: 494.5 * tera, INT8OPS: 1979 * tera,
		NVLinkBytesPerSec: 900 * gbs, NVLinkDomain: 8, GPUsPerNode: 8, NICBitsPerSec: 400e9},
	{Name: "H200-SXM-141GB", NVMLName: "NVIDIA H200",
		Aliases:     []string{"H200", "H200-SXM", "H200-141GB", "NVIDIA-H200"},
		MemoryBytes: 141 * gib, DeviceMemoryBytes: 143771 * mib, HBMBytesPerSec: 4.8 * tera,
		BF16FLOPS: 989 * tera, FP8FLOPS: 1979 * tera, TF32FLOPS: 494.5 * tera, INT8OPS: 1979 * tera,
		NVLinkBytesPerSec: 900 * gbs, NVLinkDomain: 8, GPUsPerNode: 8, NICBitsPerSec: 400e9},
	{Name: "B200-SXM-180GB", NVMLName: "NVIDIA B200",
		Aliases:     []string{"B200", "B200-SXM", "HGX-B200", "DGX-B200", "NVIDIA-B200"},
		MemoryBytes: 180 * gib, DeviceMemoryBytes: 183359 * mib, HBMBytesPerSec: 8.0 * tera,
		BF16FLOPS: 2250 * tera, FP8FLOPS: 4500 * tera, TF32FLOPS: 1100 * tera, INT8OPS: 4500 * tera,
		NVLinkBytesPerSec: 1800 * gbs, NVLinkDomain: 8, GPUsPerNode: 8, NICBitsPerSec: 400e9},
	// No nvidia-smi capture of a GB200 has been published that we could
	// check, so it has no NVMLName or DeviceMemoryBytes and the agent
	// cannot fake one.
	{Name: "GB200-NVL72",
		Aliases:     []string{"GB200", "NVL72"},
		MemoryBytes: 186 * gib, HBMBytesPerSec: 8.0 * tera,
		BF16FLOPS: 2500 * tera, FP8FLOPS: 5000 * tera, TF32FLOPS: 1250 * tera, INT8OPS: 5000 * tera,
		NVLinkBytesPerSec: 1800 * gbs, NVLinkDomain: 72, GPUsPerNode: 4, NICBitsPerSec: 400e9},
}

// ErrUnknown is wrapped when a lookup finds nothing: "hardware: unknown
// gpu "X" (known: …)".
var ErrUnknown = errors.New("hardware: unknown")

// GPUs returns the catalog's GPUs in a fixed order (oldest first). The
// caller may modify the result.
func GPUs() []GPU {
	out := make([]GPU, len(gpus))
	for i, g := range gpus {
		g.Aliases = slices.Clone(g.Aliases)
		out[i] = g
	}
	return out
}

// GPUNames lists the canonical GPU names, sorted.
func GPUNames() []string {
	names := make([]string, len(gpus))
	for i, g := range gpus {
		names[i] = g.Name
	}
	slices.Sort(names)
	return names
}

// Names returns every name g answers to: canonical, NVML's, aliases.
func (g GPU) Names() []string {
	names := append([]string{g.Name}, g.Aliases...)
	if g.NVMLName != "" {
		names = append(names, g.NVMLName)
	}
	return names
}

// AllocatableBytes is the memory a process on g can allocate from:
// DeviceMemoryBytes where known, else MemoryBytes.
func (g GPU) AllocatableBytes() int64 {
	if g.DeviceMemoryBytes > 0 {
		return g.DeviceMemoryBytes
	}
	return g.MemoryBytes
}

// LookupGPU finds a GPU by its canonical name, NVML's product name or an
// alias, ignoring case and surrounding space.
func LookupGPU(name string) (GPU, error) {
	key := strings.TrimSpace(name)
	for _, g := range gpus {
		for _, n := range g.Names() {
			if strings.EqualFold(key, n) {
				return g, nil
			}
		}
	}
	return GPU{}, fmt.Errorf("%w gpu %q (known: %s)", ErrUnknown, name, strings.Join(GPUNames(), ", "))
}

// ErrInvalidGPU is wrapped by GPU.Validate's errors.
var ErrInvalidGPU = errors.New("hardware: invalid gpu")

// Validate reports the first field that makes the GPU unusable.
func (g GPU) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w %q: %s", ErrInvalidGPU, g.Name, fmt.Sprintf(format, args...))
	}
	switch {
	case g.Name == "":
		return fmt.Errorf("%w: name is empty", ErrInvalidGPU)
	case g.MemoryBytes <= 0:
		return bad("memory must be positive")
	case g.HBMBytesPerSec <= 0:
		return bad("hbm bandwidth must be positive")
	case g.BF16FLOPS <= 0:
		return bad("bf16 throughput must be positive")
	case g.FP8FLOPS < 0:
		return bad("fp8 throughput must not be negative")
	case g.NVLinkBytesPerSec <= 0:
		return bad("nvlink bandwidth must be positive")
	case g.NVLinkDomain <= 0:
		return bad("nvlink_domain must be positive, got %d", g.NVLinkDomain)
	case g.GPUsPerNode <= 0:
		return bad("gpus_per_node must be positive, got %d", g.GPUsPerNode)
	case g.NICBitsPerSec <= 0:
		return bad("nic bandwidth must be positive")
	}
	return nil
}
