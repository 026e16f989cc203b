// Package nic discovers a node's network interfaces and RDMA ports from
// sysfs (/sys/class/net and /sys/class/infiniband), and derives the NCCL
// settings a rank on the node should get: NCCL_SOCKET_IFNAME and
// NCCL_IB_HCA, with one HCA per network rail.
//
// Discovery reads files only; the sysfs root is a parameter, so tests run on
// captured or written-by-hand trees under testdata/.
//
// It imports only the standard library.
package nic

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// Kind is a link's layer: what kind of network the NIC is on.
type Kind string

const (
	// KindEthernet: an Ethernet netdev, or an RDMA port whose link layer is
	// Ethernet (RoCE).
	KindEthernet Kind = "ethernet"
	// KindInfiniBand: an InfiniBand RDMA port, or an IPoIB netdev.
	KindInfiniBand Kind = "infiniband"
	// KindOther: any other netdev type (tunnels, ...).
	KindOther Kind = "other"
)

// NIC is one network interface: a netdev, an RDMA port, or both when the
// netdev sits on the RDMA port (IPoIB, RoCE).
type NIC struct {
	// Name is the netdev name ("ib0", "eno1"), or "" for an RDMA port
	// without a netdev.
	Name string
	Kind Kind
	// HCA is the RDMA device ("mlx5_0"), or "" when the NIC has none.
	HCA string
	// Port is the RDMA port number (from 1), or 0 when HCA is "".
	Port int
	// SpeedMbps is the link speed in Mb/s (the RDMA port's rate when there is
	// one, else the netdev's speed), or 0 when unknown or down.
	SpeedMbps int64
	// NUMANode is the NUMA node of the NIC's PCI device, or -1 when unknown.
	NUMANode int
	// PCIAddress is the PCI device's address ("0000:17:00.0"), or "" for a
	// virtual interface or a device not on PCI.
	PCIAddress string
	// OperState is the netdev's operstate ("up", "down", "unknown", ...),
	// or "" without a netdev.
	OperState string
	// PortState is the RDMA port's state ("ACTIVE", "DOWN", "INIT", ...), or
	// "" without an HCA.
	PortState string
	// MAC is the netdev's hardware address.
	MAC string
	// MTU is the netdev's MTU in bytes, or 0 when unknown.
	MTU int
	// Virtual is true for a netdev with no device behind it (bridges, veth,
	// docker0, bonds).
	Virtual bool
}

// Up reports whether the NIC can carry traffic: its RDMA port is ACTIVE, or,
// without an HCA, its netdev's operstate is "up".
func (n NIC) Up() bool {
	if n.HCA != "" {
		return n.PortState == "ACTIVE"
	}
	return n.OperState == "up"
}

// ARPHRD types from <linux/if_arp.h>, as /sys/class/net/*/type shows them.
const (
	arphrdEther      = 1
	arphrdInfiniBand = 32
	arphrdLoopback   = 772
	iffLoopback      = 0x8
)

// Discover lists the NICs under the sysfs mounted at sysRoot ("/sys" on a
// real node), loopback excluded, sorted by netdev name with RDMA ports that
// have no netdev last (by HCA and port). A missing /class/infiniband means no
// RDMA ports; a missing /class/net is an error. Files that cannot be read or
// parsed leave their field unknown, as sysfs refuses some reads (a down
// link's speed).
func Discover(sysRoot string) ([]NIC, error) {
	netDir := filepath.Join(sysRoot, "class", "net")
	entries, err := os.ReadDir(netDir)
	if err != nil {
		return nil, fmt.Errorf("discover NICs: %w", err)
	}
	var nics []NIC
	for _, e := range entries {
		dir := filepath.Join(netDir, e.Name())
		typ, _ := readInt(filepath.Join(dir, "type"))
		flags, _ := readHex(filepath.Join(dir, "flags"))
		if typ == arphrdLoopback || flags&iffLoopback != 0 {
			continue
		}
		n := NIC{
			Name:      e.Name(),
			OperState: readString(filepath.Join(dir, "operstate")),
			MAC:       readString(filepath.Join(dir, "address")),
			NUMANode:  -1,
		}
		switch typ {
		case arphrdEther:
			n.Kind = KindEthernet
		case arphrdInfiniBand:
			n.Kind = KindInfiniBand
		default:
			n.Kind = KindOther
		}
		if mtu, ok := readInt(filepath.Join(dir, "mtu")); ok {
			n.MTU = mtu
		}
		if speed, ok := readInt(filepath.Join(dir, "speed")); ok && speed > 0 {
			n.SpeedMbps = int64(speed)
		}
		dev := filepath.Join(dir, "device")
		if !exists(dev) {
			n.Virtual = true
			nics = append(nics, n)
			continue
		}
		n.PCIAddress, n.NUMANode = pciInfo(sysRoot, dev)
		// The RDMA device on the same PCI function, and which of its ports
		// this netdev is (dev_port counts from 0).
		if hcas, err := os.ReadDir(filepath.Join(dev, "infiniband")); err == nil && len(hcas) > 0 {
			n.HCA = hcas[0].Name()
			port, _ := readInt(filepath.Join(dir, "dev_port"))
			n.Port = port + 1
		}
		nics = append(nics, n)
	}

	ibDir := filepath.Join(sysRoot, "class", "infiniband")
	hcas, err := os.ReadDir(ibDir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("discover RDMA devices: %w", err)
	}
	for _, h := range hcas {
		dir := filepath.Join(ibDir, h.Name())
		pci, numa := pciInfo(sysRoot, filepath.Join(dir, "device"))
		ports, err := os.ReadDir(filepath.Join(dir, "ports"))
		if err != nil {
			continue
		}
		for _, p := range ports {
			num, err := strconv.Atoi(p.Name())
			if err != nil || num < 1 {
				continue
			}
			pdir := filepath.Join(dir, "ports", p.Name())
			state, _ := ParsePortState(readString(filepath.Join(pdir, "state")))
			rate, _ := ParseRate(readString(filepath.Join(pdir, "rate")))
			kind := KindInfiniBand
			if strings.EqualFold(readString(filepath.Join(pdir, "link_layer")), "Ethernet") {
				kind = KindEthernet
			}
			i := slices.IndexFunc(nics, func(n NIC) bool { return n.HCA == h.Name() && n.Port == num })
			if i < 0 {
				nics = append(nics, NIC{HCA: h.Name(), Port: num, NUMANode: numa, PCIAddress: pci})
				i = len(nics) - 1
			}
			n := &nics[i]
			n.Kind, n.PortState = kind, state
			if rate > 0 {
				n.SpeedMbps = rate
			}
			if n.PCIAddress == "" {
				n.PCIAddress, n.NUMANode = pci, numa
			}
		}
	}
	slices.SortFunc(nics, func(a, b NIC) int {
		if (a.Name == "") != (b.Name == "") {
			if a.Name == "" {
				return 1
			}
			return -1
		}
		if c := strings.Compare(a.Name, b.Name); c != 0 {
			return c
		}
		if c := strings.Compare(a.HCA, b.HCA); c != 0 {
			return c
		}
		return a.Port - b.Port
	})
	return nics, nil
}

