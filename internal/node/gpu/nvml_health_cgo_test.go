//go:build linux && cgo

package gpu

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/google/go-cmp/cmp"

	"github.com/gangway/gangway/internal/api"
	"github.com/gangway/gangway/internal/node/health"
	"github.com/gangway/gangway/internal/node/health/gpucheck"
	"github.com/gangway/gangway/internal/node/health/xid"
)

// h100Answers is testdata/nvml_h100_sxm_idle.json: NVML's answers for
// one idle H100 SXM.
type h100Answers struct {
	UUID              string `json:"uuid"`
	TempC             uint32 `json:"temperature_gpu_c"`
	SlowdownC         uint32 `json:"temperature_threshold_slowdown_c"`
	ClocksEvent       uint64 `json:"clocks_event_reasons"`
	PowerMW           uint32 `json:"power_usage_mw"`
	LimitMW           uint32 `json:"enforced_power_limit_mw"`
	VolatileSBE       uint64 `json:"ecc_volatile_corrected"`
	VolatileDBE       uint64 `json:"ecc_volatile_uncorrected"`
	AggregateSBE      uint64 `json:"ecc_aggregate_corrected"`
	AggregateDBE      uint64 `json:"ecc_aggregate_uncorrected"`
	RemapPending      bool   `json:"remapped_rows_pending"`
	RemapFailure      bool   `json:"remapped_rows_failure"`
	NVLinks           int    `json:"nvlinks"`
	PCIeGen           int    `json:"pcie_gen_current"`
	PCIeMaxGen        int    `json:"pcie_gen_max"`
	PCIeWidth         int    `json:"pcie_width_current"`
	PCIeMaxWidth      int    `json:"pcie_width_max"`
	SupportedEvents   uint64 `json:"supported_event_types"`
	Comment           string `json:"_comment"`
	linkDown          map[int]bool
	linkErrors        map[[2]int]uint64 // link, counter → count
	registered        uint64            // the event mask RegisterEvents got
	registeredOnSetOK bool
}

