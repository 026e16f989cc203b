// Command train-go is gangway's example data-parallel trainer as a
// standalone program; the gangway binary runs the same code as
// `gangway train-example`. See README.md and package trainer.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"

	"github.com/gangway/gangway/examples/train-go/trainer"
)

func main() {
	ctx, cancel := context.WithCancelCause(context.Background())
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, os.Interrupt)
	var got atomic.Value // the os.Signal that stopped training
	go func() {          // lives as long as the process
		s := <-sigs
		got.Store(s)
		cancel(fmt.Errorf("received %v", s))
	}()
	code := trainer.Main(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	if s, ok := got.Load().(syscall.Signal); ok && code == trainer.ExitFailed {
		code = 128 + int(s) // the shell's convention, so the launcher sees a kill
	}
	os.Exit(code)
}
