//go:build !(linux && cgo)

package gpu

import (
	"context"
	"errors"
	"runtime"

	"github.com/gangway/gangway/internal/node/health/gpucheck"
	"github.com/gangway/gangway/internal/node/health/xid"
)

// NVMLHealth reads the GPUs' health through NVML. This binary was built
// without cgo or for another OS than linux: OpenNVMLHealth always fails,
// and there is never an NVMLHealth to read from.
type NVMLHealth struct{}

// ErrNVMLClosed is returned by readings after Close.
var ErrNVMLClosed = errors.New("nvml: health reader closed")

// OpenNVMLHealth returns an error saying NVML cannot be loaded in this
// build. The options are accepted and ignored.
func OpenNVMLHealth(opts ...NVMLOption) (*NVMLHealth, error) {
	_ = newNVMLConfig(opts)
	if runtime.GOOS != "linux" {
		return nil, errors.New("NVML health readings are built only for linux, not " + runtime.GOOS)
	}
	return nil, errors.New("built without cgo: NVML cannot be loaded for health readings")
}

var errNoNVML = errors.New("nvml: not in this build")

func (*NVMLHealth) Close() error { return nil }
func (*NVMLHealth) GPUs() int    { return 0 }
func (*NVMLHealth) ECC(context.Context, int) (gpucheck.ECC, error) {
	return gpucheck.ECC{}, errNoNVML
}
func (*NVMLHealth) Thermal(context.Context, int) (gpucheck.Thermal, error) {
	return gpucheck.Thermal{}, errNoNVML
}
func (*NVMLHealth) Power(context.Context, int) (gpucheck.Power, error) {
	return gpucheck.Power{}, errNoNVML
}
func (*NVMLHealth) NVLinks(context.Context, int) ([]gpucheck.Link, error) { return nil, errNoNVML }
func (*NVMLHealth) PCIe(context.Context, int) (gpucheck.PCIe, error) {
	return gpucheck.PCIe{}, errNoNVML
}
func (*NVMLHealth) Events() xid.Source { return nil }

var _ gpucheck.Provider = (*NVMLHealth)(nil)
