package cli

import (
	"context"
	"fmt"

	"github.com/gangway/gangway/internal/bench/durbench"
	"github.com/gangway/gangway/internal/bench/e2ebench"
	"github.com/gangway/gangway/internal/bench/hbbench"
	"github.com/gangway/gangway/internal/bench/schedbench"
	"github.com/gangway/gangway/internal/cli/infcli"
)

// benches are the whole-system benchmarks, each a subsystem's own command.
var benches = map[string]func(context.Context, *Env, []string) int{
	"scheduler":  wrap(schedbench.Main),
	"e2e":        wrap(e2ebench.Main),
	"heartbeats": wrap(hbbench.Main),
	"durability": wrap(durbench.Main),
	"inference": func(ctx context.Context, e *Env, args []string) int {
		return infcli.BenchInference(ctx, args, e.Stdout, e.Stderr)
	},
}

func runBench(ctx context.Context, e *Env, args []string) int {
	if len(args) > 0 {
		if b, ok := benches[args[0]]; ok {
			return b(ctx, e, args[1:])
		}
	}
	fmt.Fprintln(e.Stderr, "Usage: gangway bench scheduler|inference|e2e|heartbeats|durability [-o json]   (-h after the name lists its flags)")
	return 2
}
