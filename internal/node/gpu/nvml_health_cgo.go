//go:build linux && cgo

package gpu

// The health checks' readings through NVML. The two rules at the top of
// nvml_cgo.go hold here too: preflight checks the symbols every reading
// needs before Init, each optional symbol is looked up once after Init
// (a missing one reads as NOT_SUPPORTED), and nothing is called after a
// failed Init or after Close.

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gangway/gangway/internal/node/health/gpucheck"
	"github.com/gangway/gangway/internal/node/health/xid"
)

// NVMLHealth reads the GPUs' health through NVML: it is a
// gpucheck.Provider for the ecc, thermal, power, nvlink and pcie checks,
// and [NVMLHealth.Events] is an xid.Source on NVML's event set. It holds
// NVML initialised from OpenNVMLHealth to Close.
//
// A reading NVML answers NOT_SUPPORTED (or whose function the loaded
// library lacks) is left zero, which the checks read as unknown; any
// other failure is an error, which makes that GPU's finding Status error.
//
// It is safe for concurrent use.
type NVMLHealth struct {
	lib  nvml.Interface
	devs []nvml.Device  // by NVML index; nil where no handle could be had
	idx  map[string]int // UUID → index, for events
	sym  healthSymbols

	mu     sync.RWMutex // readers hold it shared across their NVML calls, Close exclusively
	closed bool
	set    nvml.EventSet // nil when no GPU takes Xid events
}

// healthSymbols says which optional NVML functions the library exports.
type healthSymbols struct {
	ecc, remap                  bool
	temp, threshold             bool
	clocksEvent, clocksThrottle bool
	power, limit                bool
	linkState, linkErrors       bool
	pcie                        bool
	events                      bool
}

// ErrNVMLClosed is returned by readings after Close.
var ErrNVMLClosed = errors.New("nvml: health reader closed")

// OpenNVMLHealth initialises NVML (loaded from the path WithLibraryPath
// names) and looks up every GPU. Without a usable NVML (no library, no
// driver, a library that is not NVML) it returns an error saying why and
// has called nothing that could abort the process.
func OpenNVMLHealth(opts ...NVMLOption) (*NVMLHealth, error) {
	cfg := newNVMLConfig(opts)
	if reason := preflight(cfg.libraryPath); reason != "" {
		return nil, errors.New(reason)
	}
	return openNVMLHealth(nvml.New(nvml.WithLibraryPath(cfg.libraryPath)), cfg.libraryPath)
}

// openNVMLHealth is OpenNVMLHealth past the preflight, on lib loaded
// from path.
func openNVMLHealth(lib nvml.Interface, path string) (*NVMLHealth, error) {
	if ret := lib.Init(); ret != nvml.SUCCESS {
		// Rule 2: no NVML call from here on.
		return nil, errors.New(initFailure(path, ret))
	}
	h := &NVMLHealth{lib: lib, idx: map[string]int{}}
	ext := lib.Extensions()
	has := func(names ...string) bool {
		for _, n := range names {
			if ext.LookupSymbol(n) == nil {
				return true
			}
		}
		return false
	}
	h.sym = healthSymbols{
		ecc:            has("nvmlDeviceGetTotalEccErrors"),
		remap:          has("nvmlDeviceGetRemappedRows"),
		temp:           has("nvmlDeviceGetTemperature"),
		threshold:      has("nvmlDeviceGetTemperatureThreshold"),
		clocksEvent:    has("nvmlDeviceGetCurrentClocksEventReasons"),
		clocksThrottle: has("nvmlDeviceGetCurrentClocksThrottleReasons"),
		power:          has("nvmlDeviceGetPowerUsage"),
		limit:          has("nvmlDeviceGetEnforcedPowerLimit"),
		linkState:      has("nvmlDeviceGetNvLinkState"),
		linkErrors:     has("nvmlDeviceGetNvLinkErrorCounter"),
		pcie: has("nvmlDeviceGetCurrPcieLinkGeneration") && has("nvmlDeviceGetMaxPcieLinkGeneration") &&
			has("nvmlDeviceGetCurrPcieLinkWidth") && has("nvmlDeviceGetMaxPcieLinkWidth"),
		events: has("nvmlEventSetCreate") && has("nvmlEventSetFree") && has("nvmlDeviceRegisterEvents") &&
			has("nvmlDeviceGetSupportedEventTypes") && has("nvmlEventSetWait_v2", "nvmlEventSetWait"),
	}
	count, ret := lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		lib.Shutdown()
		return nil, fmt.Errorf("nvml: count devices: %s", ret.Error())
	}
	h.devs = make([]nvml.Device, count)
	for i := range count {
		dev, ret := lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			continue // its readings fail, each saying so
		}
		h.devs[i] = dev
		if uuid, ret := dev.GetUUID(); ret == nvml.SUCCESS {
			h.idx[uuid] = i
		}
	}
	if h.sym.events {
		h.set = h.registerXidEvents()
	}
	return h, nil
}

