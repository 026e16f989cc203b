package cli

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/gangway/gangway/internal/api"
	"github.com/gangway/gangway/internal/api/client"
	"github.com/gangway/gangway/internal/base/cmdkit"
)

// runReport prints a report; `usage` is the one there is.
func runReport(ctx context.Context, e *Env, args []string) int {
	if len(args) == 0 || args[0] != "usage" {
		fmt.Fprintln(e.Stderr, "Usage: gangway report usage [--by queue|user|job] [--since 7d] [--user NAME] [--archived] [-o table|json|yaml|csv]")
		return 2
	}
	fs := cmdkit.NewFlags(e.Stderr, "report usage", "[--by queue|user|job] [--since 7d] [--user NAME] [--archived]")
	srv := serverFlag(fs, e)
	out := cmdkit.OutputFlagCSV(fs)
	by := fs.String("by", "queue", "group rows by queue, user or job")
	since := fs.String("since", "", "start of the window: "+sinceForms+" (default: all the history the server holds)")
	user := fs.String("user", "", "only this user's jobs (a user sees only their own anyway)")
	archived := fs.Bool("archived", false, "add the jobs retention moved to the server's --job-archive")
	if code, ok := cmdkit.ParseNoArgs(fs, args[1:]); !ok {
		return code
	}
	b, err := api.ParseUsageBy(*by)
	if err == nil && *since != "" {
		_, err = api.ParseSince(*since, time.Now()) // the server reads it again on its clock
	}
	if err != nil {
		fmt.Fprintf(e.Stderr, "gangway report usage: %v\n", err)
		return 2
	}
	c, err := srv.client()
	if err != nil {
		return fail(e, err)
	}
	rep, err := c.Usage(ctx, client.UsageQuery{By: b, Since: *since, User: *user, Archived: *archived})
	if err != nil {
		return fail(e, err)
	}
	if *out == cmdkit.CSV {
		return exitOn(e, usageCSV(e.Stdout, rep))
	}
	return exitOn(e, cmdkit.Print(e.Stdout, *out, rep, func(w io.Writer) error { return printUsage(w, rep) }))
}

// sinceForms is what a --since takes (api.ParseSince), for flag help.
const sinceForms = "how long ago (30m, 12h, 7d), an RFC 3339 time (2026-12-01T09:00:00Z) or a date (2026-12-01)"

// causeOrder is the order of the lost-work columns: the cluster's faults,
// then the scheduler's doing, then the job's own.
var causeOrder = []api.Cause{api.CauseNodeLost, api.CauseFenced, api.CauseGPUFault, api.CauseNodeFault, api.CauseHang, api.CauseStraggler, api.CausePreflight,
	api.CausePreempted, api.CauseDrain, api.CauseRequeued, api.CauseTimeLimit, api.CauseUserError, api.CauseCancelled, api.CauseOther}

// printUsage writes a usage report as a table: a row per key and a TOTAL,
// GPU-hours, useful ones, goodput, then a column per cause any row lost
// work to, running where there is any, restarts, restart backoff where
// there is any, and pending time.
func printUsage(w io.Writer, rep api.UsageReport) error {
	from := "the first attempt"
	if !rep.Since.IsZero() {
		from = rep.Since.Local().Format("2006-01-02 15:04")
	}
	fmt.Fprintf(w, "GPU-hours from %s to %s, by %s\n", from, rep.Until.Local().Format("2006-01-02 15:04"), rep.By)
	rows := append(slices.Clone(rep.Rows), rep.Total)
	seen := map[api.Cause]bool{}
	var running, backoff bool
	for _, r := range rows {
		for c, v := range r.LostGPUHours {
			seen[c] = seen[c] || v > 0
		}
		running = running || r.RunningGPUHours > 0
		backoff = backoff || r.RestartBackoffGangHours > 0
	}
	var causes []api.Cause
	for _, c := range causeOrder {
		if seen[c] {
			causes = append(causes, c)
			delete(seen, c)
		}
	}
	for _, c := range slices.Sorted(maps.Keys(seen)) { // causes this CLI does not know yet
		if seen[c] {
			causes = append(causes, c)
		}
	}
	head := []string{strings.ToUpper(string(rep.By)), "JOBS", "GPU-HOURS", "USEFUL", "GOODPUT"}
	for _, c := range causes {
		head = append(head, strings.ToUpper(string(c)))
	}
	if running {
		head = append(head, "RUNNING")
	}
	head = append(head, "RESTARTS")
	if backoff {
		head = append(head, "RESTART-BACKOFF*")
	}
	head = append(head, "PENDING-H")
	table := [][]string{head}
	for _, r := range rows {
		goodput := "-"
		if r.UsefulGPUHours+r.LostTotal() > 0 {
			goodput = fmt.Sprintf("%.1f%%", 100*r.Goodput)
		}
		cells := []string{r.Key, fmt.Sprint(r.Jobs), hrs(r.GPUHours), hrs(r.UsefulGPUHours), goodput}
		for _, c := range causes {
			cells = append(cells, hrs(r.LostGPUHours[c]))
		}
		if running {
			cells = append(cells, hrs(r.RunningGPUHours))
		}
		cells = append(cells, count(r.Restarts))
		if backoff {
			cells = append(cells, hrs(r.RestartBackoffGangHours))
		}
		cells = append(cells, hrs(r.PendingHours))
		table = append(table, cells)
	}
	if _, err := io.WriteString(w, alignColumns(table)); err != nil {
		return err
	}
	if backoff {
		fmt.Fprintln(w, "* gang-hours, not GPU-hours: the wait between an attempt's end and the next one's start, times the GPUs asked for")
	}
	return nil
}

