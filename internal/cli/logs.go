package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/gangway/gangway/internal/api"
	"github.com/gangway/gangway/internal/api/client"
	"github.com/gangway/gangway/internal/base/cmdkit"
)

func runLogs(ctx context.Context, e *Env, args []string) int {
	fs := cmdkit.NewFlags(e.Stderr, "logs", "ID [--rank N] [--attempt N] [--stdout | --stderr] [-f]")
	srv := serverFlag(fs, e)
	rank := fs.Int("rank", 0, "rank whose output to show; in a torchrun job, its lines of its node's torchrun output (those --tee marks [defaultN]:, N its local rank; the mark removed) and torchrun's own")
	attempt := fs.Int("attempt", 0, "attempt (default: the newest; with -f, each new one as it starts)")
	stdout := fs.Bool("stdout", false, "standard output only, as the rank wrote it")
	stderr := fs.Bool("stderr", false, "standard error only, as the rank wrote it")
	wholeNode := fs.Bool("whole-node", false, "in a per-node launch (torchrun, deepspeed, per-node), the node's whole launcher output: every local rank's lines")
	follow := fs.Bool("f", false, "follow the output until the job finishes, through every new attempt (with --attempt: until that attempt's rank exits)")
	pos, code, ok := cmdkit.ParseArgs(fs, args)
	if !ok {
		return code
	}
	if len(pos) != 1 {
		fs.Usage()
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
	q := client.LogQuery{Rank: *rank, Attempt: *attempt, Stream: stream, Follow: *follow, WholeNode: *wholeNode}
	if *follow && *attempt == 0 {
		err = followJob(ctx, e, c, pos[0], q, out)
	} else {
		err = c.Logs(ctx, pos[0], q, out)
	}
	out.hint(e.Stderr)
	return exitOn(e, err)
}

// followPoll is how often logs -f asks whether a new attempt has started.
const followPoll = time.Second

// followJob follows one rank's output through the job's attempts, from
// the newest when it is called, each to its end, until the job is final.
// A line on stderr marks each new attempt and says why the one before
// ended.
func followJob(ctx context.Context, e *Env, c *client.Client, id string, q client.LogQuery, w io.Writer) error {
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
			if announced > 0 && announced < next {
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