// registerXidEvents makes an event set of every GPU that reports Xids;
// nil when none does.
//
// Only Xid events are taken. NVML's ECC events are left out: a double-bit
// error also raises Xid 48, and the ecc check reads the ECC counters,
// so an ECC event would count the same error twice.
func (h *NVMLHealth) registerXidEvents() nvml.EventSet {
	set, ret := h.lib.EventSetCreate()
	if ret != nvml.SUCCESS {
		return nil
	}
	registered := 0
	for _, dev := range h.devs {
		if dev == nil {
			continue
		}
		supported, ret := dev.GetSupportedEventTypes()
		if ret != nvml.SUCCESS || supported&nvml.EventTypeXidCriticalError == 0 {
			continue
		}
		if dev.RegisterEvents(nvml.EventTypeXidCriticalError, set) == nvml.SUCCESS {
			registered++
		}
	}
	if registered == 0 {
		set.Free()
		return nil
	}
	return set
}

// Close frees the event set and shuts NVML down, once the readings in
// flight have returned. Later readings return ErrNVMLClosed.
func (h *NVMLHealth) Close() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil
	}
	h.closed = true
	var errs []error
	if h.set != nil {
		if ret := h.set.Free(); ret != nvml.SUCCESS {
			errs = append(errs, fmt.Errorf("nvml: free event set: %s", ret.Error()))
		}
		h.set = nil
	}
	if ret := h.lib.Shutdown(); ret != nvml.SUCCESS {
		errs = append(errs, fmt.Errorf("nvml: shutdown: %s", ret.Error()))
	}
	return errors.Join(errs...)
}

// GPUs returns how many GPUs NVML counted at open.
func (h *NVMLHealth) GPUs() int { return len(h.devs) }

// device returns GPU i's handle with h.mu held shared; the caller calls
// the returned unlock once done with NVML.
func (h *NVMLHealth) device(ctx context.Context, i int) (nvml.Device, func(), error) {
	if err := ctx.Err(); err != nil {
		return nil, nil, err
	}
	h.mu.RLock()
	switch {
	case h.closed:
		h.mu.RUnlock()
		return nil, nil, ErrNVMLClosed
	case i < 0 || i >= len(h.devs):
		h.mu.RUnlock()
		return nil, nil, fmt.Errorf("nvml: no GPU %d (NVML counted %d)", i, len(h.devs))
	case h.devs[i] == nil:
		h.mu.RUnlock()
		return nil, nil, fmt.Errorf("nvml: GPU %d: no device handle", i)
	}
	return h.devs[i], h.mu.RUnlock, nil
}

// optional reads one value: ok false with a nil error when NVML does not
// support it here.
func optional(what string, ret nvml.Return) (ok bool, err error) {
	switch ret {
	case nvml.SUCCESS:
		return true, nil
	case nvml.ERROR_NOT_SUPPORTED:
		return false, nil
	}
	return false, fmt.Errorf("nvml: %s: %s", what, ret.Error())
}

