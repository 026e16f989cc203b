package gpu

import (
	"context"
	"encoding/json"
	"errors"
	"go/parser"
	"go/token"
	"os"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestErrored(t *testing.T) {
	cause := errors.New("nvml: GPU is lost")
	tests := []struct {
		name  string
		cause error
	}{
		{"with cause", cause},
		{"without cause", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			inv, err := NewErrored(tt.cause).Discover(context.Background())
			if !errors.Is(err, ErrDiscovery) {
				t.Errorf("error %v does not wrap ErrDiscovery", err)
			}
			if tt.cause != nil && !errors.Is(err, tt.cause) {
				t.Errorf("error %v does not wrap the cause", err)
			}
			if len(inv.Devices) != 0 {
				t.Errorf("errored discovery returned %d devices", len(inv.Devices))
			}
		})
	}
}

func TestDiscoverersHonourCancelledContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	f, err := NewFake(8, "H100")
	if err != nil {
		t.Fatal(err)
	}
	for name, d := range map[string]Discoverer{"fake": f, "errored": NewErrored(nil), "nvml": NewNVML()} {
		if _, err := d.Discover(ctx); !errors.Is(err, context.Canceled) {
			t.Errorf("%s: Discover on a cancelled context = %v, want context.Canceled", name, err)
		}
	}
}

func TestInventoryJSONNames(t *testing.T) {
	inv := Inventory{
		Devices: []Device{{Index: 1, UUID: "GPU-x", Model: "H100-SXM-80GB", MemoryBytes: 2, PCIBusID: "00000000:18:00.0",
			NUMANode: -1, NVLinkPeers: []int{0}, Health: HealthOK}},
		Driver: "570.133.20", CUDA: "12.8", Source: SourceNVML, Reason: "r",
	}
	b, err := json.Marshal(inv)
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"devices": []any{map[string]any{
			"index": 1.0, "uuid": "GPU-x", "model": "H100-SXM-80GB", "memoryBytes": 2.0, "pciBusId": "00000000:18:00.0",
			"numaNode": -1.0, "nvlinkPeers": []any{0.0}, "health": "ok",
		}},
		"driver": "570.133.20", "cuda": "12.8", "source": "nvml", "reason": "r",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("JSON (-want +got):\n%s", diff)
	}
	var back Inventory
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(inv, back); diff != "" {
		t.Errorf("round trip (-want +got):\n%s", diff)
	}
}

func TestModels(t *testing.T) {
	want := []string{"A100-SXM4-80GB", "B200-SXM-180GB", "H100-SXM-80GB", "H200-SXM-141GB"}
	if diff := cmp.Diff(want, Models()); diff != "" {
		t.Errorf("Models (-want +got):\n%s", diff)
	}
	for _, tt := range []struct{ in, want string }{
		{"h100-sxm-80gb", "H100-SXM-80GB"}, {" NVIDIA H200 ", "H200-SXM-141GB"}, {"A100", "A100-SXM4-80GB"},
	} {
		if got, ok := CanonicalModel(tt.in); !ok || got != tt.want {
			t.Errorf("CanonicalModel(%q) = %q, %v; want %q", tt.in, got, ok, tt.want)
		}
	}
	if got, ok := CanonicalModel("NVIDIA GeForce RTX 4090"); ok {
		t.Errorf("CanonicalModel of an unknown product = %q, true", got)
	}
}

// TestPackageDoc fails when the package loses its doc comment.
func TestPackageDoc(t *testing.T) {
	entries, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".go") || strings.HasSuffix(e.Name(), "_test.go") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), e.Name(), nil, parser.ParseComments|parser.PackageClauseOnly)
		if err != nil {
			t.Fatal(err)
		}
		if f.Doc != nil && strings.HasPrefix(f.Doc.Text(), "Package gpu ") {
			return
		}
	}
	t.Error("package gpu has no doc comment")
}
