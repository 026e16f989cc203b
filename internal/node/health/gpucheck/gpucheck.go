// Package gpucheck holds the health checks that read a GPU's own
// counters: ECC errors and row remapping (ecc), temperature and clock
// throttling (thermal), power draw (power), NVLink state and error
// counters (nvlink), and the PCIe link (pcie). Each check reports one
// finding per GPU; a reader call that fails makes that GPU's finding
// Status error, which says nothing about the GPU.
//
// The checks read through small interfaces ([ECCReader], [ThermalReader],
// ...) whose answers mirror NVML's calls, so that an NVML implementation
// can sit beside the cgo code in internal/node/gpu and the health
// package's fake can stand in for it.
//
// It imports the standard library and internal/api.
package gpucheck

import (
	"context"
	"fmt"
	"strings"

	"github.com/gangway/gangway/internal/api"
)

// ECC is a GPU's memory error state (nvmlDeviceGetTotalEccErrors,
// nvmlDeviceGetRemappedRows).
type ECC struct {
	// VolatileSBE and VolatileDBE count corrected (single-bit) and
	// uncorrected (double-bit) errors since the driver loaded or the GPU
	// was last reset.
	VolatileSBE, VolatileDBE uint64
	// AggregateSBE and AggregateDBE count them over the GPU's life.
	AggregateSBE, AggregateDBE uint64
	// RemapPending: rows were marked for remapping, which the next reset
	// applies. RemapFailure: a row could not be remapped (no spares left).
	RemapPending, RemapFailure bool
}

// Thermal is a GPU's temperature and why its clocks are held down.
type Thermal struct {
	// TempC is the core temperature (nvmlDeviceGetTemperature).
	TempC int
	// SlowdownC is the temperature at which the GPU slows itself down
	// (NVML_TEMPERATURE_THRESHOLD_SLOWDOWN); 0 when NVML does not say.
	SlowdownC int
	// Throttle is NVML's clocks event reasons bit mask
	// (nvmlDeviceGetCurrentClocksEventReasons).
	Throttle uint64
}

// Power is a GPU's power draw and the limit it is held to
// (nvmlDeviceGetPowerUsage, nvmlDeviceGetEnforcedPowerLimit).
type Power struct {
	DrawMilliwatts, LimitMilliwatts int64
}

// Link is one NVLink of a GPU.
type Link struct {
	Index int
	// Up: NVML says the link is active (nvmlDeviceGetNvLinkState).
	Up bool
	// Errors sums the link's error counters (CRC, replay, recovery:
	// nvmlDeviceGetNvLinkErrorCounter), which only grow until a reset.
	Errors uint64
}

// PCIe is a GPU's PCIe link now and at most.
type PCIe struct {
	Gen, MaxGen     int
	Width, MaxWidth int
}

// The readers. Each call asks about one GPU by index, blocks while the
// hardware answers (milliseconds), and fails only when it could not ask.
type (
	ECCReader interface {
		ECC(ctx context.Context, gpu int) (ECC, error)
	}
	ThermalReader interface {
		Thermal(ctx context.Context, gpu int) (Thermal, error)
	}
	PowerReader interface {
		Power(ctx context.Context, gpu int) (Power, error)
	}
	// NVLinkReader returns every NVLink the GPU has, none for a GPU
	// without NVLink.
	NVLinkReader interface {
		NVLinks(ctx context.Context, gpu int) ([]Link, error)
	}
	PCIeReader interface {
		PCIe(ctx context.Context, gpu int) (PCIe, error)
	}
)

// Provider reads everything the checks here need.
type Provider interface {
	ECCReader
	ThermalReader
	PowerReader
	NVLinkReader
	PCIeReader
}

// perGPU runs one finding per GPU, stopping early (with what it has)
// when ctx ends.
func perGPU(ctx context.Context, name string, gpus int, f func(gpu int) api.HealthCheck) []api.HealthCheck {
	out := make([]api.HealthCheck, 0, gpus)
	for gpu := range gpus {
		if ctx.Err() != nil {
			break
		}
		h := f(gpu)
		h.Check, h.GPU = name, gpu
		out = append(out, h)
	}
	return out
}

func failed(what string, err error) api.HealthCheck {
	return api.HealthCheck{Status: api.CheckError, Message: fmt.Sprintf("read %s: %v", what, err)}
}