// ECC reads the volatile and aggregate ECC counts and the row remapper's
// state. A GPU with ECC off, or without row remapping (before Ampere),
// answers zero for those.
func (h *NVMLHealth) ECC(ctx context.Context, gpu int) (gpucheck.ECC, error) {
	dev, unlock, err := h.device(ctx, gpu)
	if err != nil {
		return gpucheck.ECC{}, err
	}
	defer unlock()
	var e gpucheck.ECC
	if h.sym.ecc {
		for _, c := range []struct {
			dst   *uint64
			typ   nvml.MemoryErrorType
			count nvml.EccCounterType
			what  string
		}{
			{&e.VolatileSBE, nvml.MEMORY_ERROR_TYPE_CORRECTED, nvml.VOLATILE_ECC, "volatile corrected ECC errors"},
			{&e.VolatileDBE, nvml.MEMORY_ERROR_TYPE_UNCORRECTED, nvml.VOLATILE_ECC, "volatile uncorrected ECC errors"},
			{&e.AggregateSBE, nvml.MEMORY_ERROR_TYPE_CORRECTED, nvml.AGGREGATE_ECC, "aggregate corrected ECC errors"},
			{&e.AggregateDBE, nvml.MEMORY_ERROR_TYPE_UNCORRECTED, nvml.AGGREGATE_ECC, "aggregate uncorrected ECC errors"},
		} {
			v, ret := dev.GetTotalEccErrors(c.typ, c.count)
			if ok, err := optional(c.what, ret); err != nil {
				return gpucheck.ECC{}, err
			} else if ok {
				*c.dst = v
			}
		}
	}
	if h.sym.remap {
		_, _, pending, failure, ret := dev.GetRemappedRows()
		if ok, err := optional("remapped rows", ret); err != nil {
			return gpucheck.ECC{}, err
		} else if ok {
			e.RemapPending, e.RemapFailure = pending, failure
		}
	}
	return e, nil
}

// Thermal reads the core temperature, the slowdown threshold and the
// clocks event reasons (the throttle reasons, under their pre-535 name,
// on drivers that lack the newer function: the bits are the same).
func (h *NVMLHealth) Thermal(ctx context.Context, gpu int) (gpucheck.Thermal, error) {
	dev, unlock, err := h.device(ctx, gpu)
	if err != nil {
		return gpucheck.Thermal{}, err
	}
	defer unlock()
	var th gpucheck.Thermal
	if h.sym.temp {
		v, ret := dev.GetTemperature(nvml.TEMPERATURE_GPU)
		if ok, err := optional("temperature", ret); err != nil {
			return gpucheck.Thermal{}, err
		} else if ok {
			th.TempC = int(v)
		}
	}
	if h.sym.threshold {
		v, ret := dev.GetTemperatureThreshold(nvml.TEMPERATURE_THRESHOLD_SLOWDOWN)
		if ok, err := optional("slowdown temperature", ret); err != nil {
			return gpucheck.Thermal{}, err
		} else if ok {
			th.SlowdownC = int(v)
		}
	}
	var reasons uint64
	ret := nvml.ERROR_NOT_SUPPORTED
	switch {
	case h.sym.clocksEvent:
		reasons, ret = dev.GetCurrentClocksEventReasons()
	case h.sym.clocksThrottle:
		reasons, ret = dev.GetCurrentClocksThrottleReasons()
	}
	if ok, err := optional("clocks event reasons", ret); err != nil {
		return gpucheck.Thermal{}, err
	} else if ok {
		th.Throttle = reasons
	}
	return th, nil
}

// Power reads the draw and the enforced limit, in milliwatts as NVML
// gives them.
func (h *NVMLHealth) Power(ctx context.Context, gpu int) (gpucheck.Power, error) {
	dev, unlock, err := h.device(ctx, gpu)
	if err != nil {
		return gpucheck.Power{}, err
	}
	defer unlock()
	var p gpucheck.Power
	if h.sym.power {
		v, ret := dev.GetPowerUsage()
		if ok, err := optional("power usage", ret); err != nil {
			return gpucheck.Power{}, err
		} else if ok {
			p.DrawMilliwatts = int64(v)
		}
	}
	if h.sym.limit {
		v, ret := dev.GetEnforcedPowerLimit()
		if ok, err := optional("enforced power limit", ret); err != nil {
			return gpucheck.Power{}, err
		} else if ok {
			p.LimitMilliwatts = int64(v)
		}
	}
	return p, nil
}

// nvlinkErrorCounters are summed into Link.Errors.
var nvlinkErrorCounters = []nvml.NvLinkErrorCounter{
	nvml.NVLINK_ERROR_DL_CRC_FLIT, nvml.NVLINK_ERROR_DL_CRC_DATA, nvml.NVLINK_ERROR_DL_REPLAY, nvml.NVLINK_ERROR_DL_RECOVERY,
}

