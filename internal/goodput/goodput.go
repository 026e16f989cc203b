// Package goodput accounts for GPU time: from jobs' attempt histories it
// computes, over a window, the GPU-hours each attempt held, how much of
// that was useful and how much was lost and to what cause (node lost, GPU
// fault, hang, preemption, user error, …), and the gang-hours jobs spent
// waiting between attempts; then adds them up by job, queue or user. It is
// pure: the server feeds it the store's jobs for `gangway report usage`,
// and the simulator feeds its Tally the same classes, so that a trace
// replay and the live accounting can be compared.
//
// Attribution, per attempt (see UsageRow in internal/api):
//
//   - its GPU time runs from RunningAt (every rank running; CreatedAt for
//     an attempt that never ran in full) to EndedAt, or to now while it
//     runs or stops, times the GPUs the job asks for;
//   - an attempt that succeeded was useful throughout;
//   - one that ended otherwise was useful up to the newest of its own
//     checkpoints that a later attempt resumed from (for a job waiting to
//     restart, the job's newest checkpoint, which its next attempt will
//     resume from), and lost after it, charged to the cause it ended with;
//     with no such checkpoint it was lost throughout;
//   - an attempt still running is neither yet;
//   - the wall time from an attempt's end to the next one's start is
//     restart backoff: no GPU is held, so it counts in gang-hours (wall
//     time times the GPUs asked for), apart from the GPU-hours.
//
// Per job (Waits), apart from the GPU time: the wall time from its
// submission to its first attempt is pending time, in job-hours; each
// attempt after the first that began in the window is a restart.
//
// It imports the standard library and internal/api.
package goodput

import (
	"cmp"
	"math"
	"slices"
	"time"

	"github.com/gangway/gangway/internal/api"
)

// Options is the window and grouping of a report.
type Options struct {
	// Since and Until bound the window [Since, Until). Since zero: from
	// the first attempt on; Until zero: Now.
	Since, Until time.Time
	// Now ends attempts still running or stopping, and the restart a job
	// still waits for. Required.
	Now time.Time
	// By groups the report's rows; "" is by queue.
	By api.UsageBy
	// Latest is the newest committed checkpoint of each job not yet
	// finished (by job ID): the one its next attempt resumes from. nil or
	// missing: unknown, and an ended attempt no later attempt has resumed
	// counts as lost.
	Latest map[string]*api.Checkpoint
}

func (o *Options) until() time.Time {
	if o.Until.IsZero() {
		return o.Now
	}
	return o.Until
}

// Span is one attempt's account within the window, in GPU-seconds (the
// backoff in gang-seconds).
type Span struct {
	Attempt int
	// GPUs the job asks for (fractions for time-shared and MIG ranks).
	GPUs            float64
	Useful, Running float64
	// Lost is charged to Cause: the attempt's, as recorded or read from
	// its outcome (api.CauseOf), api.CauseOther where neither says.
	Lost  float64
	Cause api.Cause
	// Backoff is the wait after this attempt until the next one started
	// (or until now, for a job waiting to restart), times GPUs.
	Backoff float64
}

// GPUs is how many GPUs a job's gang holds: ranks × GPUs per rank, or the
// thousandths of time-shared and MIG ranks (api.JobSpec.MilliGPUs) as a
// fraction.
func GPUs(s *api.JobSpec) float64 {
	if s.GPUsPerRank == 0 && s.GPUMilli == 0 && s.MIGProfile == "" {
		return float64(s.Ranks) // the default, one per rank, not yet filled in
	}
	return float64(s.MilliGPUs()) / 1000
}

