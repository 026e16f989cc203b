package cli

import (
	"context"
	"io"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/gangway/gangway/internal/api"
	"github.com/gangway/gangway/internal/api/client"
	"github.com/gangway/gangway/internal/base/cmdkit"
)

// watchJobs prints the jobs q lists, then, each time a blocking query on
// the list (?index=N) returns, one line for each job that changed, in the
// same columns (kubectl get -w), until ctx ends: Ctrl-C ends it, with
// status 0. A job that leaves a --live list has finished: its last state
// is read and printed. With -o json or yaml each job, and then each
// change, is an object of its own.
func watchJobs(ctx context.Context, e *Env, c *client.Client, q client.JobQuery, out cmdkit.Format) int {
	l, err := c.Jobs(ctx, q)
	if err != nil {
		return watchEnded(ctx, e, err)
	}
	cols := &columns{w: e.Stdout}
	last := map[string]string{} // job ID → its row but for its age
	show := func(jobs []*api.Job) error {
		for _, j := range jobs {
			row := jobRow(j)
			key := strings.Join(slices.Delete(slices.Clone(row), jobAgeCol, jobAgeCol+1), "\t")
			if last[j.ID] == key {
				continue
			}
			last[j.ID] = key
			var err error
			if out == cmdkit.Table {
				err = cols.print(row)
			} else {
				err = cmdkit.PrintItem(e.Stdout, out, j)
			}
			if err != nil {
				return err
			}
		}
		return nil
	}
	if out == cmdkit.Table {
		cols.widen(jobsHead)
		cols.widen([]string{"", "", "", "", string(api.JobRestarting)}) // the widest phase, which may come later
		for _, j := range l.Jobs {
			cols.widen(jobRow(j))
		}
		if err := cols.print(jobsHead); err != nil {
			return fail(e, err)
		}
	}
	if err := show(l.Jobs); err != nil {
		return fail(e, err)
	}
	listed := ids(l.Jobs)
	for idx := l.Index; ; idx = l.Index {
		wq := q
		wq.Index = max(idx, 1)
		if l, err = c.Jobs(ctx, wq); err != nil {
			return watchEnded(ctx, e, err)
		}
		jobs := l.Jobs
		if q.Live {
			// Those that left the list finished: show how.
			now := ids(jobs)
			for id := range listed {
				if now[id] {
					continue
				}
				d, err := c.Job(ctx, id)
				if err != nil {
					return watchEnded(ctx, e, err)
				}
				jobs = append(jobs, &d.Job)
				delete(last, id) // it will not come back
			}
			listed = now
		}
		if err := show(jobs); err != nil {
			return fail(e, err)
		}
	}
}

// watchEnded is the exit status of a watch that err stopped: 0 when ctx
// ended (Ctrl-C), else err reported.
func watchEnded(ctx context.Context, e *Env, err error) int {
	if ctx.Err() != nil {
		return 0
	}
	return fail(e, err)
}

func ids(jobs []*api.Job) map[string]bool {
	m := make(map[string]bool, len(jobs))
	for _, j := range jobs {
		m[j.ID] = true
	}
	return m
}

// columns prints rows with each column as wide as the widest cell it has
// been told of, two spaces apart: tabwriter's layout, kept across lines
// printed at different times. A cell wider than any before widens its
// column from that line on.
type columns struct {
	w     io.Writer
	width []int
}

// widen makes the columns at least as wide as row's cells.
func (c *columns) widen(row []string) {
	for i, cell := range row {
		if i == len(c.width) {
			c.width = append(c.width, 0)
		}
		c.width[i] = max(c.width[i], utf8.RuneCountInString(cell))
	}
}

// print writes row as one line.
func (c *columns) print(row []string) error {
	c.widen(row)
	var b strings.Builder
	for i, cell := range row {
		b.WriteString(cell)
		if i < len(row)-1 {
			b.WriteString(strings.Repeat(" ", c.width[i]-utf8.RuneCountInString(cell)+2))
		}
	}
	b.WriteString("\n")
	_, err := io.WriteString(c.w, b.String())
	return err
}
