package gpu

import (
	"context"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

var nvmlUUID = regexp.MustCompile(`^GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)

func discover(t *testing.T, d Discoverer) Inventory {
	t.Helper()
	inv, err := d.Discover(context.Background())
	if err != nil {
		t.Fatalf("Discover: %v", err)
	}
	return inv
}

func TestFakeHGXH100(t *testing.T) {
	d, err := NewFake(8, "H100-SXM-80GB", WithSeed("node-a"))
	if err != nil {
		t.Fatal(err)
	}
	inv := discover(t, d)
	if inv.Source != SourceFake || inv.Driver == "" || inv.CUDA == "" || inv.Reason != "" {
		t.Errorf("inventory header = source %q driver %q cuda %q reason %q; want fake, versions set, no reason",
			inv.Source, inv.Driver, inv.CUDA, inv.Reason)
	}
	if len(inv.Devices) != 8 {
		t.Fatalf("got %d devices, want 8", len(inv.Devices))
	}
	wantBus := []string{
		"00000000:18:00.0", "00000000:2A:00.0", "00000000:3A:00.0", "00000000:5D:00.0",
		"00000000:9A:00.0", "00000000:AB:00.0", "00000000:BA:00.0", "00000000:DB:00.0",
	}
	seen := map[string]bool{}
	for i, g := range inv.Devices {
		if g.Index != i {
			t.Errorf("device %d: Index = %d", i, g.Index)
		}
		if !nvmlUUID.MatchString(g.UUID) {
			t.Errorf("device %d: UUID %q is not in NVML's form", i, g.UUID)
		}
		if seen[g.UUID] {
			t.Errorf("device %d: UUID %q repeated", i, g.UUID)
		}
		seen[g.UUID] = true
		if g.Model != "H100-SXM-80GB" {
			t.Errorf("device %d: Model = %q", i, g.Model)
		}
		if want := int64(81559) << 20; g.MemoryBytes != want {
			t.Errorf("device %d: MemoryBytes = %d, want %d (81559 MiB)", i, g.MemoryBytes, want)
		}
		if g.PCIBusID != wantBus[i] {
			t.Errorf("device %d: PCIBusID = %q, want %q", i, g.PCIBusID, wantBus[i])
		}
		if want := i / 4; g.NUMANode != want {
			t.Errorf("device %d: NUMANode = %d, want %d", i, g.NUMANode, want)
		}
		var wantPeers []int
		for j := range 8 {
			if j != i {
				wantPeers = append(wantPeers, j)
			}
		}
		if diff := cmp.Diff(wantPeers, g.NVLinkPeers); diff != "" {
			t.Errorf("device %d: NVLinkPeers (-want +got):\n%s", i, diff)
		}
		if g.Health != HealthOK {
			t.Errorf("device %d: Health = %q", i, g.Health)
		}
	}
}

func TestFakeModels(t *testing.T) {
	tests := []struct {
		name      string
		model     string
		wantModel string
		wantMiB   int64
	}{
		{"canonical A100", "A100-SXM4-80GB", "A100-SXM4-80GB", 81920},
		{"canonical H100", "H100-SXM-80GB", "H100-SXM-80GB", 81559},
		{"short H200", "H200", "H200-SXM-141GB", 143771},
		{"short B200 lower case", "b200", "B200-SXM-180GB", 183359},
		{"NVML product name", "NVIDIA H100 80GB HBM3", "H100-SXM-80GB", 81559},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, err := NewFake(2, tt.model)
			if err != nil {
				t.Fatal(err)
			}
			inv := discover(t, d)
			for _, g := range inv.Devices {
				if g.Model != tt.wantModel || g.MemoryBytes != tt.wantMiB<<20 {
					t.Errorf("device %d = %s with %d bytes, want %s with %d MiB", g.Index, g.Model, g.MemoryBytes, tt.wantModel, tt.wantMiB)
				}
			}
		})
	}
}

func TestFakeBadArguments(t *testing.T) {
	tests := []struct {
		name  string
		n     int
		model string
		want  []string // substrings of the error
	}{
		{"unknown model", 8, "V100", []string{`"V100"`, "A100-SXM4-80GB", "B200-SXM-180GB", "H100-SXM-80GB", "H200-SXM-141GB"}},
		{"empty model", 8, "", []string{`""`, "H100-SXM-80GB"}},
		{"negative count", -1, "H100", []string{"-1", "between 0 and 64"}},
		{"too many", 65, "H100", []string{"65", "between 0 and 64"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, err := NewFake(tt.n, tt.model)
			if err == nil {
				t.Fatalf("NewFake(%d, %q) = %v, want an error", tt.n, tt.model, d)
			}
			for _, s := range tt.want {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not mention %q", err, s)
				}
			}
		})
	}
}

func TestFakeZeroGPUs(t *testing.T) {
	d, err := NewFake(0, "H100")
	if err != nil {
		t.Fatal(err)
	}
	inv := discover(t, d)
	if len(inv.Devices) != 0 || inv.Devices == nil || inv.Reason == "" {
		t.Errorf("got %d devices (nil: %v), reason %q; want an empty list and a reason", len(inv.Devices), inv.Devices == nil, inv.Reason)
	}
}

func TestFakeDeterministicPerSeed(t *testing.T) {
	inv := func(opts ...FakeOption) Inventory {
		d, err := NewFake(8, "H100", opts...)
		if err != nil {
			t.Fatal(err)
		}
		return discover(t, d)
	}
	a1, a2, b := inv(WithSeed("node-a")), inv(WithSeed("node-a")), inv(WithSeed("node-b"))
	if diff := cmp.Diff(a1, a2); diff != "" {
		t.Errorf("same seed, different inventories (-first +second):\n%s", diff)
	}
	for i := range a1.Devices {
		if a1.Devices[i].UUID == b.Devices[i].UUID {
			t.Errorf("device %d has UUID %s under two different seeds", i, b.Devices[i].UUID)
		}
	}
	if diff := cmp.Diff(inv(), inv(WithSeed("gangway-fake"))); diff != "" {
		t.Errorf("default seed is not gangway-fake (-default +explicit):\n%s", diff)
	}
}

func TestFakeReturnsCopies(t *testing.T) {
	d, err := NewFake(4, "H100")
	if err != nil {
		t.Fatal(err)
	}
	first := discover(t, d)
	want := discover(t, d)
	first.Devices[0].UUID = "changed"
	first.Devices[0].NVLinkPeers[0] = 99
	if diff := cmp.Diff(want, discover(t, d)); diff != "" {
		t.Errorf("changing a returned inventory changed the fake (-want +got):\n%s", diff)
	}
}

func TestFakeLargeNodeAddressesDistinct(t *testing.T) {
	d, err := NewFake(MaxFakeGPUs, "B200")
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for _, g := range discover(t, d).Devices {
		if j, ok := seen[g.PCIBusID]; ok {
			t.Errorf("devices %d and %d share PCI bus id %s", j, g.Index, g.PCIBusID)
		}
		seen[g.PCIBusID] = g.Index
		if _, err := parseBusID(g.PCIBusID); err != nil {
			t.Errorf("device %d: %v", g.Index, err)
		}
	}
}
