// Package gpu discovers the GPUs of the node an agent runs on.
//
// A [Discoverer] returns an [Inventory]: the devices with their model,
// memory, PCI address, NUMA node and NVLink peers, plus the driver and CUDA
// versions. Three implementations exist:
//
//   - [NewNVML] reads the real devices through NVML (github.com/NVIDIA/go-nvml).
//     It is the only cgo in the project and is compiled only for linux with
//     cgo; elsewhere a stub reports zero GPUs with a reason. A host without
//     the NVIDIA driver gets zero GPUs and a reason, never a crash.
//   - [NewFake] makes up GPUs that look like what NVML reports on an HGX
//     board, for machines without GPUs (`gangway agent --fake-gpus 8`).
//   - [NewErrored] fails every call, for tests of the code that consumes an
//     inventory.
//
// The fake and NVML are also [Sampler]s: they read each GPU's telemetry
// (utilisation, memory, temperature, power, clocks, ECC) in the units of
// dcgm-exporter, which the agent's metrics report; the fake's follow
// whether a rank holds the GPU.
//
// Zero GPUs is an outcome, not an error: [Inventory.Reason] says why.
// An error from Discover means discovery itself broke.
//
// [OpenNVMLHealth] keeps NVML open for the node's health checks: it reads
// the counters the gpucheck checks need (ECC, temperature, power, NVLink,
// PCIe) and turns NVML's Xid events into an xid.Source. It sits here
// because this package holds the only cgo.
//
// Model names, NVML product names and memory totals come from
// internal/hardware's catalog.
//
// It imports the standard library, internal/hardware,
// internal/node/health/gpucheck and internal/node/health/xid (the types
// the health readings come in) and, in the cgo build only,
// github.com/NVIDIA/go-nvml.
package gpu

import (
	"context"
	"errors"
	"fmt"
)

// Health values for [Device.Health]. Discovery only distinguishes a device
// that answered from one NVML says is lost; the health checks refine this.
const (
	HealthOK   = "ok"
	HealthLost = "lost"
)

// Sources for [Inventory.Source].
const (
	SourceNVML = "nvml"
	SourceFake = "fake"
	SourceNone = "none"
)

// Device is one GPU as discovery sees it.
type Device struct {
	// Index is NVML's device index (the order nvidia-smi lists, and the
	// number CUDA_VISIBLE_DEVICES takes when CUDA_DEVICE_ORDER=PCI_BUS_ID).
	Index int `json:"index"`
	// UUID is NVML's identifier, "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx".
	UUID string `json:"uuid"`
	// Model is the canonical model name from [Models] ("H100-SXM-80GB")
	// when the product is known, otherwise NVML's product name verbatim.
	Model string `json:"model"`
	// MemoryBytes is the total device memory NVML reports.
	MemoryBytes int64 `json:"memoryBytes"`
	// PCIBusID is NVML's form of the PCI address, "00000000:18:00.0".
	PCIBusID string `json:"pciBusId"`
	// NUMANode is the host NUMA node closest to the GPU; -1 when unknown.
	NUMANode int `json:"numaNode"`
	// NVLinkPeers lists, ascending, the indices of the GPUs on this node
	// that this one reaches over an active NVLink, directly or through
	// NVSwitch. Empty when the GPU has no active NVLink.
	NVLinkPeers []int `json:"nvlinkPeers"`
	// Health is HealthOK or HealthLost at discovery time.
	Health string `json:"health"`
}

// Inventory is the result of one discovery.
type Inventory struct {
	Devices []Device `json:"devices"`
	// Driver is the NVIDIA driver version ("570.133.20"); empty when unknown.
	Driver string `json:"driver,omitempty"`
	// CUDA is the highest CUDA version the driver supports ("12.8"); empty
	// when unknown.
	CUDA string `json:"cuda,omitempty"`
	// Source is SourceNVML, SourceFake or SourceNone (nothing could be
	// asked: no library, no driver, no cgo).
	Source string `json:"source"`
	// Reason says why there are no GPUs, or why some GPUs NVML counted are
	// missing from Devices. Empty when every GPU was read.
	Reason string `json:"reason,omitempty"`
}

// Discoverer reports the GPUs of this node.
//
// Discover blocks while it asks the hardware (NVML calls take milliseconds
// each) and returns an inventory that the caller owns. It returns an error
// only when discovery itself broke; zero GPUs comes with a Reason instead.
// Implementations are safe for concurrent use.
type Discoverer interface {
	Discover(ctx context.Context) (Inventory, error)
}

// ErrDiscovery is wrapped by the errors of the errored discoverer.
var ErrDiscovery = errors.New("gpu: discovery failed")

// NewErrored returns a Discoverer whose every Discover fails with an error
// wrapping both ErrDiscovery and cause (which may be nil). It stands in for
// a driver that is present but broken, in tests of inventory consumers.
func NewErrored(cause error) Discoverer { return errored{cause: cause} }

type errored struct{ cause error }

func (e errored) Discover(ctx context.Context) (Inventory, error) {
	if err := ctx.Err(); err != nil {
		return Inventory{}, err
	}
	if e.cause == nil {
		return Inventory{}, ErrDiscovery
	}
	return Inventory{}, fmt.Errorf("%w: %w", ErrDiscovery, e.cause)
}
