package cli

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
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
		fmt.Fprintln(e.Stderr, "Usage: gangway report usage [--by queue|user|job] [--since 7d] [--user NAME] [--archived] [-o table|json|yaml]")
		return 2
	}
	fs := cmdkit.NewFlags(e.Stderr, "report usage", "[--by queue|user|job] [--since 7d] [--user NAME] [--archived]")
	srv := serverFlag(fs, e)
	out := cmdkit.OutputFlag(fs)
	by := fs.String("by", "queue", "group rows by queue, user or job")
	since := fs.String("since", "", "start of the window: how long ago (24h, 7d) or a date (2026-12-01) or an RFC 3339 time (default: all the history the server holds)")
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
	return exitOn(e, cmdkit.Print(e.Stdout, *out, rep, func(w io.Writer) error { return printUsage(w, rep) }))
}

// causeOrder is the order of the lost-work columns: the cluster's faults,
// then the scheduler's doing, then the job's own.
var causeOrder = []api.Cause{api.CauseNodeLost, api.CauseFenced, api.CauseGPUFault, api.CauseNodeFault, api.CauseHang, api.CauseStraggler, api.CausePreflight,
	api.CausePreempted, api.CauseDrain, api.CauseTimeLimit, api.CauseUserError, api.CauseCancelled, api.CauseOther}

// printUsage writes a usage report as a table: a row per key and a TOTAL,
// GPU-hours, useful ones, goodput, then a column per cause any row lost
// work to, running and restart backoff where there are any.
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
	if backoff {
		head = append(head, "RESTART-BACKOFF*")
	}
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
		if backoff {
			cells = append(cells, hrs(r.RestartBackoffGangHours))
		}
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
