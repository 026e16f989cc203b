package driver

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// Limiter applies per-task cgroup limits to a pid; nil means none.
type Limiter func(name string, pid int, memoryBytes, cpuMillis int64) (string, error)

// CgExecMain is the hidden `cg-exec` command the supervisor runs in front
// of a rank with memory or CPU limits: it moves itself into the rank's
// cgroup and then becomes the rank (exec), so the rank and everything it
// forks are inside, and the supervisor still reaps the rank itself. With
// --uid, it then drops to that uid, --gid and no other group before the
// exec (the rank's run-as account: joining the cgroup takes root). It
// returns only when the switch or the exec fails; a failed switch runs
// nothing, never the rank as root.
func CgExecMain(args []string, stderr io.Writer, limit Limiter) int {
	fs := flag.NewFlagSet("cg-exec", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cg := fs.String("cgroup", "", "cgroup name")
	mem := fs.Int64("memory-bytes", 0, "memory limit")
	cpu := fs.Int64("cpu-millis", 0, "CPU limit in milli-cores")
	uid := fs.Int("uid", -1, "run the command as this uid (with --gid)")
	gid := fs.Int("gid", -1, "run the command with this gid as its only group")
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
	if *uid >= 0 {
		if err := becomeAccount(*uid, *gid); err != nil {
			fmt.Fprintf(stderr, "gangway: cannot run as uid %d gid %d: %v\n", *uid, *gid, err)
			return 126
		}
	}
	err := syscall.Exec(fs.Arg(0), fs.Args(), os.Environ())
	fmt.Fprintf(stderr, "gangway: cannot start %s: %v\n", fs.Arg(0), err)
	return 127
}

// becomeAccount switches every thread of this process to uid and gid, with
// gid as its only group: groups and gid first, while it may still.
func becomeAccount(uid, gid int) error {
	if gid < 0 {
		return fmt.Errorf("--gid is required with --uid")
	}
	if err := syscall.Setgroups([]int{gid}); err != nil {
		return fmt.Errorf("setgroups: %w", err)
	}
	if err := syscall.Setgid(gid); err != nil {
		return fmt.Errorf("setgid: %w", err)
	}
	if err := syscall.Setuid(uid); err != nil {
		return fmt.Errorf("setuid: %w", err)
	}
	// The switch cleared the death signal the supervisor gave this rank:
	// set it again, and go if the supervisor is already gone.
	if err := unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(syscall.SIGKILL), 0, 0, 0); err != nil {
		return fmt.Errorf("prctl: %w", err)
	}
	if os.Getppid() == 1 {
		return errors.New("the supervisor died")
	}
	return nil
}
