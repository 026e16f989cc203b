package gpu

// This file holds the parts of NVML discovery that need no cgo: options,
// the raw facts the cgo code collects, and turning them into devices. The
// split keeps the logic (peers through NVSwitch, NUMA from sysfs, address
// forms) testable on machines without a GPU and without cgo.

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// DefaultNVMLLibrary is the library NewNVML loads unless told otherwise.
const DefaultNVMLLibrary = "libnvidia-ml.so.1"

// NVMLOption configures NewNVML.
type NVMLOption func(*nvmlConfig)

type nvmlConfig struct {
	libraryPath string // passed to dlopen: a name searched on the usual paths, or a path
	sysfsRoot   string // where /sys is mounted
}

func newNVMLConfig(opts []NVMLOption) nvmlConfig {
	c := nvmlConfig{libraryPath: DefaultNVMLLibrary, sysfsRoot: "/sys"}
	for _, o := range opts {
		o(&c)
	}
	return c
}

// WithLibraryPath makes NewNVML load NVML from path (a file name searched
// the way dlopen searches, or a path) instead of DefaultNVMLLibrary.
func WithLibraryPath(path string) NVMLOption {
	return func(c *nvmlConfig) {
		if path != "" {
			c.libraryPath = path
		}
	}
}

// WithSysfsRoot makes NVML discovery read PCI NUMA affinity under dir
// instead of /sys.
func WithSysfsRoot(dir string) NVMLOption {
	return func(c *nvmlConfig) {
		if dir != "" {
			c.sysfsRoot = dir
		}
	}
}

// linkRemote is what sits at the far end of an NVLink.
type linkRemote int

const (
	remoteUnknown linkRemote = iota // NVML could not say
	remoteGPU
	remoteSwitch
	remoteOther // e.g. an IBM NPU: a CPU, not a GPU peer
)

// rawLink is one active NVLink of a device.
type rawLink struct {
	remoteBusID string // as NVML printed it; empty when unknown
	remote      linkRemote
}

// rawDevice is what the cgo code read for one GPU. Fields NVML could not
// give are zero, except numa which is -1.
type rawDevice struct {
	index       int
	uuid        string
	productName string
	memoryBytes int64
	busID       string
	lost        bool
	links       []rawLink // active links only
}

// assemble turns raw NVML facts into devices: canonical model names, NUMA
// nodes from sysfs, and NVLink peers. GPUs reach each other either over a
// direct link (the remote PCI address is the other GPU's) or through
// NVSwitch (the remote is a switch), in which case every GPU attached to a
// switch is a peer of every other one, as on HGX boards.
func assemble(raws []rawDevice, sysfsRoot string) []Device {
	byBus := make(map[string]int, len(raws)) // canonical bus id → position in raws
	for i, r := range raws {
		if b, err := parseBusID(r.busID); err == nil {
			byBus[b.nvml()] = i
		}
	}
	peers := make([]map[int]bool, len(raws)) // positions
	for i := range peers {
		peers[i] = map[int]bool{}
	}
	onSwitch := make([]bool, len(raws))
	for i, r := range raws {
		for _, l := range r.links {
			if l.remote == remoteSwitch {
				onSwitch[i] = true
				continue
			}
			if l.remote == remoteOther {
				continue
			}
			if b, err := parseBusID(l.remoteBusID); err == nil {
				if j, ok := byBus[b.nvml()]; ok {
					if j != i {
						peers[i][j] = true
						peers[j][i] = true
					}
					continue
				}
			}
			// A link whose far end is not a GPU of this node and whose
			// type NVML could not tell is, on every board gangway targets,
			// a link to an NVSwitch.
			if l.remote == remoteUnknown {
				onSwitch[i] = true
			}
		}
	}
	for i := range raws {
		if !onSwitch[i] {
			continue
		}
		for j := range raws {
			if j != i && onSwitch[j] {
				peers[i][j] = true
			}
		}
	}

	devices := make([]Device, 0, len(raws))
	for i, r := range raws {
		d := Device{
			Index:       r.index,
			UUID:        r.uuid,
			Model:       modelFromProductName(r.productName),
			MemoryBytes: r.memoryBytes,
			PCIBusID:    r.busID,
			NUMANode:    -1,
			NVLinkPeers: []int{},
			Health:      HealthOK,
		}
		if r.lost {
			d.Health = HealthLost
		}
		if b, err := parseBusID(r.busID); err == nil {
			d.PCIBusID = b.nvml()
			d.NUMANode = sysfsNUMANode(sysfsRoot, b)
		}
		for j := range peers[i] {
			d.NVLinkPeers = append(d.NVLinkPeers, raws[j].index)
		}
		slices.Sort(d.NVLinkPeers)
		devices = append(devices, d)
	}
	return devices
}

