package cli

import (
	"context"
	"fmt"

	"github.com/gangway/gangway/internal/base/cmdkit"
)

// runHold is `gangway hold ID...` (Slurm's scontrol hold): waiting jobs
// are placed by nothing until released. runRelease is `gangway release
// ID...`. Each says what it did; one that fails fails the command.
func runHold(ctx context.Context, e *Env, args []string) int {
	return holdOrRelease(ctx, e, "hold", args)
}
func runRelease(ctx context.Context, e *Env, args []string) int {
	return holdOrRelease(ctx, e, "release", args)
}

// runRequeue is `gangway requeue ID...` (Slurm's scontrol requeue): each
// running job's ranks get the checkpoint signal, its attempt stops, and it
// waits again under its ID.
func runRequeue(ctx context.Context, e *Env, args []string) int {
	return holdOrRelease(ctx, e, "requeue", args)
}

func holdOrRelease(ctx context.Context, e *Env, verb string, args []string) int {
	fs := cmdkit.NewFlags(e.Stderr, verb, "ID...")
	srv := serverFlag(fs, e)
	pos, code, ok := cmdkit.ParseArgs(fs, args)
	if !ok {
		return code
	}
	if len(pos) == 0 {
		fs.Usage()
		return 2
	}
	c, err := srv.client()
	if err != nil {
		return fail(e, err)
	}
	failed := 0
	for _, id := range jobIDs(pos) {
		var err error
		switch verb {
		case "hold":
			_, err = c.Hold(ctx, id)
		case "release":
			_, err = c.Release(ctx, id)
		default:
			_, err = c.Requeue(ctx, id)
		}
		if err != nil {
			fmt.Fprintf(e.Stderr, "gangway %s: %s: %v\n", verb, id, err)
			failed++
			continue
		}
		fmt.Fprintf(e.Stdout, "job %s: %s\n", id, map[string]string{"hold": "held", "release": "released", "requeue": "requeue requested (checkpoint signal sent; it waits again once stopped)"}[verb])
	}
	if failed > 0 {
		return 1
	}
	return 0
}
