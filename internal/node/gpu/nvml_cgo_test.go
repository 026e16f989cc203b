//go:build linux && cgo

package gpu

import (
	"context"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// TestNVMLWrongLibrary loads a real shared library that is not NVML. Without
// the symbol preflight, nvml.Init would call a missing symbol and abort the
// test binary.
func TestNVMLWrongLibrary(t *testing.T) {
	inv, err := NewNVML(WithLibraryPath("libc.so.6")).Discover(context.Background())
	if err != nil {
		t.Fatalf("Discover: %v", err)
	}
	if inv.Source != SourceNone || len(inv.Devices) != 0 {
		t.Fatalf("source %q, %d devices; want none, no devices", inv.Source, len(inv.Devices))
	}
	if want := "libc.so.6 lacks nvmlInit_v2"; !strings.Contains(inv.Reason, want) {
		t.Errorf("reason %q does not contain %q", inv.Reason, want)
	}
}

func TestInitFailureNeedsNoNVML(t *testing.T) {
	tests := []struct {
		ret  nvml.Return
		want string
	}{
		{nvml.ERROR_LIBRARY_NOT_FOUND, "lib.so not found"},
		{nvml.ERROR_DRIVER_NOT_LOADED, "kernel driver is not loaded"},
		{nvml.ERROR_NO_PERMISSION, "no permission"},
		{nvml.ERROR_LIB_RM_VERSION_MISMATCH, "versions differ"},
		{nvml.ERROR_UNKNOWN, "return code 999"},
	}
	for _, tt := range tests {
		if got := initFailure("lib.so", tt.ret); !strings.Contains(got, tt.want) {
			t.Errorf("initFailure(%d) = %q, want it to contain %q", int32(tt.ret), got, tt.want)
		}
	}
}

func TestCString(t *testing.T) {
	b := []int8{'0', '0', ':', '1', 0, 'x'}
	if got := cString(b); got != "00:1" {
		t.Errorf("cString = %q, want %q", got, "00:1")
	}
	if got := cString([]int8{'a', 'b'}); got != "ab" {
		t.Errorf("cString without NUL = %q, want %q", got, "ab")
	}
}

// TestGoNVMLInitWithoutLibrary pins the go-nvml behaviour Discover relies
// on behind its preflight: Init without the library answers
// ERROR_LIBRARY_NOT_FOUND instead of calling into C.
func TestGoNVMLInitWithoutLibrary(t *testing.T) {
	lib := nvml.New(nvml.WithLibraryPath("/nonexistent/libnvidia-ml.so.1"))
	if ret := lib.Init(); ret != nvml.ERROR_LIBRARY_NOT_FOUND {
		t.Fatalf("Init = %d, want ERROR_LIBRARY_NOT_FOUND", int32(ret))
	}
	if got := initFailure("/nonexistent/libnvidia-ml.so.1", nvml.ERROR_LIBRARY_NOT_FOUND); !strings.Contains(got, "not found") {
		t.Errorf("initFailure = %q", got)
	}
}
