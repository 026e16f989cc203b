// Package xid turns NVIDIA Xid events into health findings: it classifies
// each Xid code (what it says about the GPU and what it calls for), parses
// the driver's kernel-log lines ("NVRM: Xid (PCI:0000:18:00): 79, ..."),
// reads them from /dev/kmsg, and keeps a [Check] whose fatal findings stay
// until the GPU is cleared (reset or returned to service by an operator).
//
// Events come from a [Source]: [Kmsg] reads the kernel log; a source on
// NVML's event sets (nvmlEventSetWait) sits beside the cgo code in
// internal/node/gpu; [Fallback] pairs the two so that an Xid is counted
// once; the health package's fake injects events for tests and demos.
//
// [Check] has the method set of the health package's Check interface
// (Name, Run) without importing it, since that package imports this one.
//
// It imports the standard library and internal/api.
package xid

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/gangway/gangway/internal/api"
)

// Event is one Xid a source saw.
type Event struct {
	// GPU is the index of the GPU, or -1 when the source names it only by
	// BusID (the kernel log does).
	GPU int
	// BusID is the GPU's PCI address as [NormalizeBusID] writes it
	// ("0000:18:00"), or "" when GPU is set.
	BusID string
	// Xid is the code; 0 in a Reset event.
	Xid int
	// Unit and Severity are read from NVLink5 Xids (144 to 150), whose text
	// names the unit that raised it and whether the driver deems it Fatal
	// or Nonfatal ("NETIR_LINK_EVT Fatal XC0 i0 Link 04 (...)"); both ""
	// when absent.
	Unit     string
	Severity string
	// Detail is the driver's text after the code, trimmed.
	Detail string
	// At is when the source saw the event; zero means "when the check read
	// it".
	At time.Time
	// Reset says the GPU (GPU < 0 and BusID "": every GPU) was reset or
	// replaced: its sticky findings go, as with [Check.Clear].
	Reset bool
}

// Source yields Xid events.
//
// Read returns the events seen since the previous call without waiting
// for more (it may wait a few milliseconds for a record in flight). An
// error means the source could not be read this time; the events read
// before it are returned with it. Read is called from one goroutine at a
// time.
type Source interface {
	Read(ctx context.Context) ([]Event, error)
}

// Class is what an Xid says about its GPU.
type Class struct {
	Status api.CheckStatus
	Action api.HealthAction
	// Name is NVIDIA's name for the Xid.
	Name string
}

// Xid codes this package treats by name.
const (
	XidGraphicsException = 13
	XidPageFault         = 31
	XidStopped           = 43
	XidPreemptiveCleanup = 45
	XidDBE               = 48
	XidRowRemapPending   = 63
	XidRowRemapFailure   = 64
	XidNVLink            = 74
	XidFallenOffBus      = 79
	XidHighSBERate       = 92
	XidContainedECC      = 94
	XidUncontainedECC    = 95
	XidGSPTimeout        = 119
	XidGSPError          = 120
	XidNVLink5First      = 144
	XidNVLink5Last       = 150
	XidRecoveryAction    = 154
)

var (
	appError = func(name string) Class { return Class{api.CheckWarn, api.ActionCount, name} }
	reset    = func(name string) Class { return Class{api.CheckFatal, api.ActionResetGPU, name} }
)

// classes holds the Xids gangway knows. Sources: NVIDIA's Xid catalog
// (docs.nvidia.com/deploy/xid-errors) and its GPU debug guidelines.
var classes = map[int]Class{
	// Raised by what an application did (a bad kernel, an illegal
	// address, a killed context): counted, never fatal, or one buggy job
	// would take GPUs out of service for everyone.
	XidGraphicsException: appError("Graphics Engine Exception"),
	XidPageFault:         appError("GPU memory page fault"),
	XidStopped:           appError("GPU stopped processing"),
	XidPreemptiveCleanup: appError("Preemptive cleanup, due to previous errors"),

	// Memory: an uncorrectable error leaves the framebuffer suspect until
	// a reset remaps or retires the bad row.
	XidDBE: reset("Double Bit ECC Error"),
	// A row was marked for remapping; it takes effect at the next reset.
	// The GPU is sound meanwhile, so this asks for a reset without
	// taking the GPU out of service.
	XidRowRemapPending: {api.CheckWarn, api.ActionResetGPU, "Row remapping pending"},
	// No spare rows left: a reset does not help, the board needs service.
	XidRowRemapFailure: {api.CheckFatal, api.ActionCordonGPU, "Row remapping failure"},
	XidHighSBERate:     {api.CheckWarn, api.ActionCount, "High single-bit ECC error rate"},
	XidContainedECC:    reset("Contained ECC error"),
	XidUncontainedECC:  reset("Uncontained ECC error"),

	XidNVLink: reset("NVLink Error"),
	// The GPU no longer answers on PCIe. Recovering it takes a node
	// reboot in practice, and the node's other GPUs stall on the NVLink
	// and NCCL traffic they shared with it: the whole node leaves.
	XidFallenOffBus: {api.CheckFatal, api.ActionCordonNode, "GPU has fallen off the bus"},
	XidGSPTimeout:   reset("GSP RPC Timeout"),
	XidGSPError:     reset("GSP Error"),
}

// Classify says what e means for its GPU. NVLink5 Xids (144 to 150) are
// fatal (reset) unless their text says Nonfatal; Xid 154 follows the
// recovery action its text names; codes not in the table are counted,
// never fatal, so that a new driver's new Xid takes nothing out of
// service until someone classifies it.
func Classify(e Event) Class {
	if c, ok := classes[e.Xid]; ok {
		return c
	}
	switch {
	case e.Xid >= XidNVLink5First && e.Xid <= XidNVLink5Last:
		name := "NVLink5 error"
		if e.Unit != "" {
			name += " in " + e.Unit
		}
		if e.Severity == "Nonfatal" {
			return Class{api.CheckWarn, api.ActionCount, name + " (nonfatal)"}
		}
		return reset(name)
	case e.Xid == XidRecoveryAction:
		return recoveryAction(e.Detail)
	}
	return Class{api.CheckWarn, api.ActionCount, fmt.Sprintf("Xid %d (not in gangway's table)", e.Xid)}
}

// recoveryAction classifies Xid 154, in which the driver names what the
// GPU needs ("GPU recovery action changed from 0x0 (None) to 0x2 (Node
// Reboot Required)").
func recoveryAction(detail string) Class {
	const name = "GPU recovery action changed"
	if i := strings.LastIndex(detail, " to "); i >= 0 {
		detail = detail[i:] // the new action, not the old
	}
	switch {
	case containsFold(detail, "Node Reboot Required"):
		return Class{api.CheckFatal, api.ActionCordonNode, name + ": node reboot required"}
	case containsFold(detail, "Reset Required"), containsFold(detail, "Drain and Reset"):
		return reset(name + ": GPU reset required")
	}
	return Class{api.CheckWarn, api.ActionCount, name}
}
