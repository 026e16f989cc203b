// Command gangway is the GPU cluster orchestrator: control plane, node agent
// and user CLI in one binary. See `gangway --help`.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/gangway/gangway/internal/cli"
)

func main() {
	if name := cli.SlurmShimName(os.Args[0]); name != "" {
		// A Slurm job's rank runs srun or scontrol: gangway's stand-ins.
		os.Exit(cli.Shim(name, os.Args[1:], &cli.Env{Stdout: os.Stdout, Stderr: os.Stderr, Getenv: os.Getenv}))
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Main(ctx, os.Args[1:], &cli.Env{Stdout: os.Stdout, Stderr: os.Stderr, Getenv: os.Getenv})
	stop()
	os.Exit(code)
}
