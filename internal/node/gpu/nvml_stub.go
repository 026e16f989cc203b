//go:build !(linux && cgo)

package gpu

import (
	"context"
	"runtime"
)

// NewNVML returns a Discoverer that reads the GPUs through NVML. This
// binary was built without cgo or for another OS than linux, so NVML
// cannot be loaded: Discover always returns zero GPUs, Source SourceNone
// and a Reason saying so. The options are accepted and ignored.
func NewNVML(opts ...NVMLOption) Discoverer {
	_ = newNVMLConfig(opts)
	return nvmlStub{}
}

type nvmlStub struct{}

func (nvmlStub) Discover(ctx context.Context) (Inventory, error) {
	if err := ctx.Err(); err != nil {
		return Inventory{}, err
	}
	reason := "built without cgo: NVML cannot be loaded, so no GPUs are discovered (use fake GPUs, or build with CGO_ENABLED=1)"
	if runtime.GOOS != "linux" {
		reason = "NVML discovery is built only for linux, not " + runtime.GOOS + ": no GPUs are discovered"
	}
	return Inventory{Devices: []Device{}, Source: SourceNone, Reason: reason}, nil
}
