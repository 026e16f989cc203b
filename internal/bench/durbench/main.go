package durbench

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/gangway/gangway/internal/base/cmdkit"
)

// Main is `gangway bench durability [-o json] [--submissions 1000] ...`: it
// runs the check and prints the result, a summary or JSON, on stdout;
// progress goes to stderr. It returns 0 when nothing acknowledged was lost
// or duplicated, 1 when something was or the run failed, 2 for bad flags.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("bench durability", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, "Usage: gangway bench durability [-o json] [--submissions 1000] [flags]\n\n"+
			"Starts `gangway server` as a child process, fires SUBMISSIONS submissions with idempotency\n"+
			"keys (every ARRAY-EVERY-th an array), SIGKILLs the server after KILL-AFTER answers, restarts\n"+
			"it on the same data directory and checks that every acknowledged submission is stored\n"+
			"exactly once and that retrying the others with their keys stores each at most once.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	var cfg Config
	out := cmdkit.OutputFlag(fs)
	fs.IntVar(&cfg.Submissions, "submissions", 1000, "submissions to fire")
	fs.IntVar(&cfg.Concurrency, "concurrency", 100, "submissions in flight at once")
	fs.IntVar(&cfg.KillAfter, "kill-after", 0, "success answers before the SIGKILL (default a third of --submissions)")
	fs.IntVar(&cfg.ArrayEvery, "array-every", 10, "every Nth submission is an array (negative: none)")
	fs.IntVar(&cfg.ArrayTasks, "array-tasks", 300, "tasks per array")
	fs.DurationVar(&cfg.Timeout, "timeout", 10*time.Minute, "bound on the whole run")
	fs.StringVar(&cfg.Exe, "server-exe", "", "the gangway binary to run as the server, to check another build (default: this one)")
	fs.StringVar(&cfg.Dir, "dir", "", "working directory (default: a temporary one)")
	fs.BoolVar(&cfg.Keep, "keep", false, "keep the working directory (the server's data and log)")
	if code, ok := cmdkit.ParseNoArgs(fs, args); !ok {
		return code
	}
	res, err := Run(ctx, cfg, stderr)
	if res != nil {
		_ = cmdkit.Print(stdout, *out, res, func(w io.Writer) error { PrintSummary(w, res); return nil })
	}
	switch {
	case err != nil:
		fmt.Fprintf(stderr, "gangway bench durability: FAILED: %v\n", err)
		if errors.Is(err, ErrCannotRun) {
			fmt.Fprintln(stderr, "(run it from the gangway binary, which it starts as `gangway server`)")
		}
		return 1
	case !res.OK:
		fmt.Fprintln(stderr, "gangway bench durability: FAILED: acknowledged submissions lost, or submissions stored twice")
		return 1
	}
	return 0
}

// PrintSummary writes r for a person.
func PrintSummary(w io.Writer, r *Result) {
	verdict := "OK"
	if !r.OK {
		verdict = "FAILED"
	}
	fmt.Fprintf(w, "gangway durability: %s\n", verdict)
	fmt.Fprintf(w, "  submitted     %6d  (%d arrays)\n", r.Submitted, r.Arrays)
	fmt.Fprintf(w, "  acknowledged  %6d  before the SIGKILL, at %.0f/s\n", r.Acknowledged, r.SubmitPerS)
	fmt.Fprintf(w, "  present       %6d  stored once, under the ID answered, which the key answers too\n", r.Present)
	fmt.Fprintf(w, "  missing       %6d  acknowledged, not stored under the ID answered\n", r.Missing)
	fmt.Fprintf(w, "  key mismatch  %6d  acknowledged, their key now answers another ID\n", r.KeyMismatch)
	fmt.Fprintf(w, "  duplicated    %6d  stored more than once\n", r.Duplicated)
	fmt.Fprintf(w, "  partial       %6d  arrays not whole\n", r.Partial)
	fmt.Fprintf(w, "  unanswered    %6d  in flight or unsent at the kill (%d of them stored anyway), sent again with their key\n", r.Unanswered, r.InFlightStored)
	fmt.Fprintf(w, "  retry failed  %6d\n", r.RetryFailed)
	fmt.Fprintf(w, "  restart       %6.2fs from the SIGKILL to leading again (serving after %.2fs)\n", r.RestartS, r.ServingS)
	if len(r.Problems) > 0 {
		fmt.Fprintf(w, "problems:\n  %s\n", strings.Join(r.Problems, "\n  "))
	}
}
