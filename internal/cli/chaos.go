package cli

import (
	"context"

	"github.com/gangway/gangway/internal/bench/chaos"
)

// runChaos is `gangway chaos`: the fault-injection harness.
func runChaos(ctx context.Context, e *Env, args []string) int {
	return chaos.Main(ctx, args, e.Stdout, e.Stderr)
}

// runChaosRank is the hidden `gangway chaos-rank --log FILE -- CMD...` the
// harness wraps every rank in, so that each records its own start and exit.
func runChaosRank(ctx context.Context, e *Env, args []string) int {
	return chaos.RankMain(args, e.Getenv, e.Stdout, e.Stderr)
}