// Attempts accounts for each attempt of j within o's window; attempts with
// nothing in it are left out.
func Attempts(j *api.Job, o Options) []Span {
	until := o.until()
	g := GPUs(&j.Spec)
	as := j.Status.Attempts
	var out []Span
	for i := range as {
		a := &as[i]
		start, end := a.RunningAt, a.EndedAt
		if start.IsZero() {
			start = a.CreatedAt
		}
		if a.Phase != api.AttemptEnded || end.IsZero() {
			end = o.Now
		}
		sp := Span{Attempt: a.Number, GPUs: g}
		switch {
		case a.Phase == api.AttemptRunning:
			sp.Running = overlap(start, end, o.Since, until) * g
		case a.Outcome == api.OutcomeSucceeded:
			sp.Useful = overlap(start, end, o.Since, until) * g
		default:
			sp.Cause = api.CauseOf(a)
			if sp.Cause == "" || sp.Cause == api.CauseSucceeded {
				sp.Cause = api.CauseOther // succeeded in name only: no outcome says so
			}
			split := start
			if ck := resumed(j, i, start, end, o.Latest[j.ID]); ck.After(start) {
				split = ck
				if split.After(end) {
					split = end
				}
			}
			sp.Useful = overlap(start, split, o.Since, until) * g
			sp.Lost = overlap(split, end, o.Since, until) * g
		}
		if a.Phase == api.AttemptEnded && !a.EndedAt.IsZero() {
			next := o.Now
			switch {
			case i+1 < len(as):
				next = as[i+1].CreatedAt
			case j.Status.Phase.Final():
				next = a.EndedAt // no restart to wait for, unless it was cancelled waiting
				if j.Status.FinishedAt.After(next) {
					next = j.Status.FinishedAt
				}
			}
			sp.Backoff = overlap(a.EndedAt, next, o.Since, until) * g
		}
		if sp.Useful+sp.Lost+sp.Running+sp.Backoff > 0 {
			out = append(out, sp)
		}
	}
	return out
}

// Waits is how long j waited within o's window before its first attempt,
// in seconds (from its submission to that attempt's creation; to now, or
// to its end, for a job never placed), and how many of its attempts after
// the first began in the window. A job with no submission time (written
// by hand) has no pending time.
func Waits(j *api.Job, o Options) (pending float64, restarts int) {
	until := o.until()
	as := j.Status.Attempts
	if !j.SubmittedAt.IsZero() {
		end := o.Now
		switch {
		case len(as) > 0:
			end = as[0].CreatedAt
		case j.Status.Phase.Final():
			end = j.Status.FinishedAt // zero, unknown: no wait
		}
		pending = overlap(j.SubmittedAt, end, o.Since, until)
	}
	for i := 1; i < len(as); i++ {
		if c := as[i].CreatedAt; !c.Before(o.Since) && c.Before(until) {
			restarts++
		}
	}
	return pending, restarts
}

// resumed is when the newest checkpoint of attempt i of j that work
// resumed from was committed: one a later attempt was told to resume from
// or, for the last attempt of a job that will run again, latest (the
// job's newest, which its next attempt will resume from). A checkpoint is
// the attempt's if it says so, or, written by a version that did not
// record the attempt, if it was committed while the attempt ran. Zero if
// none.
func resumed(j *api.Job, i int, start, end time.Time, latest *api.Checkpoint) time.Time {
	as := j.Status.Attempts
	a := &as[i]
	mine := func(ck *api.Checkpoint) bool {
		if ck == nil {
			return false
		}
		if ck.Attempt != 0 {
			return ck.Attempt == a.Number
		}
		return ck.Time.After(start) && !ck.Time.After(end)
	}
	var at time.Time
	for k := i + 1; k < len(as); k++ {
		if ck := as[k].ResumeFrom; mine(ck) && ck.Time.After(at) {
			at = ck.Time
		}
	}
	restarts := !j.Status.Phase.Final() && a.Outcome != api.OutcomeCancelled && a.Outcome != api.OutcomeTimedOut
	if i == len(as)-1 && restarts && mine(latest) && latest.Time.After(at) {
		at = latest.Time
	}
	return at
}

// overlap is the seconds [a, b) shares with [since, until); since zero is
// unbounded.
func overlap(a, b, since, until time.Time) float64 {
	if !since.IsZero() && a.Before(since) {
		a = since
	}
	if b.After(until) {
		b = until
	}
	if !b.After(a) {
		return 0
	}
	return b.Sub(a).Seconds()
}

// Tally adds up GPU-seconds by class (gang-seconds for Backoff, job-seconds
// for Pending) and restarts for one row. The zero value is ready to use.
type Tally struct {
	Jobs                     int
	Useful, Running, Backoff float64
	Lost                     map[api.Cause]float64
	Pending                  float64
	Restarts                 int
}