var ok = api.HealthCheck{Status: api.CheckOK}

// ECCCheck is the "ecc" check.
type ECCCheck struct {
	r    ECCReader
	gpus int
}

// NewECCCheck returns the ecc check of GPUs 0 to gpus-1: fatal, needing a
// reset, after an uncorrected error since the last reset (the reset
// retires or remaps the row); fatal, cordoning the GPU, when a row could
// not be remapped (a reset does not help); warn for corrected errors
// and for rows waiting for a reset to be remapped.
func NewECCCheck(r ECCReader, gpus int) *ECCCheck { return &ECCCheck{r: r, gpus: gpus} }

// Name returns "ecc".
func (c *ECCCheck) Name() string { return "ecc" }

// Run reads every GPU's ECC state.
func (c *ECCCheck) Run(ctx context.Context) []api.HealthCheck {
	return perGPU(ctx, c.Name(), c.gpus, func(gpu int) api.HealthCheck {
		e, err := c.r.ECC(ctx, gpu)
		switch {
		case err != nil:
			return failed("ECC counters", err)
		case e.RemapFailure:
			return api.HealthCheck{Status: api.CheckFatal, Action: api.ActionCordonGPU, Message: "a memory row could not be remapped: no spare rows left"}
		case e.VolatileDBE > 0:
			return api.HealthCheck{Status: api.CheckFatal, Action: api.ActionResetGPU, Message: fmt.Sprintf("%d uncorrected (double-bit) ECC errors since the last reset", e.VolatileDBE)}
		case e.RemapPending:
			return api.HealthCheck{Status: api.CheckWarn, Action: api.ActionResetGPU, Message: "memory rows wait for a reset to be remapped"}
		case e.VolatileSBE > 0:
			return api.HealthCheck{Status: api.CheckWarn, Action: api.ActionCount, Message: fmt.Sprintf("%d corrected (single-bit) ECC errors since the last reset", e.VolatileSBE)}
		}
		return ok
	})
}

// DefaultSlowdownC stands in for NVML's slowdown threshold when it gives
// none. NVML reports the threshold per board; on H100 SXM boards
// nvidia-smi's "GPU Slowdown Temp" is in the high 80s C, so 87 C errs
// on the early side.
const DefaultSlowdownC = 87

// NVML's clocks event (throttle) reasons.
const (
	ThrottleGPUIdle           uint64 = 0x1
	ThrottleAppClocksSetting  uint64 = 0x2
	ThrottleSWPowerCap        uint64 = 0x4
	ThrottleHWSlowdown        uint64 = 0x8
	ThrottleSyncBoost         uint64 = 0x10
	ThrottleSWThermalSlowdown uint64 = 0x20
	ThrottleHWThermalSlowdown uint64 = 0x40
	ThrottleHWPowerBrake      uint64 = 0x80
	ThrottleDisplayClock      uint64 = 0x100
)

var throttleNames = []struct {
	bit  uint64
	name string
}{
	{ThrottleGPUIdle, "gpu_idle"},
	{ThrottleAppClocksSetting, "applications_clocks_setting"},
	{ThrottleSWPowerCap, "sw_power_cap"},
	{ThrottleHWSlowdown, "hw_slowdown"},
	{ThrottleSyncBoost, "sync_boost"},
	{ThrottleSWThermalSlowdown, "sw_thermal_slowdown"},
	{ThrottleHWThermalSlowdown, "hw_thermal_slowdown"},
	{ThrottleHWPowerBrake, "hw_power_brake_slowdown"},
	{ThrottleDisplayClock, "display_clock_setting"},
}

// ThrottleNames names the reasons set in mask ("hw_slowdown", ...).
func ThrottleNames(mask uint64) []string {
	var out []string
	for _, t := range throttleNames {
		if mask&t.bit != 0 {
			out = append(out, t.name)
		}
	}
	return out
}

// ThrottleBit is the reason a name from ThrottleNames stands for.
func ThrottleBit(name string) (uint64, bool) {
	for _, t := range throttleNames {
		if t.name == name {
			return t.bit, true
		}
	}
	return 0, false
}

// badThrottle are the reasons that mean the GPU is held down by heat or
// by its board, not by a setting: idle, the software power cap (a busy
// GPU at its limit) and sync boost are how a healthy GPU runs.
const badThrottle = ThrottleHWSlowdown | ThrottleSWThermalSlowdown | ThrottleHWThermalSlowdown | ThrottleHWPowerBrake

