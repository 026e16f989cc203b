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
	"github.com/gangway/gangway/internal/base/cmdkit"
	"github.com/gangway/gangway/internal/scheduler/policy"
)

func runQueue(ctx context.Context, e *Env, args []string) int {
	if len(args) == 0 || (args[0] != "set" && args[0] != "delete") {
		fmt.Fprintln(e.Stderr, "Usage: gangway queue set NAME [--guarantee N] [--borrow-limit N] [--weight W] [--cohort C] [--users U,...] [--groups G,...] [--allow-root] [--policy P] [--lane-share S] [--overdue-after D] [--level-base D] [--min-run D] [--lane-turn D]\n       gangway queue delete NAME")
		return 2
	}
	verb := args[0]
	fs := cmdkit.NewFlags(e.Stderr, "queue "+verb, "NAME [flags]")
	srv := serverFlag(fs, e)
	guarantee := fs.Int("guarantee", 0, "GPUs the queue always gets, preempting borrowers")
	var borrow optionalInt
	fs.Var(&borrow, "borrow-limit", "`GPUs` it may borrow above its guarantee (default unbounded)")
	weight := fs.Float64("weight", 1, "weight in fair share")
	cohort := fs.String("cohort", "", "cohort whose queues lend each other idle guarantee")
	users := fs.String("users", "", "comma-separated users who may submit to it (with --groups; both empty: every user)")
	groups := fs.String("groups", "", "comma-separated groups whose users may submit to it")
	allowRoot := fs.Bool("allow-root", false, "let users whose account is root (uid 0) run jobs in it")
	pol := fs.String("policy", "", "how its pending jobs are ordered and preempt its running ones: "+strings.Join(api.QueuePolicies, ", ")+" (default "+api.DefaultQueuePolicy+")")
	laneShare := fs.Float64("lane-share", 0, "gangway: the share of the GPUs that jobs in the overdue lane may hold, in (0, 1] (default 0.25)")
	var overdue, levelBase, minRun, laneTurn durationValue
	fs.Var(&overdue, "overdue-after", "gangway, gangway-4h, las: the `wait` after which a job is overdue (gangway: it enters the lane; the others: it ranks first) (default 4h)")
	fs.Var(&levelBase, "level-base", "gangway, gangway-4h, las: the `GPU-time` a job attains before it leaves the first level, as a duration of one GPU (1h: one GPU-hour); levels double from it (default 1h)")
	fs.Var(&minRun, "min-run", "gangway, gangway-4h, las: how `long` a started job is not preempted for the policy (default 2m)")
	fs.Var(&laneTurn, "lane-turn", "gangway: how `long` a job started in the overdue lane runs there before it leaves it for its level, where it may be preempted (default 4h)")
	pos, code, ok := cmdkit.ParseArgs(fs, args[1:])
	if !ok {
		return code
	}
	if len(pos) != 1 {
		fs.Usage()
		return 2
	}
	c, err := srv.client()
	if err != nil {
		return fail(e, err)
	}
	if verb == "delete" {
		if err := c.DeleteQueue(ctx, pos[0]); err != nil {
			return fail(e, err)
		}
		fmt.Fprintf(e.Stdout, "queue %s deleted\n", pos[0])
		return 0
	}
	spec := api.QueueSpec{Name: pos[0], Cohort: *cohort, GuaranteeGPUs: *guarantee, Weight: *weight,
		Users: splitList(*users), Groups: splitList(*groups), AllowRoot: *allowRoot, Policy: *pol,
		LaneShare: *laneShare, OverdueAfter: overdue.d, LevelBase: levelBase.d, MinRun: minRun.d, LaneTurn: laneTurn.d}
	spec.BorrowLimitGPUs = borrow.v
	q, err := c.SetQueue(ctx, spec)
	if err != nil {
		return fail(e, err)
	}
	fmt.Fprintln(e.Stdout, queueSummary(&q.Spec))
	for _, w := range q.Warnings {
		fmt.Fprintf(e.Stderr, "warning: %s\n", w)
	}
	return 0
}