func loadH100(t *testing.T) h100Answers {
	t.Helper()
	data, err := os.ReadFile("testdata/nvml_h100_sxm_idle.json")
	if err != nil {
		t.Fatal(err)
	}
	var a h100Answers
	dec := json.NewDecoder(strings.NewReader(string(data)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&a); err != nil {
		t.Fatal(err)
	}
	return a
}

// device makes a mock that answers as a, with GPU i's UUID. Every
// function NVML's health readings call is set; any other call panics.
func (a *h100Answers) device(i int) *mock.Device {
	uuid := a.UUID[:len(a.UUID)-1] + fmt.Sprint(i)
	return &mock.Device{
		GetUUIDFunc: func() (string, nvml.Return) { return uuid, nvml.SUCCESS },
		GetTotalEccErrorsFunc: func(typ nvml.MemoryErrorType, c nvml.EccCounterType) (uint64, nvml.Return) {
			switch {
			case typ == nvml.MEMORY_ERROR_TYPE_CORRECTED && c == nvml.VOLATILE_ECC:
				return a.VolatileSBE, nvml.SUCCESS
			case typ == nvml.MEMORY_ERROR_TYPE_UNCORRECTED && c == nvml.VOLATILE_ECC:
				return a.VolatileDBE, nvml.SUCCESS
			case typ == nvml.MEMORY_ERROR_TYPE_CORRECTED && c == nvml.AGGREGATE_ECC:
				return a.AggregateSBE, nvml.SUCCESS
			case typ == nvml.MEMORY_ERROR_TYPE_UNCORRECTED && c == nvml.AGGREGATE_ECC:
				return a.AggregateDBE, nvml.SUCCESS
			}
			return 0, nvml.ERROR_INVALID_ARGUMENT
		},
		GetRemappedRowsFunc: func() (int, int, bool, bool, nvml.Return) {
			return 0, 0, a.RemapPending, a.RemapFailure, nvml.SUCCESS
		},
		GetTemperatureFunc: func(s nvml.TemperatureSensors) (uint32, nvml.Return) {
			if s != nvml.TEMPERATURE_GPU {
				return 0, nvml.ERROR_INVALID_ARGUMENT
			}
			return a.TempC, nvml.SUCCESS
		},
		GetTemperatureThresholdFunc: func(th nvml.TemperatureThresholds) (uint32, nvml.Return) {
			if th != nvml.TEMPERATURE_THRESHOLD_SLOWDOWN {
				return 0, nvml.ERROR_INVALID_ARGUMENT
			}
			return a.SlowdownC, nvml.SUCCESS
		},
		GetCurrentClocksEventReasonsFunc:    func() (uint64, nvml.Return) { return a.ClocksEvent, nvml.SUCCESS },
		GetCurrentClocksThrottleReasonsFunc: func() (uint64, nvml.Return) { return a.ClocksEvent, nvml.SUCCESS },
		GetPowerUsageFunc:                   func() (uint32, nvml.Return) { return a.PowerMW, nvml.SUCCESS },
		GetEnforcedPowerLimitFunc:           func() (uint32, nvml.Return) { return a.LimitMW, nvml.SUCCESS },
		GetNvLinkStateFunc: func(l int) (nvml.EnableState, nvml.Return) {
			if l >= a.NVLinks {
				return 0, nvml.ERROR_INVALID_ARGUMENT
			}
			if a.linkDown[l] {
				return nvml.FEATURE_DISABLED, nvml.SUCCESS
			}
			return nvml.FEATURE_ENABLED, nvml.SUCCESS
		},
		GetNvLinkErrorCounterFunc: func(l int, c nvml.NvLinkErrorCounter) (uint64, nvml.Return) {
			if l >= a.NVLinks || c >= nvml.NVLINK_ERROR_COUNT {
				return 0, nvml.ERROR_INVALID_ARGUMENT
			}
			return a.linkErrors[[2]int{l, int(c)}], nvml.SUCCESS
		},
		GetCurrPcieLinkGenerationFunc: func() (int, nvml.Return) { return a.PCIeGen, nvml.SUCCESS },
		GetMaxPcieLinkGenerationFunc:  func() (int, nvml.Return) { return a.PCIeMaxGen, nvml.SUCCESS },
		GetCurrPcieLinkWidthFunc:      func() (int, nvml.Return) { return a.PCIeWidth, nvml.SUCCESS },
		GetMaxPcieLinkWidthFunc:       func() (int, nvml.Return) { return a.PCIeMaxWidth, nvml.SUCCESS },
		GetSupportedEventTypesFunc:    func() (uint64, nvml.Return) { return a.SupportedEvents, nvml.SUCCESS },
		RegisterEventsFunc: func(mask uint64, set nvml.EventSet) nvml.Return {
			a.registered |= mask
			a.registeredOnSetOK = set != nil
			return nvml.SUCCESS
		},
	}
}

// mockLib is an NVML library with devs, lacking the symbols in missing,
// whose event set is set (nil: EventSetCreate fails).
type mockLib struct {
	*mock.Interface
	shutdowns int
}

func newMockLib(devs []nvml.Device, set nvml.EventSet, missing ...string) *mockLib {
	m := &mockLib{}
	m.Interface = &mock.Interface{
		InitFunc:     func() nvml.Return { return nvml.SUCCESS },
		ShutdownFunc: func() nvml.Return { m.shutdowns++; return nvml.SUCCESS },
		ExtensionsFunc: func() nvml.ExtendedInterface {
			return &mock.ExtendedInterface{LookupSymbolFunc: func(s string) error {
				if slices.Contains(missing, s) {
					return errors.New("undefined symbol: " + s)
				}
				return nil
			}}
		},
		DeviceGetCountFunc: func() (int, nvml.Return) { return len(devs), nvml.SUCCESS },
		DeviceGetHandleByIndexFunc: func(i int) (nvml.Device, nvml.Return) {
			if i < 0 || i >= len(devs) {
				return nil, nvml.ERROR_INVALID_ARGUMENT
			}
			return devs[i], nvml.SUCCESS
		},
		EventSetCreateFunc: func() (nvml.EventSet, nvml.Return) {
			if set == nil {
				return nil, nvml.ERROR_NOT_SUPPORTED
			}
			return set, nvml.SUCCESS
		},
	}
	return m
}

func openMock(t *testing.T, lib nvml.Interface) *NVMLHealth {
	t.Helper()
	h, err := openNVMLHealth(lib, "libnvidia-ml.so.1")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return h
}

// idleSet answers TIMEOUT: no event queued.
func idleSet() *mock.EventSet {
	return &mock.EventSet{
		WaitFunc: func(uint32) (nvml.EventData, nvml.Return) { return nvml.EventData{}, nvml.ERROR_TIMEOUT },
		FreeFunc: func() nvml.Return { return nvml.SUCCESS },
	}
}

type reading struct {
	ECC     gpucheck.ECC
	Thermal gpucheck.Thermal
	Power   gpucheck.Power
	Links   []gpucheck.Link
	PCIe    gpucheck.PCIe
}

func readAll(t *testing.T, p gpucheck.Provider, gpu int) (reading, error) {
	t.Helper()
	ctx := context.Background()
	var r reading
	var errs [5]error
	r.ECC, errs[0] = p.ECC(ctx, gpu)
	r.Thermal, errs[1] = p.Thermal(ctx, gpu)
	r.Power, errs[2] = p.Power(ctx, gpu)
	r.Links, errs[3] = p.NVLinks(ctx, gpu)
	r.PCIe, errs[4] = p.PCIe(ctx, gpu)
	return r, errors.Join(errs[:]...)
}

func links(n int, down ...int) []gpucheck.Link {
	out := make([]gpucheck.Link, n)
	for i := range out {
		out[i] = gpucheck.Link{Index: i, Up: !slices.Contains(down, i)}
	}
	return out
}

// TestNVMLHealthReadings maps each NVML answer to its field, in NVML's
// units, with every counter distinct so that a swap shows.
func TestNVMLHealthReadings(t *testing.T) {
	a := loadH100(t)
	a.VolatileSBE, a.VolatileDBE, a.AggregateSBE, a.AggregateDBE = 3, 1, 40, 2
	a.RemapPending = true
	a.ClocksEvent = nvml.ClocksEventReasonSwPowerCap | nvml.ClocksThrottleReasonHwSlowdown
	a.linkDown = map[int]bool{4: true}
	a.linkErrors = map[[2]int]uint64{
		{0, int(nvml.NVLINK_ERROR_DL_CRC_FLIT)}: 1, {0, int(nvml.NVLINK_ERROR_DL_CRC_DATA)}: 10,
		{0, int(nvml.NVLINK_ERROR_DL_REPLAY)}: 100, {0, int(nvml.NVLINK_ERROR_DL_RECOVERY)}: 1000,
		{0, int(nvml.NVLINK_ERROR_DL_ECC_DATA)}: 5000, // not one of the four summed
		{4, int(nvml.NVLINK_ERROR_DL_REPLAY)}:   7,    // the link is down: not read
	}
	h := openMock(t, newMockLib([]nvml.Device{a.device(0)}, idleSet()))
	got, err := readAll(t, h, 0)
	if err != nil {
		t.Fatal(err)
	}
	wantLinks := links(18, 4)
	wantLinks[0].Errors = 1111
	want := reading{
		ECC:     gpucheck.ECC{VolatileSBE: 3, VolatileDBE: 1, AggregateSBE: 40, AggregateDBE: 2, RemapPending: true},
		Thermal: gpucheck.Thermal{TempC: 33, SlowdownC: 87, Throttle: gpucheck.ThrottleSWPowerCap | gpucheck.ThrottleHWSlowdown},
		Power:   gpucheck.Power{DrawMilliwatts: 69120, LimitMilliwatts: 700000},
		Links:   wantLinks,
		PCIe:    gpucheck.PCIe{Gen: 5, MaxGen: 5, Width: 16, MaxWidth: 16},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("readings (-want +got):\n%s", diff)
	}
}

// TestNVMLHealthNotSupported: a reading NVML does not support here, or
// whose function the library lacks, is zero (unknown to the checks), not
// an error; a missing function is not called (the mock panics if it is).
func TestNVMLHealthNotSupported(t *testing.T) {
	notSupported := func(d *mock.Device) {
		d.GetTotalEccErrorsFunc = func(nvml.MemoryErrorType, nvml.EccCounterType) (uint64, nvml.Return) {
			return 0, nvml.ERROR_NOT_SUPPORTED
		}
		d.GetRemappedRowsFunc = func() (int, int, bool, bool, nvml.Return) { return 0, 0, true, true, nvml.ERROR_NOT_SUPPORTED }
		d.GetTemperatureThresholdFunc = func(nvml.TemperatureThresholds) (uint32, nvml.Return) { return 0, nvml.ERROR_NOT_SUPPORTED }
		d.GetCurrentClocksEventReasonsFunc = func() (uint64, nvml.Return) { return 0, nvml.ERROR_NOT_SUPPORTED }
		d.GetEnforcedPowerLimitFunc = func() (uint32, nvml.Return) { return 0, nvml.ERROR_NOT_SUPPORTED }
		d.GetNvLinkStateFunc = func(int) (nvml.EnableState, nvml.Return) { return 0, nvml.ERROR_NOT_SUPPORTED }
		d.GetMaxPcieLinkWidthFunc = func() (int, nvml.Return) { return 0, nvml.ERROR_NOT_SUPPORTED }
	}
	missing := []string{
		"nvmlDeviceGetTotalEccErrors", "nvmlDeviceGetRemappedRows", "nvmlDeviceGetTemperature",
		"nvmlDeviceGetTemperatureThreshold", "nvmlDeviceGetCurrentClocksEventReasons",
		"nvmlDeviceGetCurrentClocksThrottleReasons", "nvmlDeviceGetPowerUsage", "nvmlDeviceGetEnforcedPowerLimit",
		"nvmlDeviceGetNvLinkState", "nvmlDeviceGetCurrPcieLinkWidth",
	}
	tests := []struct {
		name    string
		prepare func(*mock.Device)
		missing []string
		want    reading
	}{
		{"NOT_SUPPORTED", notSupported, nil, reading{
			Thermal: gpucheck.Thermal{TempC: 33},
			Power:   gpucheck.Power{DrawMilliwatts: 69120},
			PCIe:    gpucheck.PCIe{Gen: 5, MaxGen: 5, Width: 16},
		}},
		{"functions missing from the library", func(d *mock.Device) {
			*d = mock.Device{GetUUIDFunc: d.GetUUIDFunc, GetSupportedEventTypesFunc: d.GetSupportedEventTypesFunc, RegisterEventsFunc: d.RegisterEventsFunc}
		}, missing, reading{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := loadH100(t)
			d := a.device(0)
			tt.prepare(d)
			h := openMock(t, newMockLib([]nvml.Device{d}, idleSet(), tt.missing...))
			got, err := readAll(t, h, 0)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("readings (-want +got):\n%s", diff)
			}
		})
	}
}

