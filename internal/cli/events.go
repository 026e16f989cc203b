package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/gangway/gangway/internal/api"
	"github.com/gangway/gangway/internal/api/client"
	"github.com/gangway/gangway/internal/base/cmdkit"
)

// runEvents lists events, or with -f follows them as they come (blocking
// queries) until ctx ends (Ctrl-C), which is no error.
func runEvents(ctx context.Context, e *Env, args []string) int {
	fs := cmdkit.NewFlags(e.Stderr, "events", "[-f] [--job ID] [--node N] [--deployment D] [--queue Q] [--since 1h] [--limit N]")
	srv := serverFlag(fs, e)
	out := cmdkit.OutputFlag(fs)
	follow := fs.Bool("f", false, "follow: print new events as they come, until interrupted")
	var q client.EventQuery
	fs.StringVar(&q.Job, "job", "", "only this job's events")
	fs.StringVar(&q.Node, "node", "", "only this node's, and those of jobs on it")
	fs.StringVar(&q.Deployment, "deployment", "", "only this deployment's")
	fs.StringVar(&q.Queue, "queue", "", "only this queue's")
	fs.StringVar(&q.Since, "since", "", "only events this recent (30m, 2h, 7d) or from a date (2026-12-01) or an RFC 3339 time on")
	fs.IntVar(&q.Limit, "limit", 0, "only the newest N (0: every one the server keeps)")
	if code, ok := cmdkit.ParseNoArgs(fs, args); !ok {
		return code
	}
	if q.Since != "" {
		if _, err := api.ParseSince(q.Since, time.Now()); err != nil { // the server reads it again on its clock
			fmt.Fprintf(e.Stderr, "gangway events: %v\n", err)
			return 2
		}
	}
	if q.Limit < 0 {
		fmt.Fprintf(e.Stderr, "gangway events: --limit %d: want a positive number (0: every event)\n", q.Limit)
		return 2
	}
	c, err := srv.client()
	if err != nil {
		return fail(e, err)
	}
	l, err := c.Events(ctx, q)
	if err != nil {
		return fail(e, err)
	}
	if !*follow {
		return exitOn(e, cmdkit.Print(e.Stdout, *out, l.Events, func(w io.Writer) error { return printEvents(w, l.Events) }))
	}
	p := eventPrinter{w: e.Stdout, format: *out}
	if err := p.print(l.Events); err != nil {
		return fail(e, err)
	}
	q.Limit, q.Index = 0, l.Index
	for {
		l, err := c.Events(ctx, q)
		switch {
		case ctx.Err() != nil:
			return 0
		case err != nil && !retryFollow(err):
			return fail(e, err)
		case err != nil:
			// A server restarting, or a replica gone: the client tried
			// the others; look again soon.
			select {
			case <-ctx.Done():
				return 0
			case <-time.After(time.Second):
			}
			continue
		}
		if err := p.print(l.Events); err != nil {
			return fail(e, err)
		}
		q.Index = max(q.Index, l.Index)
	}
}

// retryFollow reports whether events -f should ask again after err: not
// after the server refused the query itself.
func retryFollow(err error) bool {
	var ae *client.APIError
	return !errors.As(err, &ae) || ae.Status >= http.StatusInternalServerError
}

// eventPrinter prints events as they come: a table's rows under one
// header, or one JSON or YAML document each.
type eventPrinter struct {
	w       io.Writer
	format  cmdkit.Format
	started bool
}

func (p *eventPrinter) print(evs []api.Event) error {
	if p.format != cmdkit.Table {
		for i := range evs {
			if err := cmdkit.PrintItem(p.w, p.format, &evs[i]); err != nil {
				return err
			}
		}
		return nil
	}
	if !p.started {
		p.started = true
		fmt.Fprintf(p.w, eventRow, "AGE", "TYPE", "REASON", "OBJECT", "MESSAGE")
	}
	for i := range evs {
		ev := &evs[i]
		fmt.Fprintf(p.w, eventRow, age(ev.Time), ev.Type, ev.Reason, object(ev), ev.Message)
	}
	return nil
}

// eventRow is a row of events -f: fixed widths, as rows come a few at a
// time.
const eventRow = "%-5s  %-7s  %-12s  %-14s  %s\n"

// printEvents writes events as a table, kubectl get events' columns.
func printEvents(w io.Writer, evs []api.Event) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "AGE\tTYPE\tREASON\tOBJECT\tMESSAGE")
	for i := range evs {
		ev := &evs[i]
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", age(ev.Time), ev.Type, ev.Reason, object(ev), ev.Message)
	}
	return tw.Flush()
}

// object is an event's object as kubectl writes one: kind/name.
func object(ev *api.Event) string { return string(ev.Kind) + "/" + ev.Name }

// describeEvents ends a describe as kubectl's does: the newest events of
// the object, or <none>; what keeps them from being read is said in
// their place.
func describeEvents(ctx context.Context, w io.Writer, c *client.Client, q client.EventQuery) {
	q.Limit = 20
	l, err := c.Events(ctx, q)
	switch {
	case err != nil:
		fmt.Fprintf(w, "\nEvents:  unavailable (%v)\n", err)
		return
	case len(l.Events) == 0:
		fmt.Fprintln(w, "\nEvents:  <none>")
		return
	}
	fmt.Fprintln(w, "\nEvents:")
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  Type\tReason\tAge\tMessage")
	fmt.Fprintln(tw, "  ----\t------\t---\t-------")
	for _, ev := range l.Events {
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", ev.Type, ev.Reason, age(ev.Time), strings.TrimSpace(ev.Message))
	}
	tw.Flush()
}
