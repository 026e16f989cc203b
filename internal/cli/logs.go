package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/gangway/gangway/internal/api"
	"github.com/gangway/gangway/internal/api/client"
	"github.com/gangway/gangway/internal/base/cmdkit"
)

func runLogs(ctx context.Context, e *Env, args []string) int {
	fs := cmdkit.NewFlags(e.Stderr, "logs", "ID [--rank N | --all-ranks] [--attempt N | --previous] [--tail N] [--since D|TIME] [--timestamps] [--stdout | --stderr] [-f]")
	srv := serverFlag(fs, e)
	rank := fs.Int("rank", 0, "rank whose output to show; in a torchrun job, its lines of its node's torchrun output (those --tee marks [defaultN]:, N its local rank; the mark removed) and torchrun's own")
	attempt := fs.Int("attempt", 0, "attempt (default: the newest; with -f, each new one as it starts)")
	stdout := fs.Bool("stdout", false, "standard output only, as the rank wrote it")
	stderr := fs.Bool("stderr", false, "standard error only, as the rank wrote it")
	wholeNode := fs.Bool("whole-node", false, "in a per-node launch (torchrun, deepspeed, per-node), the node's whole launcher output: every local rank's lines")
	follow := fs.Bool("f", false, "follow the output until the job finishes, through every new attempt (with --attempt: until that attempt's rank exits)")
	allRanks := fs.Bool("all-ranks", false, "every rank's lines, each after [rank N] (in a per-node launch other than torchrun, each node's launcher's: one rank a node); with -f, interleaved as they come")
	tail := fs.Int("tail", 0, "only the last N lines of each rank's retained output (then, with -f, everything after)")
	timestamps := fs.Bool("timestamps", false, "put the time each line was written before it (RFC 3339 with nanoseconds, UTC), as kubectl logs --timestamps")
	since := fs.String("since", "", "only lines written since then, as kubectl logs --since and --since-time: "+logSinceForms)
	previous := fs.Bool("previous", false, "the attempt before the newest (as kubectl's --previous: the output of the run that ended)")
	pos, code, ok := cmdkit.ParseArgs(fs, args)
	if !ok {
		return code
	}
	if len(pos) != 1 {
		fs.Usage()
		return 2
	}
	pos = jobIDs(pos)
	switch {
	case *previous && *attempt != 0:
		fmt.Fprintln(e.Stderr, "gangway logs: --previous and --attempt: give one")
		return 2
	case *allRanks && *rank != 0:
		fmt.Fprintln(e.Stderr, "gangway logs: --all-ranks and --rank: give one")
		return 2
	case *tail < 0:
		fmt.Fprintln(e.Stderr, "gangway logs: --tail: want a number of lines, 0 or more")
		return 2
	}
	if *stdout && *stderr {
		fmt.Fprintln(e.Stderr, "gangway logs: --stdout and --stderr: give one, or neither for both streams")
		return 2
	}
	stream := api.LogStreamBoth
	switch {
	case *stdout:
		stream = api.LogStreamStdout
	case *stderr:
		stream = api.LogStreamStderr
	}
	c, err := srv.client()
	if err != nil {
		return fail(e, err)
	}
	out := &crashWatch{w: e.Stdout}
	q := client.LogQuery{Rank: *rank, Attempt: *attempt, Stream: stream, Follow: *follow, WholeNode: *wholeNode, Tail: *tail, Timestamps: *timestamps}
	if *since != "" {
		t, err := api.ParseSince(*since, time.Now())
		if err != nil {
			fmt.Fprintf(e.Stderr, "gangway logs: --since %q: want %s\n", *since, logSinceForms)
			return 2
		}
		q.Since = t
	}
	var d *api.JobDetail
	if *previous || *allRanks {
		if d, err = c.Job(ctx, pos[0]); err != nil {
			return fail(e, err)
		}
	}
	if *previous {
		n := len(d.Job.Status.Attempts)
		if n < 2 {
			return fail(e, fmt.Errorf("job %s has no previous attempt: it has had %d", d.Job.ID, n))
		}
		q.Attempt = n - 1
	}
	switch {
	case *allRanks:
		err = logsOfRanks(ctx, e, c, d, q, out)
	case *follow && q.Attempt == 0:
		err = followJob(ctx, e, c, pos[0], q, out, true)
	default:
		err = c.Logs(ctx, pos[0], q, out)
	}
	out.hint(e.Stderr)
	return exitOn(e, err)
}

// logSinceForms is what logs --since takes, for help and errors.
const logSinceForms = "how long ago (30s, 10m, 12h, 7d) or a time (RFC 3339: 2026-12-01T09:00:00Z; or a date: 2026-12-01)"

// logRanks is the ranks whose logs --all-ranks shows: every rank, or in a
// per-node launch other than torchrun (whose ranks share their node's
// launcher's output) each node's first rank of the attempt asked for.
func logRanks(d *api.JobDetail, attempt int) []int {
	var ranks []int
	atts := d.Job.Status.Attempts
	perNode := d.Job.Spec.Launch.PerNode() && d.Job.Spec.Launch != api.LaunchTorchrun
	if !perNode || len(atts) == 0 {
		for r := range d.Job.Spec.Ranks {
			ranks = append(ranks, r)
		}
		return ranks
	}
	if attempt == 0 || attempt > len(atts) {
		attempt = len(atts)
	}
	for _, p := range atts[attempt-1].Placement {
		if p.LocalRank == 0 {
			ranks = append(ranks, p.Rank)
		}
	}
	return ranks
}

