package cli

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/gangway/gangway/internal/api"
	"github.com/gangway/gangway/internal/api/client"
	"github.com/gangway/gangway/internal/base/cmdkit"
)

// runCancel is `gangway cancel ID...`, or as scancel by what jobs are:
// --user, --name, --queue, --state (with IDs, only those of them that
// match). It says what it cancelled and fails if any cancel did.
func runCancel(ctx context.Context, e *Env, args []string) int {
	fs := cmdkit.NewFlags(e.Stderr, "cancel", "ID... | --user U | --name N | --queue Q | --state pending|running | -l SELECTOR")
	srv := serverFlag(fs, e)
	array := fs.Bool("array", false, "cancel every task of the array each ID belongs to")
	user := fs.String("user", "", "cancel this user's unfinished jobs (scancel -u)")
	name := fs.String("name", "", "cancel the unfinished jobs of this name (scancel -n)")
	queue := fs.String("queue", "", "cancel the unfinished jobs of this queue (scancel -p)")
	state := fs.String("state", "", "cancel only jobs in this state: pending or running (scancel -t)")
	selector := fs.String("l", "", "cancel the unfinished jobs whose labels this selects, as kubectl's -l: key=value,key!=value,key,!key")
	fs.StringVar(selector, "selector", "", "long for -l")
	signal := fs.String("signal", "", "send this signal to every rank of each running job instead of cancelling it (scancel --signal): "+api.SignalForms())
	fs.StringVar(signal, "s", "", "short for --signal")
	pos, code, ok := cmdkit.ParseArgs(fs, args)
	if !ok {
		return code
	}
	var phase api.JobPhase
	switch strings.ToLower(*state) {
	case "":
	case "pending", "pd":
		phase = api.JobPending
	case "running", "r":
		phase = api.JobRunning
	default:
		fmt.Fprintf(e.Stderr, "gangway cancel: --state %q: want pending or running\n", *state)
		return 2
	}
	if _, err := api.ParseSelector(*selector); err != nil {
		fmt.Fprintf(e.Stderr, "gangway cancel: -l: %v\n", err)
		return 2
	}
	sig := ""
	if *signal != "" {
		var err error
		if sig, err = api.ParseSignal(*signal); err != nil {
			fmt.Fprintf(e.Stderr, "gangway cancel: --signal: %v\n", err)
			return 2
		}
		if *array {
			fmt.Fprintln(e.Stderr, "gangway cancel: --signal takes job IDs, not --array")
			return 2
		}
	}
	filtered := *user != "" || *name != "" || *queue != "" || phase != "" || *selector != ""
	if len(pos) == 0 && !filtered {
		fs.Usage()
		return 2
	}
	if *array && filtered {
		fmt.Fprintln(e.Stderr, "gangway cancel: --array takes IDs, not --user, --name, --queue, --state or -l")
		return 2
	}
	c, err := srv.client()
	if err != nil {
		return fail(e, err)
	}
	given := jobIDs(pos)
	ids := given
	if filtered {
		l, err := c.Jobs(ctx, client.JobQuery{Live: true, User: *user, Selector: *selector})
		if err != nil {
			return fail(e, err)
		}
		ids = nil
		for _, j := range l.Jobs {
			switch {
			case len(given) > 0 && !slices.Contains(given, j.ID),
				*user != "" && j.Spec.User != *user,
				*name != "" && j.Spec.Name != *name,
				*queue != "" && j.Spec.Queue != *queue,
				phase != "" && j.Status.Phase != phase,
				sig != "" && j.Status.Phase != api.JobRunning:
				continue
			}
			ids = append(ids, j.ID)
		}
		if len(ids) == 0 {
			fmt.Fprintln(e.Stdout, "no unfinished job matches")
			return 0
		}
	}
	failed := 0
	for _, id := range ids {
		if *array {
			a, err := c.CancelArray(ctx, id)
			if err != nil {
				fmt.Fprintf(e.Stderr, "gangway cancel: %s: %v\n", id, err)
				failed++
				continue
			}
			fmt.Fprintf(e.Stdout, "array %s: cancel requested for %d jobs (%d had already finished)\n", a.ArrayID, a.Cancelled, a.Done)
			continue
		}
		if sig != "" {
			if _, err := c.Signal(ctx, id, sig); err != nil {
				fmt.Fprintf(e.Stderr, "gangway cancel: %s: %v\n", id, err)
				failed++
				continue
			}
			fmt.Fprintf(e.Stdout, "job %s: %s requested for every rank\n", id, sig)
			continue
		}
		if _, err := c.Cancel(ctx, id); err != nil {
			fmt.Fprintf(e.Stderr, "gangway cancel: %s: %v\n", id, err)
			failed++
			continue
		}
		fmt.Fprintf(e.Stdout, "job %s: cancel requested\n", id)
	}
	if failed > 0 {
		return 1
	}
	return 0
}
