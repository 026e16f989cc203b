package infbench

import (
	"os"
	"runtime"
	"strconv"
	"syscall"
	"time"
)

// lockPreciseTimer pins the calling goroutine to its thread and sets the
// thread's timer slack to 1 µs, so that sleepUntil wakes within tens of
// microseconds: the runtime's timers wake about a millisecond late on
// this kind of machine, which would send an open loop's arrivals in
// batches. The returned func restores the default slack and unpins.
func lockPreciseTimer() (unlock func()) {
	runtime.LockOSThread()
	const prSetTimerSlack = 29
	syscall.RawSyscall(syscall.SYS_PRCTL, prSetTimerSlack, 1000, 0)
	return func() {
		syscall.RawSyscall(syscall.SYS_PRCTL, prSetTimerSlack, 0, 0) // 0: the default
		runtime.UnlockOSThread()
	}
}

// sleepUntil sleeps until shortly before t (the wake-up latency early).
func sleepUntil(t time.Time) {
	const early = 25 * time.Microsecond
	d := time.Until(t) - early
	if d <= 0 {
		return
	}
	ts := syscall.NsecToTimespec(int64(d))
	for syscall.Nanosleep(&ts, &ts) == syscall.EINTR {
	}
}

// processCPU is the CPU time a process's threads have run, in
// nanoseconds from each /proc/<pid>/task/<tid>/schedstat (the 10 ms
// ticks of /proc/<pid>/stat are too coarse for rounds of a second);
// ok is false when it cannot be read.
func processCPU(pid int) (time.Duration, bool) {
	dir := "/proc/" + strconv.Itoa(pid) + "/task"
	tasks, err := os.ReadDir(dir)
	if err != nil {
		return 0, false
	}
	var sum time.Duration
	for _, t := range tasks {
		b, err := os.ReadFile(dir + "/" + t.Name() + "/schedstat")
		if err != nil {
			continue // the thread exited
		}
		d, ok := parseSchedstat(b)
		if !ok {
			return 0, false
		}
		sum += d
	}
	return sum, true
}

// selfCPU is this process's CPU time, exited threads included.
func selfCPU() (time.Duration, bool) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, false
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), true
}