// ThermalCheck is the "thermal" check.
type ThermalCheck struct {
	r    ThermalReader
	gpus int
}

// NewThermalCheck returns the thermal check: warn when a GPU is at or
// above its slowdown temperature or its clocks are held down by heat or
// by a hardware slowdown. It stays at warn: a hot GPU computes correctly,
// only slower, and the cause (cooling, airflow) is the node's, for an
// operator to see.
func NewThermalCheck(r ThermalReader, gpus int) *ThermalCheck {
	return &ThermalCheck{r: r, gpus: gpus}
}

// Name returns "thermal".
func (c *ThermalCheck) Name() string { return "thermal" }

// Run reads every GPU's temperature and throttle reasons.
func (c *ThermalCheck) Run(ctx context.Context) []api.HealthCheck {
	return perGPU(ctx, c.Name(), c.gpus, func(gpu int) api.HealthCheck {
		th, err := c.r.Thermal(ctx, gpu)
		if err != nil {
			return failed("temperature", err)
		}
		slowdown := th.SlowdownC
		if slowdown <= 0 {
			slowdown = DefaultSlowdownC
		}
		var why []string
		if th.TempC >= slowdown {
			why = append(why, fmt.Sprintf("%d C, at or above the slowdown temperature %d C", th.TempC, slowdown))
		}
		if bad := th.Throttle & badThrottle; bad != 0 {
			why = append(why, "clocks held down: "+strings.Join(ThrottleNames(bad), ", "))
		}
		if len(why) == 0 {
			return ok
		}
		return api.HealthCheck{Status: api.CheckWarn, Action: api.ActionCount, Message: strings.Join(why, "; ")}
	})
}

// PowerCheck is the "power" check.
type PowerCheck struct {
	r    PowerReader
	gpus int
}

// NewPowerCheck returns the power check: warn when a GPU draws more than
// its enforced limit, which a healthy board's power capping prevents.
func NewPowerCheck(r PowerReader, gpus int) *PowerCheck { return &PowerCheck{r: r, gpus: gpus} }

// Name returns "power".
func (c *PowerCheck) Name() string { return "power" }

// Run reads every GPU's power draw.
func (c *PowerCheck) Run(ctx context.Context) []api.HealthCheck {
	return perGPU(ctx, c.Name(), c.gpus, func(gpu int) api.HealthCheck {
		p, err := c.r.Power(ctx, gpu)
		if err != nil {
			return failed("power", err)
		}
		if p.LimitMilliwatts > 0 && p.DrawMilliwatts > p.LimitMilliwatts {
			return api.HealthCheck{Status: api.CheckWarn, Action: api.ActionCount,
				Message: fmt.Sprintf("drawing %d W, above its %d W limit", p.DrawMilliwatts/1000, p.LimitMilliwatts/1000)}
		}
		return ok
	})
}

// PCIeCheck is the "pcie" check.
type PCIeCheck struct {
	r    PCIeReader
	gpus int
}

// NewPCIeCheck returns the pcie check: warn when a GPU's link runs
// narrower than it can (a bad riser or seating halves host-device
// bandwidth). The generation is not compared: NVML's current generation
// drops at idle for power saving, so a low one says nothing.
func NewPCIeCheck(r PCIeReader, gpus int) *PCIeCheck { return &PCIeCheck{r: r, gpus: gpus} }

// Name returns "pcie".
func (c *PCIeCheck) Name() string { return "pcie" }

// Run reads every GPU's PCIe link.
func (c *PCIeCheck) Run(ctx context.Context) []api.HealthCheck {
	return perGPU(ctx, c.Name(), c.gpus, func(gpu int) api.HealthCheck {
		p, err := c.r.PCIe(ctx, gpu)
		if err != nil {
			return failed("PCIe link", err)
		}
		if p.MaxWidth > 0 && p.Width < p.MaxWidth {
			return api.HealthCheck{Status: api.CheckWarn, Action: api.ActionCount,
				Message: fmt.Sprintf("PCIe link at x%d of x%d (gen %d of %d)", p.Width, p.MaxWidth, p.Gen, p.MaxGen)}
		}
		return ok
	})
}