// TestNVMLHealthErrors: any other NVML failure is an error naming the
// reading, for every reading.
func TestNVMLHealthErrors(t *testing.T) {
	fail := func(d *mock.Device) {
		d.GetTotalEccErrorsFunc = func(nvml.MemoryErrorType, nvml.EccCounterType) (uint64, nvml.Return) {
			return 0, nvml.ERROR_GPU_IS_LOST
		}
		d.GetTemperatureFunc = func(nvml.TemperatureSensors) (uint32, nvml.Return) { return 0, nvml.ERROR_UNKNOWN }
		d.GetPowerUsageFunc = func() (uint32, nvml.Return) { return 0, nvml.ERROR_GPU_IS_LOST }
		d.GetNvLinkStateFunc = func(int) (nvml.EnableState, nvml.Return) { return 0, nvml.ERROR_GPU_IS_LOST }
		d.GetCurrPcieLinkGenerationFunc = func() (int, nvml.Return) { return 0, nvml.ERROR_UNKNOWN }
	}
	a := loadH100(t)
	d := a.device(0)
	fail(d)
	h := openMock(t, newMockLib([]nvml.Device{d}, idleSet()))
	ctx := context.Background()
	_, eccErr := h.ECC(ctx, 0)
	_, thErr := h.Thermal(ctx, 0)
	_, pErr := h.Power(ctx, 0)
	_, lErr := h.NVLinks(ctx, 0)
	_, pcieErr := h.PCIe(ctx, 0)
	_, noGPU := h.ECC(ctx, 1)
	for _, c := range []struct {
		err  error
		want string
	}{
		{eccErr, "volatile corrected ECC errors"}, {thErr, "temperature"}, {pErr, "power usage"},
		{lErr, "NVLink 0 state"}, {pcieErr, "PCIe generation"}, {noGPU, "no GPU 1"},
	} {
		if c.err == nil || !strings.Contains(c.err.Error(), c.want) {
			t.Errorf("err = %v, want one naming %q", c.err, c.want)
		}
	}
}

