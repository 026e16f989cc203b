//go:build linux && cgo

package gpu

// The only cgo in gangway. Two rules keep it from taking the agent down:
//
//  1. go-nvml binds NVML's C symbols lazily and ignores unresolved ones at
//     link time, so calling a function the loaded library lacks aborts the
//     process. Before nvml.Init, preflight opens the library privately and
//     checks every symbol discovery always calls; optional ones are checked
//     with LookupSymbol once the library is loaded.
//  2. Any NVML call after a failed Init also kills the process (nothing is
//     initialised behind the symbols). After a failed Init this code calls
//     nothing more, not even Shutdown or ErrorString: initFailure words the
//     return code itself.

import (
	"context"
	"fmt"
	"math"
	"sync"

	"github.com/NVIDIA/go-nvml/pkg/dl"
	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// requiredSymbols are the NVML entry points Discover always calls, under
// the names go-nvml resolves them to on any driver of the last decade.
var requiredSymbols = []string{
	"nvmlInit_v2",
	"nvmlShutdown",
	"nvmlErrorString",
	"nvmlSystemGetDriverVersion",
	"nvmlDeviceGetCount_v2",
	"nvmlDeviceGetHandleByIndex_v2",
	"nvmlDeviceGetUUID",
	"nvmlDeviceGetName",
	"nvmlDeviceGetMemoryInfo",
}

// NewNVML returns a Discoverer that reads the GPUs through NVML. It loads
// nothing until Discover is called, and each Discover initialises NVML,
// reads every device and shuts NVML down again.
//
// Without the NVML library, without the kernel driver, or with a library
// that is not NVML, Discover returns zero GPUs, Source SourceNone and a
// Reason. It returns an error only when NVML initialised and then failed
// to count its devices.
func NewNVML(opts ...NVMLOption) Discoverer {
	cfg := newNVMLConfig(opts)
	return &nvmlDiscoverer{cfg: cfg, lib: nvml.New(nvml.WithLibraryPath(cfg.libraryPath))}
}

type nvmlDiscoverer struct {
	cfg nvmlConfig
	lib nvml.Interface

	mu sync.Mutex // held for a whole Discover: one Init/Shutdown pair at a time
}

func (n *nvmlDiscoverer) Discover(ctx context.Context) (Inventory, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if err := ctx.Err(); err != nil {
		return Inventory{}, err
	}
	none := Inventory{Devices: []Device{}, Source: SourceNone}
	if reason := preflight(n.cfg.libraryPath); reason != "" {
		none.Reason = reason
		return none, nil
	}
	if ret := n.lib.Init(); ret != nvml.SUCCESS {
		// Rule 2: no NVML call from here on.
		none.Reason = initFailure(n.cfg.libraryPath, ret)
		return none, nil
	}
	defer n.lib.Shutdown()

	inv := Inventory{Devices: []Device{}, Source: SourceNVML}
	if v, ret := n.lib.SystemGetDriverVersion(); ret == nvml.SUCCESS {
		inv.Driver = v
	}
	if n.has("nvmlSystemGetCudaDriverVersion") {
		if v, ret := n.lib.SystemGetCudaDriverVersion(); ret == nvml.SUCCESS {
			inv.CUDA = formatCUDAVersion(v)
		}
	}
	count, ret := n.lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return Inventory{}, fmt.Errorf("nvml: count devices: %s", ret.Error())
	}
	links := linkQueries{
		state:      n.has("nvmlDeviceGetNvLinkState"),
		remotePCI:  n.has("nvmlDeviceGetNvLinkRemotePciInfo_v2") || n.has("nvmlDeviceGetNvLinkRemotePciInfo"),
		remoteType: n.has("nvmlDeviceGetNvLinkRemoteDeviceType"),
	}
	var raws []rawDevice
	var skipped []string
	for i := range count {
		if err := ctx.Err(); err != nil {
			return Inventory{}, err
		}
		r, problem := n.readDevice(i, links)
		if problem != "" {
			skipped = append(skipped, problem)
			continue
		}
		raws = append(raws, r)
	}
	inv.Devices = assemble(raws, n.cfg.sysfsRoot)
	inv.Reason = noDevicesReason(count, skipped)
	return inv, nil
}