// usageCSV writes a usage report as CSV: a row per key (no TOTAL: -o json
// has it), in columns that do not depend on the figures: every cause this
// CLI knows has its lost_ column, and a cause it does not know yet gets
// one after all the others.
func usageCSV(w io.Writer, rep api.UsageReport) error {
	causes := slices.Clone(causeOrder)
	var unknown []api.Cause
	for _, r := range rep.Rows {
		for c := range r.LostGPUHours {
			if !slices.Contains(causes, c) && !slices.Contains(unknown, c) {
				unknown = append(unknown, c)
			}
		}
	}
	slices.Sort(unknown)
	lost := func(cs []api.Cause) []string {
		var out []string
		for _, c := range cs {
			out = append(out, "lost_"+strings.ReplaceAll(string(c), "-", "_")+"_gpu_hours")
		}
		return out
	}
	head := []string{string(rep.By), "jobs", "gpu_hours", "useful_gpu_hours", "goodput"}
	head = append(head, lost(causes)...)
	head = append(head, "running_gpu_hours", "restarts", "restart_backoff_gang_hours", "pending_hours")
	head = append(head, lost(unknown)...)
	rows := make([][]string, 0, len(rep.Rows))
	for _, r := range rep.Rows {
		cells := []string{r.Key, strconv.Itoa(r.Jobs), num(r.GPUHours), num(r.UsefulGPUHours), num(r.Goodput)}
		for _, c := range causes {
			cells = append(cells, num(r.LostGPUHours[c]))
		}
		cells = append(cells, num(r.RunningGPUHours), strconv.Itoa(r.Restarts), num(r.RestartBackoffGangHours), num(r.PendingHours))
		for _, c := range unknown {
			cells = append(cells, num(r.LostGPUHours[c]))
		}
		rows = append(rows, cells)
	}
	return cmdkit.WriteCSV(w, head, rows)
}

// num writes a figure in full, as CSV readers want it.
func num(x float64) string { return strconv.FormatFloat(x, 'f', -1, 64) }

// count writes a count, "-" for none.
func count(n int) string {
	if n == 0 {
		return "-"
	}
	return strconv.Itoa(n)
}

// alignColumns lays rows out in columns two spaces apart: the first
// (names) aligned left, the rest (figures) right.
func alignColumns(rows [][]string) string {
	var width []int
	for _, r := range rows {
		for i, c := range r {
			if i == len(width) {
				width = append(width, 0)
			}
			width[i] = max(width[i], utf8.RuneCountInString(c))
		}
	}
	var b strings.Builder
	for _, r := range rows {
		for i, c := range r {
			pad := strings.Repeat(" ", width[i]-utf8.RuneCountInString(c))
			switch {
			case i == 0:
				b.WriteString(c + pad)
			default:
				b.WriteString("  " + pad + c)
			}
		}
		b.WriteString("\n")
	}
	return b.String()
}

// hrs writes hours to a tenth, "-" for none.
func hrs(h float64) string {
	if h == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f", h)
}