// TestNVMLHealthThrottleFallback: a driver without
// nvmlDeviceGetCurrentClocksEventReasons (before 535) is asked for the
// throttle reasons, whose bits are the same.
func TestNVMLHealthThrottleFallback(t *testing.T) {
	a := loadH100(t)
	d := a.device(0)
	d.GetCurrentClocksEventReasonsFunc = nil // panics if called
	d.GetCurrentClocksThrottleReasonsFunc = func() (uint64, nvml.Return) {
		return nvml.ClocksThrottleReasonHwThermalSlowdown, nvml.SUCCESS
	}
	h := openMock(t, newMockLib([]nvml.Device{d}, idleSet(), "nvmlDeviceGetCurrentClocksEventReasons"))
	th, err := h.Thermal(context.Background(), 0)
	if err != nil {
		t.Fatal(err)
	}
	if th.Throttle != gpucheck.ThrottleHWThermalSlowdown {
		t.Errorf("throttle = %#x, want hw_thermal_slowdown %#x", th.Throttle, gpucheck.ThrottleHWThermalSlowdown)
	}
}

// TestThrottleBitsAreNVMLs: gpucheck's reasons (which the fake injects by
// name) are NVML's bits.
func TestThrottleBitsAreNVMLs(t *testing.T) {
	pairs := []struct {
		ours, nvmls uint64
	}{
		{gpucheck.ThrottleGPUIdle, nvml.ClocksEventReasonGpuIdle},
		{gpucheck.ThrottleAppClocksSetting, nvml.ClocksEventReasonApplicationsClocksSetting},
		{gpucheck.ThrottleSWPowerCap, nvml.ClocksEventReasonSwPowerCap},
		{gpucheck.ThrottleHWSlowdown, nvml.ClocksThrottleReasonHwSlowdown},
		{gpucheck.ThrottleSyncBoost, nvml.ClocksEventReasonSyncBoost},
		{gpucheck.ThrottleSWThermalSlowdown, nvml.ClocksEventReasonSwThermalSlowdown},
		{gpucheck.ThrottleHWThermalSlowdown, nvml.ClocksThrottleReasonHwThermalSlowdown},
		{gpucheck.ThrottleHWPowerBrake, nvml.ClocksThrottleReasonHwPowerBrakeSlowdown},
		{gpucheck.ThrottleDisplayClock, nvml.ClocksEventReasonDisplayClockSetting},
	}
	for _, p := range pairs {
		if p.ours != p.nvmls {
			t.Errorf("gpucheck reason %v (%#x) is NVML's %#x", gpucheck.ThrottleNames(p.ours), p.ours, p.nvmls)
		}
	}
}