// has reports whether the loaded library exports symbol. Call it only
// between a successful Init and Shutdown.
func (n *nvmlDiscoverer) has(symbol string) bool {
	return n.lib.Extensions().LookupSymbol(symbol) == nil
}

type linkQueries struct {
	state, remotePCI, remoteType bool
}

// readDevice reads GPU i. A GPU whose handle or UUID cannot be read is
// skipped with a problem; any other field NVML refuses is left unknown.
func (n *nvmlDiscoverer) readDevice(i int, q linkQueries) (rawDevice, string) {
	dev, ret := n.lib.DeviceGetHandleByIndex(i)
	if ret != nvml.SUCCESS {
		return rawDevice{}, fmt.Sprintf("GPU %d: get handle: %s", i, ret.Error())
	}
	uuid, ret := dev.GetUUID()
	if ret != nvml.SUCCESS {
		return rawDevice{}, fmt.Sprintf("GPU %d: get UUID: %s", i, ret.Error())
	}
	r := rawDevice{index: i, uuid: uuid}
	note := func(ret nvml.Return) bool {
		if ret == nvml.ERROR_GPU_IS_LOST {
			r.lost = true
		}
		return ret == nvml.SUCCESS
	}
	if name, ret := dev.GetName(); note(ret) {
		r.productName = name
	}
	if mem, ret := dev.GetMemoryInfo(); note(ret) {
		r.memoryBytes = int64(mem.Total)
	}
	if pci, ret := dev.GetPciInfo(); note(ret) {
		r.busID = cString(pci.BusId[:])
	}
	if !q.state {
		return r, ""
	}
	for link := range nvml.NVLINK_MAX_LINKS {
		state, ret := dev.GetNvLinkState(link)
		if !note(ret) || state != nvml.FEATURE_ENABLED {
			// Links past the GPU's count answer INVALID_ARGUMENT, GPUs
			// without NVLink NOT_SUPPORTED; neither is a fault.
			continue
		}
		l := rawLink{remote: remoteUnknown}
		if q.remotePCI {
			if pci, ret := dev.GetNvLinkRemotePciInfo(link); note(ret) {
				l.remoteBusID = cString(pci.BusId[:])
			}
		}
		if q.remoteType {
			if t, ret := dev.GetNvLinkRemoteDeviceType(link); note(ret) {
				switch t {
				case nvml.NVLINK_DEVICE_TYPE_GPU:
					l.remote = remoteGPU
				case nvml.NVLINK_DEVICE_TYPE_SWITCH:
					l.remote = remoteSwitch
				case nvml.NVLINK_DEVICE_TYPE_IBMNPU:
					l.remote = remoteOther
				}
			}
		}
		r.links = append(r.links, l)
	}
	return r, ""
}

// preflight opens the library on its own, with local symbol binding, and
// checks it exports what Discover calls. It returns "" when Init may be
// called, or the reason it may not.
func preflight(path string) string {
	lib := dl.New(path, dl.RTLD_LAZY|dl.RTLD_LOCAL)
	if err := lib.Open(); err != nil {
		return fmt.Sprintf("NVML library %s could not be loaded (no NVIDIA driver installed?): %v", path, err)
	}
	defer lib.Close()
	for _, s := range requiredSymbols {
		if err := lib.Lookup(s); err != nil {
			return fmt.Sprintf("NVML library %s lacks %s: not NVML, or a driver too old", path, s)
		}
	}
	return ""
}

// initFailure words a failed nvml.Init without calling into NVML.
func initFailure(path string, ret nvml.Return) string {
	switch ret {
	case nvml.ERROR_LIBRARY_NOT_FOUND:
		return fmt.Sprintf("NVML library %s not found (no NVIDIA driver installed?)", path)
	case nvml.ERROR_DRIVER_NOT_LOADED:
		return "NVML: the NVIDIA kernel driver is not loaded"
	case nvml.ERROR_NO_PERMISSION:
		return "NVML: no permission to open the NVIDIA device files"
	case nvml.ERROR_LIB_RM_VERSION_MISMATCH:
		return "NVML: library and kernel driver versions differ (reboot or reload the driver)"
	case nvml.ERROR_FUNCTION_NOT_FOUND:
		return fmt.Sprintf("NVML library %s lacks a function gangway needs", path)
	}
	return fmt.Sprintf("NVML init failed with return code %d", int32(ret))
}

