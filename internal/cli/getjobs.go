package cli

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/gangway/gangway/internal/api"
	"github.com/gangway/gangway/internal/api/client"
	"github.com/gangway/gangway/internal/base/cmdkit"
	"github.com/gangway/gangway/internal/goodput"
)

// jobsAsked is what `gangway get jobs` was asked, flags read.
type jobsAsked struct {
	out                  cmdkit.Format
	live, all, watch, me bool
	limit                int
	user, since          string
	selector             string // -l
	history              bool   // --all or --since: sacct's columns
}

// checkJobsFlags refuses what get jobs cannot do, naming the flag, before
// any server is asked.
func checkJobsFlags(a *jobsAsked) error {
	switch {
	case a.me && a.user != "":
		return fmt.Errorf("give --user or --me, not both")
	case a.live && a.all:
		return fmt.Errorf("--live lists unfinished jobs, --all adds finished ones from the archive: give one or the other")
	case a.watch && (a.all || a.since != ""):
		return fmt.Errorf("--watch follows the jobs the store holds as they change; --all and --since list a history: give one or the other")
	case a.watch && a.out == cmdkit.Wide:
		return fmt.Errorf("--watch prints the table's columns, or one object per change with -o json, -o yaml or -o jsonpath; -o wide is for a list")
	case a.watch && a.out == cmdkit.CSV:
		return fmt.Errorf("--watch prints a table, or one object per change with -o json or -o yaml; -o csv is for a list")
	}
	if _, err := api.ParseSelector(a.selector); err != nil {
		return fmt.Errorf("-l: %w", err)
	}
	if a.since != "" {
		if _, err := api.ParseSince(a.since, time.Now()); err != nil { // the server reads it again on its clock
			return err
		}
	}
	a.history = a.all || a.since != ""
	return nil
}

// getJobs prints the job list: squeue's view (what runs and waits, and
// the finished jobs the store still keeps), or with --all or --since
// sacct's (finished jobs too, from the server's job archive, newest
// first); --watch follows it.
func getJobs(ctx context.Context, e *Env, c *client.Client, a jobsAsked) int {
	if a.me {
		w, err := c.WhoAmI(ctx)
		if err != nil {
			return fail(e, err)
		}
		a.user = w.Name
	}
	q := client.JobQuery{Live: a.live, Limit: a.limit, User: a.user, Since: a.since, All: a.all, Selector: a.selector}
	if a.watch {
		return watchJobs(ctx, e, c, q, a.out)
	}
	l, err := c.Jobs(ctx, q)
	if err != nil {
		return fail(e, err)
	}
	for _, w := range l.Warnings {
		fmt.Fprintf(e.Stderr, "gangway: warning: %s\n", w)
	}
	switch {
	case a.out == cmdkit.CSV:
		return exitOn(e, jobsCSV(e.Stdout, l.Jobs, time.Now()))
	case a.out != cmdkit.Table && a.out != cmdkit.Wide:
		return exitOn(e, printAs(e, a.out, l.Jobs))
	case a.history:
		tw := tabwriter.NewWriter(e.Stdout, 0, 4, 2, ' ', 0)
		for _, r := range append([][]string{historyHead}, historyRows(l.Jobs, time.Now(), false)...) {
			fmt.Fprintln(tw, strings.Join(r, "\t"))
		}
		return exitOn(e, tw.Flush())
	}
	printJobs(e.Stdout, l.Jobs, a.out == cmdkit.Wide)
	return 0
}

// historyHead are the columns of `get jobs --all`, as sacct's.
var historyHead = []string{"ID", "NAME", "USER", "QUEUE", "STATE", "GPUS", "SUBMITTED", "STARTED", "ENDED", "ELAPSED", "ATTEMPTS", "RESTARTS", "EXIT", "REASON"}

// jobsCSVHead are the columns of `get jobs -o csv`: sacct's, every time
// in RFC 3339 and the elapsed time in seconds.
var jobsCSVHead = []string{"id", "name", "user", "queue", "state", "gpus", "submitted", "started", "ended", "elapsed_s", "attempts", "restarts", "exit", "reason"}

// jobsCSV writes jobs in sacct's columns as CSV, under a header row.
func jobsCSV(w io.Writer, jobs []*api.Job, now time.Time) error {
	return cmdkit.WriteCSV(w, jobsCSVHead, historyRows(jobs, now, true))
}

// historyRows are jobs in sacct's columns: for a table (times local,
// elapsed as [D-]HH:MM:SS, "-" for nothing, the reason cut short) or for
// CSV (times RFC 3339, elapsed in seconds, "" for nothing, the reason
// whole).
func historyRows(jobs []*api.Job, now time.Time, csv bool) [][]string {
	none := "-"
	if csv {
		none = ""
	}
	when := func(t time.Time) string {
		switch {
		case t.IsZero():
			return none
		case csv:
			return t.UTC().Format(time.RFC3339)
		}
		return t.Local().Format("2006-01-02T15:04:05")
	}
	rows := make([][]string, 0, len(jobs))
	for _, j := range jobs {
		st := &j.Status
		ended := time.Time{}
		if st.Phase.Final() {
			ended = st.FinishedAt
		}
		elapsed := none
		if !st.StartedAt.IsZero() {
			end := now
			if st.Phase.Final() {
				end = ended
			}
			if d := end.Sub(st.StartedAt); !end.IsZero() && d >= 0 {
				elapsed = slurmElapsed(d)
				if csv {
					elapsed = strconv.FormatInt(int64(d.Seconds()), 10)
				}
			}
		}
		exit := none
		if a := st.Current(); a != nil && a.Phase == api.AttemptEnded {
			exit = string(api.CauseOf(a))
		}
		name, reason := jobName(j), st.Reason
		if !csv {
			name, reason = dash(name), dash(truncate(reason, 60))
		}
		gpus := strconv.FormatFloat(goodput.GPUs(&j.Spec), 'f', -1, 64)
		rows = append(rows, []string{j.ID, name, orNone(j.Spec.User, none), j.Spec.Queue, string(st.Phase), gpus,
			when(j.SubmittedAt), when(st.StartedAt), when(ended), elapsed,
			strconv.Itoa(len(st.Attempts)), strconv.Itoa(st.Restarts), exit, reason})
	}
	return rows
}

// jobName is a job's name, with its index in its array in brackets
// (Slurm writes the task of array 12 at index 7 as 12_7).
func jobName(j *api.Job) string {
	name := j.Spec.Name
	if t := j.Array; t != nil {
		name += "[" + strconv.Itoa(t.Index) + "]"
	}
	return name
}

func orNone(s, none string) string {
	if s == "" {
		return none
	}
	return s
}

// slurmElapsed writes d as sacct's Elapsed: [D-]HH:MM:SS.
func slurmElapsed(d time.Duration) string {
	s := int64(d / time.Second)
	days, s := s/86400, s%86400
	hms := fmt.Sprintf("%02d:%02d:%02d", s/3600, s%3600/60, s%60)
	if days > 0 {
		return strconv.FormatInt(days, 10) + "-" + hms
	}
	return hms
}

// sinceHelp is --since's help for get jobs.
var sinceHelp = "jobs: only those not finished, or finished since " + sinceForms + "; with sacct's columns"
