package gpu

import (
	"context"
	"math"
	"sync"
)

// Telemetry is one GPU's readings, in the units dcgm-exporter reports
// (its field names in brackets). A reading the device does not give is
// NaN, and the agent's metrics leave it out.
type Telemetry struct {
	Index int
	UUID  string
	Model string
	// UtilPercent: GPU utilisation, 0–100 [DCGM_FI_DEV_GPU_UTIL].
	UtilPercent float64
	// FBUsedMiB, FBFreeMiB: frame buffer used and free, MiB
	// [DCGM_FI_DEV_FB_USED, DCGM_FI_DEV_FB_FREE].
	FBUsedMiB, FBFreeMiB float64
	// TempC: GPU temperature, °C [DCGM_FI_DEV_GPU_TEMP].
	TempC float64
	// PowerW: power draw, W [DCGM_FI_DEV_POWER_USAGE].
	PowerW float64
	// SMClockMHz: SM clock, MHz [DCGM_FI_DEV_SM_CLOCK].
	SMClockMHz float64
	// LastXid: the last Xid error seen, 0 for none [DCGM_FI_DEV_XID_ERRORS].
	LastXid float64
	// ECCDBEVolTotal: double-bit ECC errors since the driver loaded
	// [DCGM_FI_DEV_ECC_DBE_VOL_TOTAL].
	ECCDBEVolTotal float64
	// NVLinkBandwidthTotal: NVLink traffic over all links, a counter
	// [DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL].
	NVLinkBandwidthTotal float64
}

// Sampler is a Discoverer that can also read its GPUs' telemetry (the
// fake; NVML in the cgo build). The agent asks each Discoverer whether it
// is one.
type Sampler interface {
	// Sample reads every GPU's telemetry. busy says whether a rank holds
	// the GPU of an index: fakes follow it, real GPUs ignore it. It does
	// not block beyond the device calls.
	Sample(ctx context.Context, busy func(index int) bool) ([]Telemetry, error)
}

var _ Sampler = (*fake)(nil)

// Sample implements Sampler: an idle GPU reads as a real idle H100 does
// (0 %, half a GiB used, 33 °C, 70 W, 345 MHz), one a rank holds as a busy
// one (about 95 %, three quarters of its memory, 70 °C, 600 W, 1,980 MHz),
// each wobbling a little from sample to sample, the same on every run.
// NVLink traffic grows by 40 GB a sample while busy.
func (f *fake) Sample(ctx context.Context, busy func(index int) bool) ([]Telemetry, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	st := &f.sampled
	st.mu.Lock()
	defer st.mu.Unlock()
	st.n++
	n := st.n
	if len(st.nvlink) < len(f.inv.Devices) {
		st.nvlink = make([]float64, len(f.inv.Devices))
	}
	out := make([]Telemetry, 0, len(f.inv.Devices))
	for _, d := range f.inv.Devices {
		w := math.Sin(float64(n)*0.7 + float64(d.Index)) // -1..1
		total := float64(d.MemoryBytes) / (1 << 20)
		t := Telemetry{Index: d.Index, UUID: d.UUID, Model: d.Model}
		if busy != nil && busy(d.Index) {
			st.nvlink[d.Index] += 40e9
			t.UtilPercent = math.Round(95 + 4*w)
			t.FBUsedMiB = math.Round(total * (0.75 + 0.02*w))
			t.TempC = math.Round(70 + 3*w)
			t.PowerW = math.Round(600 + 40*w)
			t.SMClockMHz = 1980
		} else {
			t.UtilPercent = 0
			t.FBUsedMiB = 512
			t.TempC = math.Round(33 + w)
			t.PowerW = math.Round(70 + 2*w)
			t.SMClockMHz = 345
		}
		t.FBFreeMiB = total - t.FBUsedMiB
		t.NVLinkBandwidthTotal = st.nvlink[d.Index]
		out = append(out, t)
	}
	return out, nil
}

// fakeSampled is what a fake's readings carry from one sample to the
// next.
type fakeSampled struct {
	mu     sync.Mutex // guards n and nvlink
	n      int64      // samples taken, for the wobble
	nvlink []float64  // NVLink bytes per GPU so far
}