var pciAddr = regexp.MustCompile(`^[0-9a-fA-F]{4,}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$`)

// pciInfo finds the PCI device behind a sysfs device link: the nearest
// enclosing directory named like a PCI address once the link is resolved
// (a virtio NIC's device is virtioN under its PCI function), or, in trees
// where device is a plain directory, the PCI_SLOT_NAME in its uevent. The
// NUMA node comes from that PCI device's numa_node (-1 if unknown).
func pciInfo(sysRoot, dev string) (addr string, numa int) {
	if real, err := filepath.EvalSymlinks(dev); err == nil {
		root, _ := filepath.EvalSymlinks(sysRoot)
		for p := real; p != root && len(p) > len(root) && p != filepath.Dir(p); p = filepath.Dir(p) {
			if pciAddr.MatchString(filepath.Base(p)) {
				return strings.ToLower(filepath.Base(p)), numaOf(p)
			}
		}
	}
	slot := ueventField(filepath.Join(dev, "uevent"), "PCI_SLOT_NAME")
	if !pciAddr.MatchString(slot) {
		slot = ""
	}
	return strings.ToLower(slot), numaOf(dev)
}

func numaOf(dir string) int {
	if v, ok := readInt(filepath.Join(dir, "numa_node")); ok && v >= 0 {
		return v
	}
	return -1
}

// ueventField returns KEY's value from a uevent file of KEY=VALUE lines.
func ueventField(path, key string) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	for line := range strings.Lines(string(data)) {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), "="); ok && k == key {
			return v
		}
	}
	return ""
}

// ParsePortState parses an RDMA port's state file: "4: ACTIVE" gives
// "ACTIVE".
func ParsePortState(s string) (string, error) {
	num, name, ok := strings.Cut(s, ":")
	name = strings.TrimSpace(name)
	if _, err := strconv.Atoi(strings.TrimSpace(num)); !ok || err != nil || name == "" {
		return "", fmt.Errorf("port state %q: want \"N: NAME\"", s)
	}
	return name, nil
}

// ParseRate parses an RDMA port's rate file, "400 Gb/sec (4X NDR)" or
// "2.5 Gb/sec (1X SDR)", into Mb/s.
func ParseRate(s string) (int64, error) {
	num, rest, ok := strings.Cut(strings.TrimSpace(s), " ")
	if !ok || !strings.HasPrefix(rest, "Gb/sec") {
		return 0, fmt.Errorf("rate %q: want \"N Gb/sec ...\"", s)
	}
	v, err := strconv.ParseFloat(num, 64)
	if err != nil || !(v >= 0 && v <= 1e7) { // also refuses NaN
		return 0, fmt.Errorf("rate %q: bad number %q", s, num)
	}
	return int64(v*1000 + 0.5), nil
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

func readString(path string) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(data))
}

func readInt(path string) (int, bool) {
	v, err := strconv.Atoi(readString(path))
	return v, err == nil
}

func readHex(path string) (int64, bool) {
	s := strings.TrimPrefix(readString(path), "0x")
	v, err := strconv.ParseInt(s, 16, 64)
	return v, err == nil
}
