package gpu

import (
	"context"
	"strings"
	"testing"
)

// TestNVMLOnThisMachine runs real NVML discovery. On a machine without the
// NVIDIA driver (or a build without cgo) it must report zero GPUs with a
// reason and not crash; on a GPU machine it must report sane devices.
func TestNVMLOnThisMachine(t *testing.T) {
	d := NewNVML()
	for range 2 { // a second round checks that a failed or finished Init leaves nothing broken
		inv, err := d.Discover(context.Background())
		if err != nil {
			t.Fatalf("Discover: %v", err)
		}
		t.Logf("source %q, %d GPUs, driver %q, CUDA %q, reason %q", inv.Source, len(inv.Devices), inv.Driver, inv.CUDA, inv.Reason)
		if inv.Source != SourceNVML {
			if inv.Source != SourceNone || len(inv.Devices) != 0 || inv.Devices == nil || inv.Reason == "" {
				t.Fatalf("without NVML: source %q, %d devices (nil: %v), reason %q; want none, an empty list and a reason",
					inv.Source, len(inv.Devices), inv.Devices == nil, inv.Reason)
			}
			continue
		}
		if inv.Driver == "" {
			t.Error("NVML gave no driver version")
		}
		for _, g := range inv.Devices {
			if !nvmlUUID.MatchString(g.UUID) || g.MemoryBytes <= 0 || g.Model == "" {
				t.Errorf("device %+v: want an NVML UUID, memory and a model", g)
			}
			if _, err := parseBusID(g.PCIBusID); err != nil {
				t.Errorf("device %d: %v", g.Index, err)
			}
		}
	}
}

func TestNVMLMissingLibrary(t *testing.T) {
	inv, err := NewNVML(WithLibraryPath("/nonexistent/libnvidia-ml.so.1")).Discover(context.Background())
	if err != nil {
		t.Fatalf("Discover: %v", err)
	}
	if inv.Source != SourceNone || len(inv.Devices) != 0 || inv.Reason == "" {
		t.Fatalf("source %q, %d devices, reason %q; want none, no devices, a reason", inv.Source, len(inv.Devices), inv.Reason)
	}
	if !strings.Contains(inv.Reason, "/nonexistent/libnvidia-ml.so.1") && !strings.Contains(inv.Reason, "cgo") && !strings.Contains(inv.Reason, "linux") {
		t.Errorf("reason %q names neither the library nor the build", inv.Reason)
	}
}

// TestOpenNVMLHealthMissingLibrary: without NVML (or without cgo) the
// health reader says why it is unavailable and the process lives on.
func TestOpenNVMLHealthMissingLibrary(t *testing.T) {
	h, err := OpenNVMLHealth(WithLibraryPath("/nonexistent/libnvidia-ml.so.1"))
	if err == nil || h != nil {
		t.Fatalf("OpenNVMLHealth = %v, %v; want nil and an error", h, err)
	}
	if msg := err.Error(); !strings.Contains(msg, "/nonexistent/libnvidia-ml.so.1") && !strings.Contains(msg, "cgo") && !strings.Contains(msg, "linux") {
		t.Errorf("error %q names neither the library nor the build", msg)
	}
}
