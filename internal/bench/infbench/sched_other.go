//go:build !linux

package infbench

import "time"

func lockPreciseTimer() (unlock func()) { return func() {} }

func sleepUntil(t time.Time) {
	if d := time.Until(t); d > 0 {
		time.Sleep(d)
	}
}

func processCPU(int) (time.Duration, bool) { return 0, false }
func selfCPU() (time.Duration, bool)       { return 0, false }
