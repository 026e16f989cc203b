package nic

import (
	"errors"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestDiscover(t *testing.T) {
	ib := func(name, hca, pci string, numa int, oper, port string, speed int64) NIC {
		return NIC{Name: name, Kind: KindInfiniBand, HCA: hca, Port: 1, SpeedMbps: speed, NUMANode: numa,
			PCIAddress: pci, OperState: oper, PortState: port, MTU: 4092,
			MAC: "00:00:10:29:fe:80:00:00:00:00:00:00:58:a2:e1:03:00:" + pci}
	}
	tests := []struct {
		root string
		want []NIC
	}{
		{"gb200-tray", []NIC{
			{Name: "docker0", Kind: KindEthernet, NUMANode: -1, OperState: "down", MAC: "02:42:5b:0e:11:7a", MTU: 1500, Virtual: true},
			{Name: "enP6p1s0f0np0", Kind: KindEthernet, HCA: "mlx5_4", Port: 1, SpeedMbps: 200000, NUMANode: 0, PCIAddress: "0006:01:00.0",
				OperState: "up", PortState: "ACTIVE", MAC: "a0:88:c2:3b:5e:10", MTU: 9000},
			{Name: "eno1", Kind: KindEthernet, SpeedMbps: 1000, NUMANode: 0, PCIAddress: "0008:01:00.0", OperState: "up", MAC: "7c:c2:55:4a:10:02", MTU: 1500},
			ib("ib0", "mlx5_0", "0000:03:00.0", 0, "up", "ACTIVE", 400000),
			ib("ib1", "mlx5_1", "0010:03:00.0", 1, "up", "ACTIVE", 400000),
			// A down port reports its lowest rate.
			ib("ib3", "mlx5_3", "0012:03:00.0", 1, "down", "DOWN", 10000),
			{Name: "veth1a2b3c4", Kind: KindEthernet, NUMANode: -1, OperState: "up", MAC: "3e:91:0c:55:aa:01", MTU: 1500, Virtual: true},
			// An RDMA port without IPoIB comes last, with no netdev fields.
			{Kind: KindInfiniBand, HCA: "mlx5_2", Port: 1, SpeedMbps: 400000, NUMANode: 0, PCIAddress: "0002:03:00.0", PortState: "ACTIVE"},
		}},
		{"cloud-vm", []NIC{
			{Name: "docker0", Kind: KindEthernet, NUMANode: -1, OperState: "down", MAC: "02:42:ac:11:00:01", MTU: 1500, Virtual: true},
			// virtio: a device, but not a PCI one in this tree.
			{Name: "eth0", Kind: KindEthernet, NUMANode: -1, OperState: "up", MAC: "06:5e:21:9c:4b:07", MTU: 9001},
		}},
		{"dualport", []NIC{
			{Name: "eth0", Kind: KindEthernet, SpeedMbps: 10000, NUMANode: 0, PCIAddress: "0000:01:00.0", OperState: "up", MAC: "52:54:00:12:34:56", MTU: 1500},
			{Name: "ib0", Kind: KindInfiniBand, HCA: "mlx4_0", Port: 1, SpeedMbps: 56000, NUMANode: 1, PCIAddress: "0000:82:00.0",
				OperState: "up", PortState: "ACTIVE", MAC: "80:00:02:08:fe:80:00:00:00:00:00:00:00:02:c9:03:00:00", MTU: 2044},
			{Name: "ib1", Kind: KindInfiniBand, HCA: "mlx4_0", Port: 2, SpeedMbps: 56000, NUMANode: 1, PCIAddress: "0000:82:00.0",
				OperState: "up", PortState: "ACTIVE", MAC: "80:00:02:08:fe:80:00:00:00:00:00:00:00:02:c9:03:00:01", MTU: 2044},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.root, func(t *testing.T) {
			got, err := Discover(filepath.Join("testdata", tc.root))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Discover (-want +got):\n%s", diff)
			}
		})
	}
}

func TestDiscoverNoNetDir(t *testing.T) {
	_, err := Discover(t.TempDir())
	if err == nil {
		t.Fatal("Discover of an empty tree did not fail")
	}
	if !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("error %v does not wrap fs.ErrNotExist", err)
	}
}

