package planner

import (
	"errors"
	"fmt"
)

// GPU is one accelerator model and the system it usually ships in.
// Throughputs are dense (no sparsity) peaks from the vendor's data sheet.
type GPU struct {
	Name    string
	Aliases []string
	// MemoryBytes is the HBM capacity.
	MemoryBytes int64
	// HBMBytesPerSec is the HBM bandwidth.
	HBMBytesPerSec float64
	// BF16FLOPS, FP8FLOPS: dense tensor-core peaks. FP8FLOPS is 0 where the
	// GPU has no FP8.
	BF16FLOPS float64
	FP8FLOPS  float64
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

// ErrInvalidGPU is wrapped by GPU.Validate's errors.
var ErrInvalidGPU = errors.New("planner: invalid gpu")

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

// Cluster is the part of a fleet one job runs on.
type Cluster struct {
	GPU  GPU
	GPUs int
	// GPUsPerNode and NVLinkDomain default to the GPU's catalog values when
	// zero.
	GPUsPerNode  int
	NVLinkDomain int
	// NICBytesPerSec is the inter-node bandwidth per GPU; 0 means the GPU's
	// catalog NICBitsPerSec/8.
	NICBytesPerSec float64
}

func (c Cluster) gpusPerNode() int {
	if c.GPUsPerNode > 0 {
		return c.GPUsPerNode
	}
	return c.GPU.GPUsPerNode
}

func (c Cluster) domain() int {
	if c.NVLinkDomain > 0 {
		return c.NVLinkDomain
	}
	if c.GPU.NVLinkDomain > 0 {
		return c.GPU.NVLinkDomain
	}
	return c.gpusPerNode()
}

func (c Cluster) nicBytesPerSec() float64 {
	if c.NICBytesPerSec > 0 {
		return c.NICBytesPerSec
	}
	return c.GPU.NICBitsPerSec / 8
}