// queueSummary is queue set's confirmation: every setting the queue now has.
func queueSummary(q *api.QueueSpec) string {
	var b strings.Builder
	fmt.Fprintf(&b, "queue %s: guarantee %d GPUs, borrow limit ", q.Name, q.GuaranteeGPUs)
	if q.BorrowLimitGPUs == nil {
		b.WriteString("none")
	} else {
		fmt.Fprintf(&b, "%d GPUs", *q.BorrowLimitGPUs)
	}
	fmt.Fprintf(&b, ", weight %g, cohort %s, policy %s", q.Weight, dash(q.Cohort), queuePolicy(q))
	if set := policySettings(q); set != "-" {
		fmt.Fprintf(&b, " (%s)", set)
	}
	if len(q.Users) > 0 || len(q.Groups) > 0 {
		fmt.Fprintf(&b, ", users %s, groups %s", dash(strings.Join(q.Users, ",")), dash(strings.Join(q.Groups, ",")))
	}
	if q.AllowRoot {
		b.WriteString(", root allowed")
	}
	return b.String()
}

// queuePolicy is the queue's policy, the default named when it has none.
func queuePolicy(q *api.QueueSpec) string {
	if q.Policy == "" {
		return api.DefaultQueuePolicy
	}
	return q.Policy
}

// policySettings is the queue's policy's settings in effect, its
// defaults included; "-" for a policy without settings.
func policySettings(q *api.QueueSpec) string {
	p, err := policy.ForQueue(q)
	if err != nil {
		return "-"
	}
	t, ok := p.(policy.Tunable)
	if !ok {
		return "-"
	}
	s := t.Settings()
	secs := func(v float64) string { return time.Duration(v * float64(time.Second)).String() }
	var parts []string
	if s.LaneShare > 0 {
		parts = append(parts, fmt.Sprintf("lane share %g", s.LaneShare))
	}
	parts = append(parts, "overdue after "+secs(s.OverdueAfter), "level base "+secs(s.LevelBase)+" of a GPU", "min run "+secs(s.MinRun))
	if s.LaneTurn > 0 {
		parts = append(parts, "lane turn "+secs(s.LaneTurn))
	}
	return strings.Join(parts, ", ")
}

// durationValue is a duration flag in api.ParseDuration's forms.
type durationValue struct{ d api.Duration }

func (v *durationValue) String() string {
	if v == nil || v.d == 0 {
		return ""
	}
	return v.d.D().String()
}

func (v *durationValue) Set(s string) error {
	d, err := api.ParseDuration(s)
	if err != nil {
		return err
	}
	v.d = api.Duration(d)
	return nil
}

func runPriority(ctx context.Context, e *Env, args []string) int {
	fs := cmdkit.NewFlags(e.Stderr, "priority", "JOB PRIORITY")
	srv := serverFlag(fs, e)
	pos, code, ok := cmdkit.ParseArgs(fs, args)
	if !ok {
		return code
	}
	if len(pos) != 2 {
		fs.Usage()
		return 2
	}
	p, err := strconv.Atoi(pos[1])
	if err != nil {
		fmt.Fprintf(e.Stderr, "gangway priority: %q is not an integer\n", pos[1])
		return 2
	}
	c, err := srv.client()
	if err != nil {
		return fail(e, err)
	}
	if _, err := c.SetPriority(ctx, pos[0], p); err != nil {
		return fail(e, err)
	}
	fmt.Fprintf(e.Stdout, "job %s: priority %d\n", pos[0], p)
	return 0
}

// printQueues writes the queues as a table; wide adds the policy's
// settings in effect.
func printQueues(w io.Writer, qs []*api.Queue, wide bool) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	head := "NAME\tCOHORT\tGUARANTEE\tBORROW LIMIT\tWEIGHT\tUSED\tBORROWED\tRUNNING\tPENDING\tPOLICY"
	if wide {
		head += "\tSETTINGS"
	}
	fmt.Fprintln(tw, head)
	for _, q := range qs {
		limit := "-"
		if q.Spec.BorrowLimitGPUs != nil {
			limit = strconv.Itoa(*q.Spec.BorrowLimitGPUs)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%g\t%d\t%d\t%d\t%d (%d GPUs)\t%s", q.Spec.Name, dash(q.Spec.Cohort), q.Spec.GuaranteeGPUs, limit,
			q.Spec.Weight, q.Status.UsedGPUs, q.Status.BorrowedGPUs, q.Status.RunningJobs, q.Status.PendingJobs, q.Status.PendingGPUs, queuePolicy(&q.Spec))
		if wide {
			fmt.Fprintf(tw, "\t%s", policySettings(&q.Spec))
		}
		fmt.Fprintln(tw)
	}
	tw.Flush()
}
