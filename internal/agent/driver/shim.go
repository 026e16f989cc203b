package driver

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"syscall"
)

// Limiter applies per-task cgroup limits to a pid; nil means none.
type Limiter func(name string, pid int, memoryBytes, cpuMillis int64) (string, error)

// ShimMain is the hidden `gangway task-shim` command: it runs the rank as
// its child in the same process group, survives the group's SIGTERM (the
// rank decides what to do with it), and writes the rank's exit status to
// --exit-file before exiting with the same code.
func ShimMain(args []string, stderr io.Writer, limit Limiter) int {
	fs := flag.NewFlagSet("task-shim", flag.ContinueOnError)
	fs.SetOutput(stderr)
	exitFile := fs.String("exit-file", "", "where to write the exit status")
	cg := fs.String("cgroup", "", "cgroup name for limits")
	mem := fs.Int64("memory-bytes", 0, "memory limit")
	cpu := fs.Int64("cpu-millis", 0, "CPU limit in milli-cores")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *exitFile == "" || fs.NArg() == 0 {
		fmt.Fprintln(stderr, "task-shim: need --exit-file and a command after --")
		return 2
	}
	if (*mem > 0 || *cpu > 0) && limit != nil {
		// Join the cgroup before the child exists so it inherits it.
		if applied, err := limit(*cg, os.Getpid(), *mem, *cpu); err != nil {
			fmt.Fprintf(stderr, "gangway: resource limits not applied: %v\n", err)
		} else {
			fmt.Fprintf(stderr, "gangway: %s\n", applied)
		}
	}
	// Catch (not ignore: ignored signals stay ignored across exec) the
	// signals meant for the rank.
	sigc := make(chan os.Signal, 8)
	signal.Notify(sigc, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGUSR1, syscall.SIGUSR2)
	defer signal.Stop(sigc)
	go func() {
		for range sigc {
		}
	}()

	cmd := exec.Command(fs.Arg(0), fs.Args()[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = nil, os.Stdout, os.Stderr
	var e Exit
	if err := cmd.Start(); err != nil {
		e = Exit{Code: 127, Message: err.Error()}
		fmt.Fprintf(stderr, "gangway: cannot start %s: %v\n", fs.Arg(0), err)
	} else {
		err := cmd.Wait()
		var ee *exec.ExitError
		switch {
		case err == nil:
		case errors.As(err, &ee):
			if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
				e = Exit{Code: 128 + int(ws.Signal()), Signal: ws.Signal().String()}
			} else {
				e = Exit{Code: ee.ExitCode()}
			}
		default:
			e = Exit{Code: 1, Message: err.Error()}
		}
	}
	if err := os.MkdirAll(filepath.Dir(*exitFile), 0o755); err == nil {
		_ = writeJSONFile(*exitFile, e)
	}
	return e.Code
}