// NVLinks reads the state of every link the GPU has and, for the links
// that are up, the sum of their error counters. A link past the GPU's
// count answers INVALID_ARGUMENT and a GPU without NVLink NOT_SUPPORTED;
// such links are skipped, not ended at, as discovery does, so that a gap
// in the numbering hides no link. A link that is down has no counters
// read: they say nothing while it carries no traffic.
func (h *NVMLHealth) NVLinks(ctx context.Context, gpu int) ([]gpucheck.Link, error) {
	dev, unlock, err := h.device(ctx, gpu)
	if err != nil {
		return nil, err
	}
	defer unlock()
	if !h.sym.linkState {
		return nil, nil
	}
	var links []gpucheck.Link
	for i := range nvml.NVLINK_MAX_LINKS {
		state, ret := dev.GetNvLinkState(i)
		switch ret {
		case nvml.SUCCESS:
		case nvml.ERROR_NOT_SUPPORTED, nvml.ERROR_INVALID_ARGUMENT:
			continue
		default:
			return nil, fmt.Errorf("nvml: NVLink %d state: %s", i, ret.Error())
		}
		l := gpucheck.Link{Index: i, Up: state == nvml.FEATURE_ENABLED}
		if l.Up && h.sym.linkErrors {
			for _, c := range nvlinkErrorCounters {
				v, ret := dev.GetNvLinkErrorCounter(i, c)
				if ok, err := optional(fmt.Sprintf("NVLink %d error counter %d", i, c), ret); err != nil {
					return nil, err
				} else if ok {
					l.Errors += v
				}
			}
		}
		links = append(links, l)
	}
	return links, nil
}

// PCIe reads the link's generation and width, now and at most.
func (h *NVMLHealth) PCIe(ctx context.Context, gpu int) (gpucheck.PCIe, error) {
	dev, unlock, err := h.device(ctx, gpu)
	if err != nil {
		return gpucheck.PCIe{}, err
	}
	defer unlock()
	var p gpucheck.PCIe
	if !h.sym.pcie {
		return p, nil
	}
	for _, r := range []struct {
		dst  *int
		read func() (int, nvml.Return)
		what string
	}{
		{&p.Gen, dev.GetCurrPcieLinkGeneration, "PCIe generation"},
		{&p.MaxGen, dev.GetMaxPcieLinkGeneration, "max PCIe generation"},
		{&p.Width, dev.GetCurrPcieLinkWidth, "PCIe width"},
		{&p.MaxWidth, dev.GetMaxPcieLinkWidth, "max PCIe width"},
	} {
		v, ret := r.read()
		if ok, err := optional(r.what, ret); err != nil {
			return gpucheck.PCIe{}, err
		} else if ok {
			*r.dst = v
		}
	}
	return p, nil
}

// Events returns the Xid source on NVML's event set, or nil when no GPU
// reports Xid events (or the library lacks the event functions).
func (h *NVMLHealth) Events() xid.Source {
	h.mu.RLock()
	defer h.mu.RUnlock()
	if h.set == nil {
		return nil
	}
	return nvmlEvents{h}
}

// Bounds on one Read of the event set: each wait is short, since Read
// must not hold the Xid check, and an Xid storm ends at maxEvents.
const (
	eventWaitMillis = 10
	maxEvents       = 10000
)

// nvmlEvents is the xid.Source on h's event set. It has no Close: the
// set is h's, freed by h.Close.
type nvmlEvents struct{ h *NVMLHealth }

// Read takes the Xid events NVML queued since the last Read, waiting
// eventWaitMillis for each; ERROR_TIMEOUT means the queue is empty. An
// event whose GPU cannot be named comes with GPU -1, which the Xid
// check counts on the node.
func (s nvmlEvents) Read(ctx context.Context) ([]xid.Event, error) {
	h := s.h
	h.mu.RLock()
	defer h.mu.RUnlock()
	if h.closed {
		return nil, ErrNVMLClosed
	}
	var events []xid.Event
	for len(events) < maxEvents && ctx.Err() == nil {
		data, ret := h.set.Wait(eventWaitMillis)
		switch ret {
		case nvml.SUCCESS:
		case nvml.ERROR_TIMEOUT:
			return events, nil
		default:
			return events, fmt.Errorf("nvml: wait for Xid events: %s", ret.Error())
		}
		if data.EventType&nvml.EventTypeXidCriticalError == 0 {
			continue
		}
		e := xid.Event{GPU: -1, Xid: int(data.EventData)}
		if data.Device != nil {
			if uuid, ret := data.Device.GetUUID(); ret == nvml.SUCCESS {
				if i, ok := h.idx[uuid]; ok {
					e.GPU = i
				}
			}
		}
		events = append(events, e)
	}
	return events, ctx.Err()
}

var (
	_ gpucheck.Provider = (*NVMLHealth)(nil)
	_ xid.Source        = nvmlEvents{}
)
