// Package cpuprof writes a CPU profile of a whole gangway process when
// $GANGWAY_CPUPROFILE names a directory: the way to see where agents and
// supervisors, which run as processes of their own, spend their time. It
// also writes allocation profiles for the commands' --memprofile flags.
//
// It imports only the standard library.
package cpuprof

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/pprof"
)

// Start profiles this process into DIR/NAME-PID.pprof when dir is set and
// returns the function that ends the profile.
func Start(dir, name string, stderr io.Writer) (stop func()) {
	if dir == "" {
		return func() {}
	}
	f, err := os.Create(filepath.Join(dir, fmt.Sprintf("%s-%d.pprof", name, os.Getpid())))
	if err == nil {
		err = pprof.StartCPUProfile(f)
	}
	if err != nil {
		fmt.Fprintln(stderr, "gangway: GANGWAY_CPUPROFILE:", err)
		return func() {}
	}
	return func() { pprof.StopCPUProfile(); f.Close() }
}

// WriteAllocs writes this process's allocation profile (what it allocated
// so far, by call site) to path.
func WriteAllocs(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := pprof.Lookup("allocs").WriteTo(f, 0); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