// logsOfRanks writes every rank's log to w, each line after [rank N]: one
// rank after another, or with q.Follow all at once, their lines
// interleaved as they come. It returns the first rank's error, after
// every rank has been tried (the others are said on stderr).
func logsOfRanks(ctx context.Context, e *Env, c *client.Client, d *api.JobDetail, q client.LogQuery, w io.Writer) error {
	ranks := logRanks(d, q.Attempt)
	var mu sync.Mutex // guards w, shared by the ranks' writers
	errs := make([]error, len(ranks))
	one := func(i int) {
		rq := q
		rq.Rank = ranks[i]
		pw := &prefixWriter{w: w, mu: &mu, prefix: []byte(fmt.Sprintf("[rank %d] ", ranks[i]))}
		if q.Follow && q.Attempt == 0 {
			errs[i] = followJob(ctx, e, c, d.Job.ID, rq, pw, i == 0)
		} else {
			errs[i] = c.Logs(ctx, d.Job.ID, rq, pw)
		}
		_ = pw.close()
	}
	if q.Follow {
		var wg sync.WaitGroup
		for i := range ranks {
			wg.Go(func() { one(i) })
		}
		wg.Wait()
	} else {
		for i := range ranks {
			one(i)
		}
	}
	var first error
	for i, err := range errs {
		if err == nil {
			continue
		}
		if first == nil {
			first = fmt.Errorf("rank %d: %w", ranks[i], err)
		} else {
			fmt.Fprintf(e.Stderr, "gangway: rank %d: %v\n", ranks[i], err)
		}
	}
	return first
}

// prefixWriter writes whole lines to w, each after prefix, under mu, so
// that the lines of writers sharing w interleave without breaking.
type prefixWriter struct {
	w      io.Writer
	mu     *sync.Mutex
	prefix []byte
	held   []byte // a line not yet ended
}

func (p *prefixWriter) Write(b []byte) (int, error) {
	data := append(p.held, b...)
	end := bytes.LastIndexByte(data, '\n') + 1
	if err := p.emit(data[:end]); err != nil {
		return 0, err
	}
	p.held = append([]byte(nil), data[end:]...)
	return len(b), nil
}

// close writes the unfinished last line, ended.
func (p *prefixWriter) close() error {
	if len(p.held) == 0 {
		return nil
	}
	err := p.emit(append(p.held, '\n'))
	p.held = nil
	return err
}

func (p *prefixWriter) emit(lines []byte) error {
	if len(lines) == 0 {
		return nil
	}
	out := api.PrefixLines(nil, p.prefix, lines)
	p.mu.Lock()
	defer p.mu.Unlock()
	_, err := p.w.Write(out)
	return err
}

// followPoll is how often logs -f asks whether a new attempt has started.
const followPoll = time.Second

// followJob follows one rank's output through the job's attempts, from
// the newest when it is called, each to its end, until the job is final.
// A line on stderr marks each new attempt and says why the one before
// ended, when announce is set.
func followJob(ctx context.Context, e *Env, c *client.Client, id string, q client.LogQuery, w io.Writer, announce bool) error {
	next := 0 // the attempt to follow; 0: the newest once there is one
	announced := 0
	for {
		d, err := c.Job(ctx, id)
		if err != nil {
			return err
		}
		atts := d.Job.Status.Attempts
		if next == 0 && len(atts) > 0 {
			next = len(atts)
		}
		if next > 0 && next <= len(atts) {
			a := &atts[next-1]
			if announce && announced > 0 && announced < next {
				prev := &atts[next-2]
				fmt.Fprintf(e.Stderr, "gangway: attempt %d ended (%s%s); following attempt %d\n", prev.Number, prev.Outcome, causeSuffix(prev), a.Number)
			}
			announced = next
			q.Attempt = a.Number
			err := c.Logs(ctx, id, q, w)
			var ae *client.APIError
			switch {
			case err == nil, errors.As(err, &ae) && ae.Status == http.StatusNotFound && a.Phase == api.AttemptEnded:
				// Followed to its end, or it ended before the rank wrote a log.
				next++
				q.Tail = 0 // a later attempt's output is shown whole
				continue
			case errors.As(err, &ae) && (ae.Status == http.StatusNotFound || ae.Status == http.StatusConflict):
				// The rank has not started on its node yet: ask again.
			default:
				return err
			}
		} else if d.Job.Status.Phase.Final() {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(followPoll):
		}
	}
}

func causeSuffix(a *api.Attempt) string {
	if c := api.CauseOf(a); c != "" && string(c) != string(a.Outcome) {
		return ": " + string(c)
	}
	return ""
}

// torchrunCrash is a line of the crash of torch 1.13's torchrun (Debian's
// python3-torch) when neither --redirects nor --tee is given.
var torchrunCrash = []byte("val_or_map.get(i, Std.NONE)")

// crashWatch passes output on and notes a known crash in it, to explain
// once the output has ended.
type crashWatch struct {
	w        io.Writer
	tail     []byte // the end of the last write, for a match across writes
	torchrun bool
}

func (c *crashWatch) Write(p []byte) (int, error) {
	if !c.torchrun {
		look := append(c.tail, p...)
		c.torchrun = bytes.Contains(look, torchrunCrash)
		c.tail = append(c.tail[:0], look[max(0, len(look)-len(torchrunCrash)):]...)
	}
	return c.w.Write(p)
}

// hint explains a crash seen, on w.
func (c *crashWatch) hint(w io.Writer) {
	if c.torchrun {
		fmt.Fprintln(w, "gangway: this is torch 1.13's torchrun (Debian's python3-torch) failing to start its workers without --redirects and --tee;"+
			" put \"--redirects 1 --tee 1\" right after torchrun in the job's command (gangway inserts its node-level arguments after those)")
	}
}
