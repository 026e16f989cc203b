//go:build !linux

package schedbench

import "time"

// threadCPU reports that no per-thread CPU clock is available.
func threadCPU() (time.Duration, bool) { return 0, false }
