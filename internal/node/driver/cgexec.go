package driver

import (
	"flag"
	"fmt"
	"io"
	"os"
	"syscall"
)

// Limiter applies per-task cgroup limits to a pid; nil means none.
type Limiter func(name string, pid int, memoryBytes, cpuMillis int64) (string, error)

// CgExecMain is the hidden `cg-exec` command the supervisor runs in front
// of a rank with memory or CPU limits: it moves itself into the rank's
// cgroup and then becomes the rank (exec), so the rank and everything it
// forks are inside, and the supervisor still reaps the rank itself. It
// returns only when the exec fails.
func CgExecMain(args []string, stderr io.Writer, limit Limiter) int {
	fs := flag.NewFlagSet("cg-exec", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cg := fs.String("cgroup", "", "cgroup name")
	mem := fs.Int64("memory-bytes", 0, "memory limit")
	cpu := fs.Int64("cpu-millis", 0, "CPU limit in milli-cores")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() == 0 {
		fmt.Fprintln(stderr, "cg-exec: need a command after --")
		return 2
	}
	if (*mem > 0 || *cpu > 0) && limit != nil {
		if applied, err := limit(*cg, os.Getpid(), *mem, *cpu); err != nil {
			fmt.Fprintf(stderr, "gangway: resource limits not applied: %v\n", err)
		} else {
			fmt.Fprintf(stderr, "gangway: %s\n", applied)
		}
	}
	err := syscall.Exec(fs.Arg(0), fs.Args(), os.Environ())
	fmt.Fprintf(stderr, "gangway: cannot start %s: %v\n", fs.Arg(0), err)
	return 127
}
