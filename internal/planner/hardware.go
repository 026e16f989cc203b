package planner

import "github.com/gangway/gangway/internal/hardware"

// GPU is the hardware catalog's accelerator; the planner reads every
// field but TF32FLOPS, INT8OPS and NVMLName.
type GPU = hardware.GPU

// ErrInvalidGPU is wrapped by GPU.Validate's errors.
var ErrInvalidGPU = hardware.ErrInvalidGPU

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
