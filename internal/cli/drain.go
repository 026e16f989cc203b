package cli

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/gangway/gangway/internal/api"
	"github.com/gangway/gangway/internal/api/client"
	"github.com/gangway/gangway/internal/base/cmdkit"
)

// runDrain is `gangway drain NODE`: as Slurm's drain, the node takes no
// new ranks and its running gangs finish there (until --timeout, then
// they move); --now moves them at once. It waits, saying what still
// runs, until the node is empty, unless --no-wait.
func runDrain(ctx context.Context, e *Env, args []string) int {
	fs := cmdkit.NewFlags(e.Stderr, "drain", "NODE [--reason TEXT] [--timeout D | --now] [--no-wait]")
	srv := serverFlag(fs, e)
	reason := fs.String("reason", "", "why, shown in get nodes and describe node (as Slurm's --reason)")
	timeout := fs.String("timeout", "", "move the gangs still running after this long (30m, 2:00:00; default: let them finish)")
	now := fs.Bool("now", false, "move the node's gangs elsewhere now (from their last checkpoint) rather than let them finish")
	noWait := fs.Bool("no-wait", false, "return once the drain is set, not when the node is empty")
	pos, code, ok := cmdkit.ParseArgs(fs, args)
	if !ok {
		return code
	}
	if len(pos) != 1 {
		fs.Usage()
		return 2
	}
	req := api.DrainRequest{Reason: *reason, Now: *now}
	if *timeout != "" {
		if *now {
			fmt.Fprintln(e.Stderr, "gangway drain: --timeout and --now: give one (--now moves the gangs at once)")
			return 2
		}
		d, err := api.ParseDuration(*timeout)
		if err != nil || d <= 0 {
			fmt.Fprintf(e.Stderr, "gangway drain: --timeout %q: want a positive duration (30m, 2:00:00; a bare number is minutes)\n", *timeout)
			return 2
		}
		req.Timeout = api.Duration(d)
	}
	c, err := srv.client()
	if err != nil {
		return fail(e, err)
	}
	node := pos[0]
	if _, err := c.Drain(ctx, node, req); err != nil {
		return fail(e, err)
	}
	switch {
	case *now:
		fmt.Fprintf(e.Stdout, "node %s: draining: its gangs move elsewhere now\n", node)
	case req.Timeout > 0:
		fmt.Fprintf(e.Stdout, "node %s: draining: no new ranks; running gangs may finish within %s, then move\n", node, req.Timeout.D())
	default:
		fmt.Fprintf(e.Stdout, "node %s: draining: no new ranks; running gangs may finish\n", node)
	}
	if *noWait {
		return 0
	}
	last := ""
	for {
		jobs, err := jobsOn(ctx, c, node)
		if err != nil {
			return fail(e, err)
		}
		if len(jobs) == 0 {
			fmt.Fprintf(e.Stdout, "node %s: drained\n", node)
			return 0
		}
		if msg := fmt.Sprintf("node %s: %d gang(s) still running: job %s", node, len(jobs), strings.Join(jobs, ", job ")); msg != last {
			fmt.Fprintln(e.Stdout, msg)
			last = msg
		}
		select {
		case <-ctx.Done():
			fmt.Fprintf(e.Stderr, "gangway drain: stopped waiting; node %s stays draining (gangway uncordon %s ends it)\n", node, node)
			return 1
		case <-time.After(time.Second):
		}
	}
}

// jobsOn lists the live jobs whose current attempt holds node.
func jobsOn(ctx context.Context, c *client.Client, node string) ([]string, error) {
	l, err := c.Jobs(ctx, client.JobQuery{Live: true})
	if err != nil {
		return nil, err
	}
	var out []string
	for _, j := range l.Jobs {
		if a := j.Status.Current(); a != nil && a.Phase != api.AttemptEnded && slices.Contains(a.Nodes(), node) {
			out = append(out, j.ID)
		}
	}
	return out, nil
}