// TestFakeAnswersAsNVML: the health package's fake, healthy, reads as an
// idle H100 SXM read through NVML, in every board value (link count,
// power limit, PCIe, slowdown, the idle reason); temperature and draw
// vary by GPU and are left out.
func TestFakeAnswersAsNVML(t *testing.T) {
	a := loadH100(t)
	h := openMock(t, newMockLib([]nvml.Device{a.device(0)}, idleSet()))
	viaNVML, err := readAll(t, h, 0)
	if err != nil {
		t.Fatal(err)
	}
	fromFake, err := readAll(t, health.NewFake(1, ""), 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []*reading{&viaNVML, &fromFake} {
		r.Thermal.TempC, r.Power.DrawMilliwatts = 0, 0
	}
	if diff := cmp.Diff(viaNVML, fromFake); diff != "" {
		t.Errorf("fake vs NVML (-nvml +fake):\n%s", diff)
	}
}

// TestNVMLChecksAsWithFake: the gpucheck checks read through NVML report
// a fault exactly as they do reading the fake with the same fault.
func TestNVMLChecksAsWithFake(t *testing.T) {
	tests := []struct {
		name   string
		inject string
		fault  func(*h100Answers)
		check  func(gpucheck.Provider) health.Check
		want   api.HealthAction
	}{
		{"uncorrected ECC", `{"gpu":1,"ecc_dbe":2}`, func(a *h100Answers) { a.VolatileDBE, a.AggregateDBE = 2, 2 },
			func(p gpucheck.Provider) health.Check { return gpucheck.NewECCCheck(p, 2) }, api.ActionResetGPU},
		{"row remap failure", `{"gpu":1,"row_remap_failure":true}`, func(a *h100Answers) { a.RemapFailure = true },
			func(p gpucheck.Provider) health.Check { return gpucheck.NewECCCheck(p, 2) }, api.ActionCordonGPU},
		{"NVLink down", `{"gpu":1,"nvlink_down":1}`, func(a *h100Answers) { a.linkDown = map[int]bool{0: true} },
			func(p gpucheck.Provider) health.Check { return gpucheck.NewNVLinkCheck(p, 2) }, api.ActionResetGPU},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a0, a1 := loadH100(t), loadH100(t)
			h := openMock(t, newMockLib([]nvml.Device{a0.device(0), a1.device(1)}, idleSet()))
			fake := health.NewFake(2, "")
			viaNVML, viaFake := tt.check(h), tt.check(fake)
			ctx := context.Background()
			viaNVML.Run(ctx) // the nvlink check must see a link up before it goes down
			viaFake.Run(ctx)
			tt.fault(&a1)
			if err := fake.Inject(tt.inject); err != nil {
				t.Fatal(err)
			}
			got, want := viaNVML.Run(ctx), viaFake.Run(ctx)
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("findings (-fake +nvml):\n%s", diff)
			}
			if len(got) != 2 || !got[1].Fatal() || got[1].Action != tt.want || got[0].Status != api.CheckOK {
				t.Errorf("findings %+v; want GPU 1 fatal with %s, GPU 0 ok", got, tt.want)
			}
		})
	}
}

