package cli

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/gangway/gangway/internal/node/gpu"
)

// nvmlInventory is a Discoverer that answers as NVML discovery on a
// two-GPU node does.
type nvmlInventory struct{}

func (nvmlInventory) Discover(context.Context) (gpu.Inventory, error) {
	return gpu.Inventory{Source: gpu.SourceNVML, Devices: []gpu.Device{
		{Index: 0, PCIBusID: "00000000:18:00.0"}, {Index: 1, PCIBusID: "00000000:2A:00.0"},
	}}, nil
}

// TestNVMLHealthUnavailable: on a node whose GPUs NVML found but whose
// NVML cannot be opened again for the health readings (here: no library
// at all), the agent logs why and keeps the kernel-log checks; it starts.
func TestNVMLHealthUnavailable(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	opts := []gpu.NVMLOption{gpu.WithLibraryPath("/nonexistent/libnvidia-ml.so.1")}
	p, ev := openNVMLHealth(2, opts, log)
	if p != nil || ev != nil {
		t.Fatalf("openNVMLHealth = %v, %v; want nils", p, ev)
	}
	if !strings.Contains(buf.String(), "only the kernel log's Xids are checked") {
		t.Errorf("log %q does not say what runs instead", buf.String())
	}
	r, err := nodeHealthChecks(t.Context(), nvmlInventory{}, opts, 0, "", "", time.Second, log)
	if err != nil || r == nil {
		t.Fatalf("nodeHealthChecks = %v, %v; want a runner", r, err)
	}
}