// TestDiscoverSymlinkedDevice builds a tree the way Linux does, with device
// symlinks into /sys/devices, and checks that the PCI address is found by
// resolving the link (here through a virtio child of the PCI function).
func TestDiscoverSymlinkedDevice(t *testing.T) {
	root := t.TempDir()
	pci := filepath.Join(root, "devices", "pci0000:00", "0000:00:05.0")
	virtio := filepath.Join(pci, "virtio3")
	for _, f := range []struct{ path, data string }{
		{filepath.Join(pci, "numa_node"), "1\n"},
		{filepath.Join(virtio, "uevent"), "DRIVER=virtio_net\n"},
		{filepath.Join(virtio, "net", "ens5", "type"), "1\n"},
		{filepath.Join(virtio, "net", "ens5", "operstate"), "up\n"},
	} {
		if err := os.MkdirAll(filepath.Dir(f.path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(f.path, []byte(f.data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	netDir := filepath.Join(root, "class", "net")
	if err := os.MkdirAll(netDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../../devices/pci0000:00/0000:00:05.0/virtio3/net/ens5", filepath.Join(netDir, "ens5")); err != nil {
		t.Skipf("symlinks unavailable: %v", err)
	}
	if err := os.Symlink("../../../virtio3", filepath.Join(virtio, "net", "ens5", "device")); err != nil {
		t.Fatal(err)
	}
	got, err := Discover(root)
	if err != nil {
		t.Fatal(err)
	}
	want := []NIC{{Name: "ens5", Kind: KindEthernet, NUMANode: 1, PCIAddress: "0000:00:05.0", OperState: "up"}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Discover (-want +got):\n%s", diff)
	}
}

// TestDiscoverRealSysfs reads this machine's /sys: it must not fail, and must
// find the same non-loopback interfaces as the kernel's interface list.
func TestDiscoverRealSysfs(t *testing.T) {
	if _, err := os.Stat("/sys/class/net"); err != nil {
		t.Skipf("no /sys/class/net here: %v", err)
	}
	nics, err := Discover("/sys")
	if err != nil {
		t.Fatalf("Discover(/sys): %v", err)
	}
	var got []string
	for _, n := range nics {
		if n.Name != "" {
			got = append(got, n.Name)
		}
	}
	ifaces, err := net.Interfaces()
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, i := range ifaces {
		if i.Flags&net.FlagLoopback == 0 {
			want = append(want, i.Name)
		}
	}
	slices.Sort(want)
	slices.Sort(got)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("netdevs from /sys vs net.Interfaces without loopback (-want +got):\n%s", diff)
	}
	t.Logf("found %d NICs: %v; NCCL %v", len(nics), got, DeriveNCCL(nics).Env())
}

func TestRailsAndNCCL(t *testing.T) {
	tests := []struct {
		root      string
		rails     []string // HCA:port in rail order
		env       []string
		rail1     string
		railNUMAs []int
	}{
		{
			root: "gb200-tray",
			// The 400G InfiniBand ports, not the 200G RoCE front end nor the
			// down port; ordered by NUMA then PCI address, not by name.
			rails:     []string{"mlx5_0:1", "mlx5_2:1", "mlx5_1:1"},
			railNUMAs: []int{0, 0, 1},
			env:       []string{"NCCL_IB_HCA==mlx5_0:1,mlx5_2:1,mlx5_1:1", "NCCL_SOCKET_IFNAME==enP6p1s0f0np0"},
			rail1:     "=mlx5_2:1",
		},
		{
			root: "cloud-vm",
			env:  []string{"NCCL_SOCKET_IFNAME==eth0"},
		},
		{
			root:      "dualport",
			rails:     []string{"mlx4_0:1", "mlx4_0:2"},
			railNUMAs: []int{1, 1},
			env:       []string{"NCCL_IB_HCA==mlx4_0:1,mlx4_0:2", "NCCL_SOCKET_IFNAME==eth0"},
			rail1:     "=mlx4_0:2",
		},
	}
	for _, tc := range tests {
		t.Run(tc.root, func(t *testing.T) {
			nics, err := Discover(filepath.Join("testdata", tc.root))
			if err != nil {
				t.Fatal(err)
			}
			n := DeriveNCCL(nics)
			var rails []string
			var numas []int
			for i, r := range n.Rails {
				if r.Index != i {
					t.Errorf("rail %d has Index %d", i, r.Index)
				}
				rails = append(rails, r.HCAPort())
				numas = append(numas, r.NUMANode)
			}
			if diff := cmp.Diff(tc.rails, rails); diff != "" {
				t.Errorf("rails (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.railNUMAs, numas); diff != "" {
				t.Errorf("rail NUMA nodes (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.env, n.Env()); diff != "" {
				t.Errorf("Env (-want +got):\n%s", diff)
			}
			if got := n.RailHCA(1); got != tc.rail1 {
				t.Errorf("RailHCA(1) = %q, want %q", got, tc.rail1)
			}
			if got := n.RailHCA(len(n.Rails)); got != "" {
				t.Errorf("RailHCA past the end = %q, want \"\"", got)
			}
		})
	}
}

func TestDeriveNCCLTiers(t *testing.T) {
	eth := func(name string, speed int64) NIC {
		return NIC{Name: name, Kind: KindEthernet, OperState: "up", SpeedMbps: speed, NUMANode: -1}
	}
	ipoib := NIC{Name: "ib0", Kind: KindInfiniBand, HCA: "mlx5_0", Port: 1, OperState: "up", PortState: "ACTIVE", SpeedMbps: 400000}
	roce := func(name, hca string) NIC {
		return NIC{Name: name, Kind: KindEthernet, HCA: hca, Port: 1, OperState: "up", PortState: "ACTIVE", SpeedMbps: 400000}
	}
	virt := func(name string) NIC { n := eth(name, 0); n.Virtual = true; return n }
	tests := []struct {
		name string
		nics []NIC
		want string
	}{
		{"management beats IPoIB", []NIC{ipoib, eth("eno1", 1000)}, "=eno1"},
		{"fastest of the tier", []NIC{eth("eno1", 1000), eth("eno2", 100000), eth("eno3", 100000)}, "=eno2,eno3"},
		{"IPoIB when no plain ethernet", []NIC{ipoib, virt("docker0")}, "=ib0"},
		{"RoCE rails when nothing else", []NIC{roce("ens1np0", "mlx5_0"), roce("ens2np0", "mlx5_1")}, "=ens1np0,ens2np0"},
		{"a bond over virtual", []NIC{virt("bond0"), virt("veth9"), virt("docker0")}, "=bond0"},
		{"down interfaces are skipped", []NIC{{Name: "eno1", Kind: KindEthernet, OperState: "down"}, ipoib}, "=ib0"},
		{"only container plumbing", []NIC{virt("veth9"), virt("cni0")}, ""},
		{"nothing", nil, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := DeriveNCCL(tc.nics).SocketIfname; got != tc.want {
				t.Errorf("SocketIfname = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestRailsChoosesTheLargestGroup(t *testing.T) {
	port := func(hca string, kind Kind, speed int64, state string) NIC {
		return NIC{HCA: hca, Port: 1, Kind: kind, SpeedMbps: speed, PortState: state, NUMANode: -1}
	}
	tests := []struct {
		name string
		nics []NIC
		want []string
	}{
		{"more ports win", []NIC{
			port("a", KindEthernet, 200000, "ACTIVE"), port("b", KindEthernet, 200000, "ACTIVE"),
			port("c", KindInfiniBand, 400000, "ACTIVE"),
		}, []string{"a:1", "b:1"}},
		{"tie: faster wins", []NIC{
			port("a", KindEthernet, 200000, "ACTIVE"), port("c", KindEthernet, 400000, "ACTIVE"),
		}, []string{"c:1"}},
		{"tie: infiniband wins", []NIC{
			port("a", KindEthernet, 400000, "ACTIVE"), port("c", KindInfiniBand, 400000, "ACTIVE"),
		}, []string{"c:1"}},
		{"inactive ports never count", []NIC{
			port("a", KindInfiniBand, 400000, "DOWN"), port("b", KindInfiniBand, 400000, "INIT"),
		}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, r := range Rails(tc.nics) {
				got = append(got, r.HCAPort())
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Rails (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParsers(t *testing.T) {
	rates := []struct {
		in   string
		want int64
		ok   bool
	}{
		{"400 Gb/sec (4X NDR)", 400000, true},
		{"2.5 Gb/sec (1X SDR)", 2500, true},
		{"56 Gb/sec (4X FDR)", 56000, true},
		{" 100 Gb/sec (4X EDR)\n", 100000, true},
		{"", 0, false},
		{"fast", 0, false},
		{"100 Mb/sec", 0, false},
		{"-1 Gb/sec", 0, false},
	}
	for _, tc := range rates {
		got, err := ParseRate(tc.in)
		if got != tc.want || (err == nil) != tc.ok {
			t.Errorf("ParseRate(%q) = %d, %v; want %d, ok=%v", tc.in, got, err, tc.want, tc.ok)
		}
	}
	states := []struct {
		in, want string
		ok       bool
	}{
		{"4: ACTIVE", "ACTIVE", true},
		{"1: DOWN", "DOWN", true},
		{"2: INIT", "INIT", true},
		{"ACTIVE", "", false},
		{"x: ACTIVE", "", false},
		{"4:", "", false},
	}
	for _, tc := range states {
		got, err := ParsePortState(tc.in)
		if got != tc.want || (err == nil) != tc.ok {
			t.Errorf("ParsePortState(%q) = %q, %v; want %q, ok=%v", tc.in, got, err, tc.want, tc.ok)
		}
	}
}

func FuzzParseRate(f *testing.F) {
	for _, s := range []string{"400 Gb/sec (4X NDR)", "2.5 Gb/sec (1X SDR)", "", "NaN Gb/sec", "1e400 Gb/sec"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, err := ParseRate(s)
		if err != nil && v != 0 {
			t.Fatalf("ParseRate(%q) = %d with error %v", s, v, err)
		}
		if v < 0 || v > 1e10 {
			t.Fatalf("ParseRate(%q) = %d, out of range", s, v)
		}
	})
}

func FuzzParsePortState(f *testing.F) {
	for _, s := range []string{"4: ACTIVE", "1: DOWN", "", ":", "4:"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		st, err := ParsePortState(s)
		if (err == nil) != (st != "") {
			t.Fatalf("ParsePortState(%q) = %q, %v", s, st, err)
		}
	})
}

func TestGPURails(t *testing.T) {
	rails := func(numas ...int) []Rail {
		out := make([]Rail, len(numas))
		for i, m := range numas {
			out[i] = Rail{Index: i, NUMANode: m}
		}
		return out
	}
	tests := []struct {
		name  string
		numa  []int
		rails []Rail
		want  []int
	}{
		{"one rail per GPU", []int{0, 0, 0, 0, 1, 1, 1, 1}, rails(0, 0, 0, 0, 1, 1, 1, 1), []int{0, 1, 2, 3, 4, 5, 6, 7}},
		{"two GPUs per rail", []int{0, 0, 0, 0, 1, 1, 1, 1}, rails(0, 0, 1, 1), []int{0, 0, 1, 1, 2, 2, 3, 3}},
		{"GB200 tray", []int{0, 0, 1, 1}, rails(0, 0, 1, 1), []int{0, 1, 2, 3}},
		{"rails on one NUMA node only", []int{0, 0, 1, 1}, rails(0, 0), []int{0, 1, 0, 1}},
		{"unknown NUMA spreads over all", []int{-1, -1, -1, -1}, rails(0, 1), []int{0, 0, 1, 1}},
		{"no rails", []int{0, 1}, nil, []int{-1, -1}},
		{"no GPUs", nil, rails(0), []int{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, GPURails(tc.numa, tc.rails)); diff != "" {
				t.Errorf("GPURails (-want +got):\n%s", diff)
			}
		})
	}
}