// eventQueue is a mock event set holding queued events; Wait answers
// TIMEOUT once it is empty.
type eventQueue struct {
	mu     sync.Mutex
	queue  []nvml.EventData
	waits  int
	freed  int
	onWait func(n int)
}

func (q *eventQueue) set() *mock.EventSet {
	return &mock.EventSet{
		WaitFunc: func(ms uint32) (nvml.EventData, nvml.Return) {
			q.mu.Lock()
			defer q.mu.Unlock()
			q.waits++
			if q.onWait != nil {
				q.onWait(q.waits)
			}
			if ms == 0 || ms > 100 {
				return nvml.EventData{}, nvml.ERROR_INVALID_ARGUMENT // Read must wait briefly, never forever
			}
			if len(q.queue) == 0 {
				return nvml.EventData{}, nvml.ERROR_TIMEOUT
			}
			e := q.queue[0]
			q.queue = q.queue[1:]
			return e, nvml.SUCCESS
		},
		FreeFunc: func() nvml.Return { q.mu.Lock(); defer q.mu.Unlock(); q.freed++; return nvml.SUCCESS },
	}
}

// TestNVMLXidEvents: an Xid NVML reports on a GPU reaches the Xid check
// as a fatal finding on that GPU's index, named through the event's
// device UUID; other events are not Xids.
func TestNVMLXidEvents(t *testing.T) {
	as := make([]h100Answers, 4)
	devs := make([]nvml.Device, 4)
	for i := range as {
		as[i] = loadH100(t)
		devs[i] = as[i].device(i)
	}
	as[3].SupportedEvents = nvml.EventTypeSingleBitEccError // no Xid events: not registered
	q := &eventQueue{}
	h := openMock(t, newMockLib(devs, q.set()))
	for i, a := range as[:3] {
		if a.registered != nvml.EventTypeXidCriticalError || !a.registeredOnSetOK {
			t.Errorf("GPU %d registered mask %#x, want Xid critical errors only", i, a.registered)
		}
	}
	if as[3].registered != 0 {
		t.Errorf("GPU 3, without Xid events, registered %#x", as[3].registered)
	}
	// A device value of its own, as NVML hands out: matched by UUID.
	other := loadH100(t)
	stranger := &mock.Device{GetUUIDFunc: func() (string, nvml.Return) { return "GPU-not-this-node", nvml.SUCCESS }}
	q.queue = []nvml.EventData{
		{Device: other.device(2), EventType: nvml.EventTypeXidCriticalError, EventData: 79, GpuInstanceId: 0xFFFFFFFF, ComputeInstanceId: 0xFFFFFFFF},
		{Device: devs[1], EventType: nvml.EventTypeDoubleBitEccError}, // not registered, but not an Xid either
		{Device: stranger, EventType: nvml.EventTypeXidCriticalError, EventData: 13},
	}
	src := h.Events()
	if src == nil {
		t.Fatal("no event source")
	}
	c, err := xid.New(src, xid.Options{GPUs: 4})
	if err != nil {
		t.Fatal(err)
	}
	got := c.Run(context.Background())
	byGPU := map[int]api.HealthCheck{}
	for _, f := range got {
		byGPU[f.GPU] = f
	}
	if f := byGPU[2]; !f.Fatal() || f.Code != 79 || f.Action != api.ActionCordonNode {
		t.Errorf("GPU 2: %+v; want fatal Xid 79, cordon node", f)
	}
	for _, g := range []int{0, 1, 3} {
		if byGPU[g].Status != api.CheckOK {
			t.Errorf("GPU %d: %+v; want ok", g, byGPU[g])
		}
	}
	if f := byGPU[-1]; f.Status != api.CheckWarn || f.Code != 13 {
		t.Errorf("node: %+v; want the unknown GPU's Xid 13 counted", f)
	}
}