// cString turns NVML's NUL-terminated char array into a string.
func cString(b []int8) string {
	out := make([]byte, 0, len(b))
	for _, c := range b {
		if c == 0 {
			break
		}
		out = append(out, byte(c))
	}
	return string(out)
}

var _ Sampler = (*nvmlDiscoverer)(nil)

// Sample implements Sampler: it initialises NVML, reads each device's
// utilisation, memory, temperature, power, SM clock and volatile
// double-bit ECC count, and shuts NVML down. busy is ignored: the device
// says. Each optional call is made only when the library exports it
// (rule 1); what a device or library cannot say is NaN. Xid errors and
// NVLink traffic need NVML events and field values and are NaN for now
// (the health checks watch Xids). Without NVML it returns no readings.
func (n *nvmlDiscoverer) Sample(ctx context.Context, _ func(int) bool) ([]Telemetry, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if preflight(n.cfg.libraryPath) != "" {
		return nil, nil
	}
	if ret := n.lib.Init(); ret != nvml.SUCCESS {
		return nil, nil // rule 2: no NVML call from here on
	}
	defer n.lib.Shutdown()
	has := map[string]bool{}
	for _, s := range []string{"nvmlDeviceGetUtilizationRates", "nvmlDeviceGetTemperature", "nvmlDeviceGetPowerUsage",
		"nvmlDeviceGetClockInfo", "nvmlDeviceGetTotalEccErrors"} {
		has[s] = n.has(s)
	}
	count, ret := n.lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("nvml: count devices: %s", ret.Error())
	}
	nan := math.NaN()
	var out []Telemetry
	for i := range count {
		dev, ret := n.lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			continue
		}
		uuid, ret := dev.GetUUID()
		if ret != nvml.SUCCESS {
			continue
		}
		t := Telemetry{Index: i, UUID: uuid, UtilPercent: nan, FBUsedMiB: nan, FBFreeMiB: nan, TempC: nan, PowerW: nan,
			SMClockMHz: nan, LastXid: nan, ECCDBEVolTotal: nan, NVLinkBandwidthTotal: nan}
		if name, ret := dev.GetName(); ret == nvml.SUCCESS {
			if m, ok := CanonicalModel(name); ok {
				t.Model = m
			} else {
				t.Model = name
			}
		}
		if mem, ret := dev.GetMemoryInfo(); ret == nvml.SUCCESS {
			t.FBUsedMiB, t.FBFreeMiB = float64(mem.Used)/(1<<20), float64(mem.Free)/(1<<20)
		}
		if has["nvmlDeviceGetUtilizationRates"] {
			if u, ret := dev.GetUtilizationRates(); ret == nvml.SUCCESS {
				t.UtilPercent = float64(u.Gpu)
			}
		}
		if has["nvmlDeviceGetTemperature"] {
			if v, ret := dev.GetTemperature(nvml.TEMPERATURE_GPU); ret == nvml.SUCCESS {
				t.TempC = float64(v)
			}
		}
		if has["nvmlDeviceGetPowerUsage"] {
			if v, ret := dev.GetPowerUsage(); ret == nvml.SUCCESS {
				t.PowerW = float64(v) / 1000 // mW
			}
		}
		if has["nvmlDeviceGetClockInfo"] {
			if v, ret := dev.GetClockInfo(nvml.CLOCK_SM); ret == nvml.SUCCESS {
				t.SMClockMHz = float64(v)
			}
		}
		if has["nvmlDeviceGetTotalEccErrors"] {
			if v, ret := dev.GetTotalEccErrors(nvml.MEMORY_ERROR_TYPE_UNCORRECTED, nvml.VOLATILE_ECC); ret == nvml.SUCCESS {
				t.ECCDBEVolTotal = float64(v)
			}
		}
		out = append(out, t)
	}
	return out, nil
}