// busID is a PCI address: domain, bus, device, function.
type busID struct {
	domain       uint32
	bus, dev, fn uint8
}

// nvml formats the address the way NVML does: "00000000:18:00.0".
func (b busID) nvml() string {
	return fmt.Sprintf("%08X:%02X:%02X.%X", b.domain, b.bus, b.dev, b.fn)
}

// sysfs formats the address the way /sys/bus/pci/devices names it:
// "0000:18:00.0".
func (b busID) sysfs() string {
	return fmt.Sprintf("%04x:%02x:%02x.%x", b.domain, b.bus, b.dev, b.fn)
}

// parseBusID reads a PCI address in NVML's form ("00000000:18:00.0"), the
// kernel's ("0000:18:00.0") or lspci's short form ("18:00.0"), any case.
func parseBusID(s string) (busID, error) {
	var b busID
	orig := s
	s = strings.TrimSpace(s)
	parts := strings.Split(s, ":")
	switch len(parts) {
	case 2:
		parts = append([]string{"0"}, parts...)
	case 3:
	default:
		return b, fmt.Errorf("pci bus id %q: want domain:bus:device.function", orig)
	}
	devFn := strings.Split(parts[2], ".")
	if len(devFn) != 2 {
		return b, fmt.Errorf("pci bus id %q: want device.function after the second colon", orig)
	}
	fields := []struct {
		name string
		text string
		bits int
	}{
		{"domain", parts[0], 32}, {"bus", parts[1], 8}, {"device", devFn[0], 5}, {"function", devFn[1], 3},
	}
	var vals [4]uint64
	for i, f := range fields {
		if f.text == "" || len(f.text) > 8 {
			return b, fmt.Errorf("pci bus id %q: %s %q: want 1 to 8 hex digits", orig, f.name, f.text)
		}
		v, err := strconv.ParseUint(f.text, 16, 64)
		if err != nil || v >= 1<<f.bits {
			return b, fmt.Errorf("pci bus id %q: %s %q: not a hex number below %d", orig, f.name, f.text, uint64(1)<<f.bits)
		}
		vals[i] = v
	}
	return busID{domain: uint32(vals[0]), bus: uint8(vals[1]), dev: uint8(vals[2]), fn: uint8(vals[3])}, nil
}

// sysfsNUMANode reads the NUMA node the kernel assigns to the PCI device;
// -1 when the file is missing or says -1 (no NUMA information).
//
// NVML's nvmlDeviceGetNumaNodeId is not used: on coherent platforms (Grace
// Hopper) it names the NUMA node of the GPU's own memory, not the host
// node closest to the GPU that CPU pinning needs.
func sysfsNUMANode(root string, b busID) int {
	data, err := os.ReadFile(filepath.Join(root, "bus", "pci", "devices", b.sysfs(), "numa_node"))
	if err != nil {
		return -1
	}
	n, err := parseNUMANode(data)
	if err != nil {
		return -1
	}
	return n
}

var errBadNUMANode = errors.New("numa_node: want an integer ≥ -1")

func parseNUMANode(data []byte) (int, error) {
	n, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil || n < -1 {
		return 0, fmt.Errorf("%w, got %q", errBadNUMANode, data)
	}
	return n, nil
}

// formatCUDAVersion turns NVML's integer CUDA version (12080) into "12.8";
// "" for a version NVML did not give.
func formatCUDAVersion(v int) string {
	if v <= 0 {
		return ""
	}
	return fmt.Sprintf("%d.%d", v/1000, (v%1000)/10)
}

// noDevicesReason words why NVML discovery returned fewer devices than
// it counted, or none, for Inventory.Reason; "" when nothing is missing.
func noDevicesReason(count int, skipped []string) string {
	switch {
	case len(skipped) > 0:
		return fmt.Sprintf("NVML counted %d GPUs; could not read %d: %s", count, len(skipped), strings.Join(skipped, "; "))
	case count == 0:
		return "NVML initialised but reports no GPUs"
	}
	return ""
}