// TestNVMLEventsWait: Read waits briefly, returns on TIMEOUT without
// error, takes later events at the next Read, and stops once ctx ends
// even while events keep coming; an event-set failure is an error.
func TestNVMLEventsWait(t *testing.T) {
	a := loadH100(t)
	dev := a.device(0)
	q := &eventQueue{}
	h := openMock(t, newMockLib([]nvml.Device{dev}, q.set()))
	src := h.Events()
	ctx := context.Background()
	if ev, err := src.Read(ctx); len(ev) != 0 || err != nil || q.waits != 1 {
		t.Fatalf("idle Read = %v, %v after %d waits; want nothing, nil, one wait", ev, err, q.waits)
	}
	xid48 := nvml.EventData{Device: dev, EventType: nvml.EventTypeXidCriticalError, EventData: 48}
	q.queue = []nvml.EventData{xid48}
	if ev, err := src.Read(ctx); err != nil || len(ev) != 1 || ev[0].GPU != 0 || ev[0].Xid != 48 {
		t.Fatalf("Read = %+v, %v; want Xid 48 on GPU 0", ev, err)
	}

	// A storm: Wait never times out; Read ends when ctx does.
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	q.waits = 0
	q.onWait = func(n int) {
		q.queue = append(q.queue, xid48)
		if n == 3 {
			cancel()
		}
	}
	ev, err := src.Read(cctx)
	if !errors.Is(err, context.Canceled) || len(ev) != 3 || q.waits != 3 {
		t.Fatalf("Read in a storm = %d events, %v after %d waits; want 3, context.Canceled, 3", len(ev), err, q.waits)
	}
	q.onWait = nil

	broken := &mock.EventSet{
		WaitFunc: func(uint32) (nvml.EventData, nvml.Return) { return nvml.EventData{}, nvml.ERROR_UNKNOWN },
		FreeFunc: func() nvml.Return { return nvml.SUCCESS },
	}
	hb := openMock(t, newMockLib([]nvml.Device{loadH100Dev(t)}, broken))
	if _, err := hb.Events().Read(ctx); err == nil || !strings.Contains(err.Error(), "wait for Xid events") {
		t.Errorf("Read on a failing set = %v, want an error", err)
	}
}