// AddLost charges s GPU-seconds to cause.
func (t *Tally) AddLost(cause api.Cause, s float64) {
	if s == 0 {
		return
	}
	if t.Lost == nil {
		t.Lost = map[api.Cause]float64{}
	}
	t.Lost[cause] += s
}

// Add adds one job's spans (counting the job once if there are any).
func (t *Tally) Add(spans []Span) {
	if len(spans) == 0 {
		return
	}
	t.Jobs++
	for _, s := range spans {
		t.Useful += s.Useful
		t.Running += s.Running
		t.Backoff += s.Backoff
		t.AddLost(s.Cause, s.Lost)
	}
}

// AddJob adds one job: its spans, the seconds it waited to be first
// placed and its restarts (Waits), counting the job once if there is any
// of them.
func (t *Tally) AddJob(spans []Span, pending float64, restarts int) {
	t.Add(spans)
	if len(spans) == 0 && (pending > 0 || restarts > 0) {
		t.Jobs++ // it only waited within the window
	}
	t.Pending += pending
	t.Restarts += restarts
}

// merge adds u to t.
func (t *Tally) merge(u *Tally) {
	t.Jobs += u.Jobs
	t.Useful += u.Useful
	t.Running += u.Running
	t.Backoff += u.Backoff
	t.Pending += u.Pending
	t.Restarts += u.Restarts
	for c, v := range u.Lost {
		t.AddLost(c, v)
	}
}

// Row is the tally in hours, under key.
func (t *Tally) Row(key string) api.UsageRow {
	r := api.UsageRow{Key: key, Jobs: t.Jobs, UsefulGPUHours: hours(t.Useful), RunningGPUHours: hours(t.Running),
		RestartBackoffGangHours: hours(t.Backoff), PendingHours: hours(t.Pending), Restarts: t.Restarts}
	var lost float64
	for c, v := range t.Lost {
		if r.LostGPUHours == nil {
			r.LostGPUHours = map[api.Cause]float64{}
		}
		r.LostGPUHours[c] = hours(v)
		lost += v
	}
	r.GPUHours = hours(t.Useful + lost + t.Running)
	if settled := t.Useful + lost; settled > 0 {
		r.Goodput = round(t.Useful / settled)
	}
	return r
}

func hours(s float64) float64 { return round(s / 3600) }

// round keeps six decimals: a report of sums need not carry float noise.
func round(x float64) float64 { return math.Round(x*1e6) / 1e6 }

// Key is the row a job falls in: its queue, its user ("(none)" for a job
// no user submitted) or its ID.
func Key(j *api.Job, by api.UsageBy) string {
	switch by {
	case api.UsageByUser:
		return cmp.Or(j.Spec.User, "(none)")
	case api.UsageByJob:
		return j.ID
	}
	return cmp.Or(j.Spec.Queue, api.DefaultQueue)
}

// Report accounts for jobs over o's window, a row per key with any GPU
// time, backoff, pending time or restart in it, the most GPU-hours first,
// and their total.
func Report(jobs []*api.Job, o Options) api.UsageReport {
	by := cmp.Or(o.By, api.UsageByQueue)
	tallies := map[string]*Tally{}
	for _, j := range jobs {
		spans := Attempts(j, o)
		pending, restarts := Waits(j, o)
		if len(spans) == 0 && pending == 0 && restarts == 0 {
			continue
		}
		k := Key(j, by)
		t := tallies[k]
		if t == nil {
			t = &Tally{}
			tallies[k] = t
		}
		t.AddJob(spans, pending, restarts)
	}
	rep := api.UsageReport{Since: o.Since, Until: o.until(), By: by, Rows: []api.UsageRow{}}
	var total Tally
	for k, t := range tallies {
		rep.Rows = append(rep.Rows, t.Row(k))
		total.merge(t)
	}
	slices.SortFunc(rep.Rows, func(a, b api.UsageRow) int {
		return cmp.Or(cmp.Compare(b.GPUHours, a.GPUHours), cmp.Compare(b.RestartBackoffGangHours, a.RestartBackoffGangHours), cmp.Compare(a.Key, b.Key))
	})
	rep.Total = total.Row("TOTAL")
	return rep
}
