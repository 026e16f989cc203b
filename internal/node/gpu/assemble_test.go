package gpu

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// writeNUMA makes a fake sysfs tree where each PCI address has numa_node.
func writeNUMA(t *testing.T, nodes map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for addr, node := range nodes {
		dir := filepath.Join(root, "bus", "pci", "devices", addr)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "numa_node"), []byte(node+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// switchLinks is what an HGX GPU reports: n active links, all to NVSwitch.
// The remote addresses are the switches', never another GPU's.
func switchLinks(n int, remote linkRemote) []rawLink {
	var ls []rawLink
	for i := range n {
		ls = append(ls, rawLink{remoteBusID: []string{"00000000:05:00.0", "00000000:06:00.0", "00000000:07:00.0", "00000000:08:00.0"}[i%4], remote: remote})
	}
	return ls
}

func TestAssemblePeers(t *testing.T) {
	bus := []string{"00000000:18:00.0", "00000000:2A:00.0", "00000000:3A:00.0", "00000000:5D:00.0"}
	tests := []struct {
		name  string
		raws  []rawDevice
		peers [][]int // per device, in raws order
	}{
		{
			name: "HGX: every GPU on NVSwitch",
			raws: []rawDevice{
				{index: 0, busID: bus[0], links: switchLinks(18, remoteSwitch)},
				{index: 1, busID: bus[1], links: switchLinks(18, remoteSwitch)},
				{index: 2, busID: bus[2], links: switchLinks(18, remoteSwitch)},
				{index: 3, busID: bus[3], links: switchLinks(18, remoteSwitch)},
			},
			peers: [][]int{{1, 2, 3}, {0, 2, 3}, {0, 1, 3}, {0, 1, 2}},
		},
		{
			name: "old driver without remote type: non-GPU remotes are switches",
			raws: []rawDevice{
				{index: 0, busID: bus[0], links: switchLinks(12, remoteUnknown)},
				{index: 1, busID: bus[1], links: switchLinks(12, remoteUnknown)},
				{index: 2, busID: bus[2]},
			},
			peers: [][]int{{1}, {0}, {}},
		},
		{
			name: "direct links: peers by remote address, one side enough",
			raws: []rawDevice{
				{index: 0, busID: bus[0], links: []rawLink{{remoteBusID: "0000:2a:00.0", remote: remoteGPU}, {remoteBusID: bus[1], remote: remoteGPU}}},
				{index: 1, busID: bus[1], links: []rawLink{{remoteBusID: bus[0], remote: remoteUnknown}}},
				{index: 2, busID: bus[2], links: []rawLink{{remoteBusID: bus[3]}}},
				{index: 3, busID: bus[3]},
			},
			peers: [][]int{{1}, {0}, {3}, {2}},
		},
		{
			name: "a GPU on another node and a CPU are not peers",
			raws: []rawDevice{
				{index: 0, busID: bus[0], links: []rawLink{{remoteBusID: "00000000:99:00.0", remote: remoteGPU}, {remoteBusID: "00000000:04:00.0", remote: remoteOther}}},
				{index: 1, busID: bus[1], links: []rawLink{{remote: remoteOther}}},
			},
			peers: [][]int{{}, {}},
		},
		{
			name: "skipped GPU leaves a gap in indices; peers use NVML indices",
			raws: []rawDevice{
				{index: 0, busID: bus[0], links: switchLinks(4, remoteSwitch)},
				{index: 2, busID: bus[2], links: switchLinks(4, remoteSwitch)},
				{index: 3, busID: bus[3]},
			},
			peers: [][]int{{2}, {0}, {}},
		},
		{
			name:  "a link back to itself is not a peer",
			raws:  []rawDevice{{index: 0, busID: bus[0], links: []rawLink{{remoteBusID: bus[0], remote: remoteGPU}}}},
			peers: [][]int{{}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			devs := assemble(tt.raws, t.TempDir())
			var got [][]int
			for _, d := range devs {
				got = append(got, d.NVLinkPeers)
			}
			if diff := cmp.Diff(tt.peers, got); diff != "" {
				t.Errorf("peers (-want +got):\n%s", diff)
			}
		})
	}
}

func TestAssembleFields(t *testing.T) {
	sysfs := writeNUMA(t, map[string]string{"0000:18:00.0": "0", "0000:9a:00.0": "1", "0000:2a:00.0": "-1", "0001:3a:00.0": "junk"})
	raws := []rawDevice{
		{index: 0, uuid: "GPU-a", productName: "NVIDIA H100 80GB HBM3", memoryBytes: 81559 << 20, busID: "00000000:18:00.0"},
		{index: 1, uuid: "GPU-b", productName: "NVIDIA H100 80GB HBM3", memoryBytes: 81559 << 20, busID: "00000000:9a:00.0"},
		{index: 2, uuid: "GPU-c", productName: "NVIDIA GeForce RTX 4090", memoryBytes: 24564 << 20, busID: "00000000:2A:00.0"},
		{index: 3, uuid: "GPU-d", productName: "", busID: "00000001:3A:00.0", lost: true},
		{index: 4, uuid: "GPU-e", productName: "NVIDIA H200", busID: ""},
	}
	want := []Device{
		{Index: 0, UUID: "GPU-a", Model: "H100-SXM-80GB", MemoryBytes: 81559 << 20, PCIBusID: "00000000:18:00.0", NUMANode: 0, NVLinkPeers: []int{}, Health: HealthOK},
		{Index: 1, UUID: "GPU-b", Model: "H100-SXM-80GB", MemoryBytes: 81559 << 20, PCIBusID: "00000000:9A:00.0", NUMANode: 1, NVLinkPeers: []int{}, Health: HealthOK},
		{Index: 2, UUID: "GPU-c", Model: "NVIDIA GeForce RTX 4090", MemoryBytes: 24564 << 20, PCIBusID: "00000000:2A:00.0", NUMANode: -1, NVLinkPeers: []int{}, Health: HealthOK},
		{Index: 3, UUID: "GPU-d", Model: "", PCIBusID: "00000001:3A:00.0", NUMANode: -1, NVLinkPeers: []int{}, Health: HealthLost},
		{Index: 4, UUID: "GPU-e", Model: "H200-SXM-141GB", PCIBusID: "", NUMANode: -1, NVLinkPeers: []int{}, Health: HealthOK},
	}
	if diff := cmp.Diff(want, assemble(raws, sysfs)); diff != "" {
		t.Errorf("devices (-want +got):\n%s", diff)
	}
}

func TestParseBusID(t *testing.T) {
	tests := []struct {
		in        string
		wantNVML  string
		wantSysfs string
		wantErr   bool
	}{
		{in: "00000000:18:00.0", wantNVML: "00000000:18:00.0", wantSysfs: "0000:18:00.0"},
		{in: "0000:db:00.0", wantNVML: "00000000:DB:00.0", wantSysfs: "0000:db:00.0"},
		{in: "ab:1f.7", wantNVML: "00000000:AB:1F.7", wantSysfs: "0000:ab:1f.7"},
		{in: "00010000:01:00.1", wantNVML: "00010000:01:00.1", wantSysfs: "10000:01:00.1"},
		{in: "", wantErr: true},
		{in: "00000000:18:00", wantErr: true},
		{in: "0000:100:00.0", wantErr: true},
		{in: "0000:18:20.0", wantErr: true},
		{in: "0000:18:00.8", wantErr: true},
		{in: "0000:18::00.0", wantErr: true},
		{in: "x:18:00.0", wantErr: true},
		{in: "000000000:18:00.0", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			b, err := parseBusID(tt.in)
			if tt.wantErr {
				if err == nil {
					t.Errorf("parseBusID(%q) = %+v, want an error", tt.in, b)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if b.nvml() != tt.wantNVML || b.sysfs() != tt.wantSysfs {
				t.Errorf("parseBusID(%q) formats as %q / %q, want %q / %q", tt.in, b.nvml(), b.sysfs(), tt.wantNVML, tt.wantSysfs)
			}
		})
	}
}

func FuzzParseBusID(f *testing.F) {
	for _, s := range []string{"00000000:18:00.0", "0000:db:00.0", "ab:1f.7", "", "::.", "0:0:0.0"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		b, err := parseBusID(s)
		if err != nil {
			return
		}
		for _, form := range []string{b.nvml(), b.sysfs()} {
			again, err := parseBusID(form)
			if err != nil || again != b {
				t.Errorf("parseBusID(%q) = %+v, but its form %q parses to %+v, %v", s, b, form, again, err)
			}
		}
	})
}

func TestParseNUMANode(t *testing.T) {
	tests := []struct {
		in      string
		want    int
		wantErr bool
	}{
		{"0\n", 0, false}, {"1", 1, false}, {"-1\n", -1, false}, {"-2", 0, true}, {"", 0, true}, {"one", 0, true},
	}
	for _, tt := range tests {
		got, err := parseNUMANode([]byte(tt.in))
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("parseNUMANode(%q) = %d, %v; want %d, error %v", tt.in, got, err, tt.want, tt.wantErr)
		}
	}
}

func FuzzParseNUMANode(f *testing.F) {
	for _, s := range []string{"0\n", "-1", "x"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		n, err := parseNUMANode(b)
		if err == nil && n < -1 {
			t.Errorf("parseNUMANode(%q) = %d, below -1", b, n)
		}
	})
}

func TestFormatCUDAVersion(t *testing.T) {
	for in, want := range map[int]string{12080: "12.8", 12040: "12.4", 11020: "11.2", 13000: "13.0", 0: "", -1: ""} {
		if got := formatCUDAVersion(in); got != want {
			t.Errorf("formatCUDAVersion(%d) = %q, want %q", in, got, want)
		}
	}
}

func TestNoDevicesReason(t *testing.T) {
	if got := noDevicesReason(8, nil); got != "" {
		t.Errorf("all read: reason %q, want none", got)
	}
	if got := noDevicesReason(0, nil); got == "" {
		t.Error("no GPUs counted: no reason given")
	}
	got := noDevicesReason(2, []string{"GPU 1: get UUID: ERROR_GPU_IS_LOST"})
	if want := "NVML counted 2 GPUs; could not read 1: GPU 1: get UUID: ERROR_GPU_IS_LOST"; got != want {
		t.Errorf("reason %q, want %q", got, want)
	}
}