func loadH100Dev(t *testing.T) *mock.Device { a := loadH100(t); return a.device(0) }

// TestNVMLHealthOpenAndClose: NVML is initialised once and shut down at
// Close, after the event set is freed; nothing is called after Close; no
// event set means no Xid source; a failed Init calls nothing more.
func TestNVMLHealthOpenAndClose(t *testing.T) {
	q := &eventQueue{}
	lib := newMockLib([]nvml.Device{loadH100Dev(t)}, q.set())
	h, err := openNVMLHealth(lib, "libnvidia-ml.so.1")
	if err != nil {
		t.Fatal(err)
	}
	if n := len(lib.InitCalls()); n != 1 {
		t.Errorf("Init called %d times", n)
	}
	src := h.Events()
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	if err := h.Close(); err != nil || lib.shutdowns != 1 || q.freed != 1 {
		t.Errorf("second Close = %v; %d shutdowns, set freed %d times; want nil, 1, 1", err, lib.shutdowns, q.freed)
	}
	if _, err := h.ECC(context.Background(), 0); !errors.Is(err, ErrNVMLClosed) {
		t.Errorf("ECC after Close = %v", err)
	}
	if _, err := src.Read(context.Background()); !errors.Is(err, ErrNVMLClosed) || q.waits != 0 {
		t.Errorf("Read after Close = %v after %d waits", err, q.waits)
	}

	noEvents := openMock(t, newMockLib([]nvml.Device{loadH100Dev(t)}, nil))
	if noEvents.Events() != nil {
		t.Error("Events without an event set is not nil")
	}
	noSyms := openMock(t, newMockLib([]nvml.Device{loadH100Dev(t)}, q.set(), "nvmlEventSetWait", "nvmlEventSetWait_v2"))
	if noSyms.Events() != nil {
		t.Error("Events without nvmlEventSetWait is not nil")
	}

	// Only Init is set: any other call panics.
	failing := &mock.Interface{InitFunc: func() nvml.Return { return nvml.ERROR_DRIVER_NOT_LOADED }}
	if _, err := openNVMLHealth(failing, "libnvidia-ml.so.1"); err == nil || !strings.Contains(err.Error(), "kernel driver is not loaded") {
		t.Errorf("open with a failing Init = %v", err)
	}
}

// TestOpenNVMLHealthWrongLibrary loads a real library that is not NVML:
// the preflight refuses it before Init could abort the test binary.
func TestOpenNVMLHealthWrongLibrary(t *testing.T) {
	_, err := OpenNVMLHealth(WithLibraryPath("libc.so.6"))
	if err == nil || !strings.Contains(err.Error(), "lacks nvmlInit_v2") {
		t.Fatalf("OpenNVMLHealth(libc) = %v", err)
	}
}
