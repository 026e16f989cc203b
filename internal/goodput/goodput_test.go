package goodput

import (
	"testing"
	"time"

	"github.com/gangway/gangway/internal/api"
	"github.com/google/go-cmp/cmp"
)

var t0 = time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)

func at(m float64) time.Time { return t0.Add(time.Duration(m * float64(time.Minute))) }

// job is a job of 2 ranks × 4 GPUs (8 GPUs) with attempts.
func job(id, queue, user string, phase api.JobPhase, as ...api.Attempt) *api.Job {
	return &api.Job{ID: id, Spec: api.JobSpec{Queue: queue, User: user, Ranks: 2, GPUsPerRank: 4},
		Status: api.JobStatus{Phase: phase, Attempts: as}}
}

// ended is attempt n, running in full from minute from to minute to, ended so.
func ended(n int, from, to float64, outcome api.Outcome, cause api.Cause) api.Attempt {
	return api.Attempt{Number: n, Phase: api.AttemptEnded, Outcome: outcome, Cause: cause,
		CreatedAt: at(from - 1), RunningAt: at(from), StoppingAt: at(to), EndedAt: at(to)}
}

func ck(attempt int, m float64) *api.Checkpoint {
	return &api.Checkpoint{Step: int64(m), Attempt: attempt, Time: at(m), Path: "/ckpt/x"}
}

func resumeFrom(a api.Attempt, c *api.Checkpoint) api.Attempt { a.ResumeFrom = c; return a }

// gm is GPU-minutes of an 8-GPU gang, in GPU-seconds.
func gm(minutes float64) float64 { return minutes * 60 * 8 }

func TestAttempts(t *testing.T) {
	now := at(600)
	tests := []struct {
		name   string
		job    *api.Job
		opts   Options
		latest *api.Checkpoint
		want   []Span
	}{{
		name: "succeeded: useful throughout",
		job:  job("1", "a", "alice", api.JobSucceeded, ended(1, 0, 60, api.OutcomeSucceeded, api.CauseSucceeded)),
		want: []Span{{Attempt: 1, GPUs: 8, Useful: gm(60)}},
	}, {
		name: "node lost, resumed from its checkpoint: useful to the checkpoint, lost after, backoff until the next attempt",
		job: job("1", "a", "alice", api.JobSucceeded,
			ended(1, 0, 60, api.OutcomeFailed, api.CauseNodeLost),
			resumeFrom(ended(2, 66, 120, api.OutcomeSucceeded, api.CauseSucceeded), ck(1, 40))),
		want: []Span{
			{Attempt: 1, GPUs: 8, Useful: gm(40), Lost: gm(20), Cause: api.CauseNodeLost, Backoff: gm(5)},
			{Attempt: 2, GPUs: 8, Useful: gm(54)},
		},
	}, {
		name: "resumed from an older attempt's checkpoint: the one between saved nothing",
		job: job("1", "a", "alice", api.JobSucceeded,
			ended(1, 0, 60, api.OutcomeFailed, api.CauseUserError),
			resumeFrom(ended(2, 61, 70, api.OutcomeFailed, api.CauseHang), ck(1, 30)),
			resumeFrom(ended(3, 71, 100, api.OutcomeSucceeded, api.CauseSucceeded), ck(1, 30))),
		want: []Span{
			{Attempt: 1, GPUs: 8, Useful: gm(30), Lost: gm(30), Cause: api.CauseUserError},
			{Attempt: 2, GPUs: 8, Lost: gm(9), Cause: api.CauseHang},
			{Attempt: 3, GPUs: 8, Useful: gm(29)},
		},
	}, {
		name: "preempted after checkpointing on the signal: only the grace after the checkpoint is lost",
		job: job("1", "a", "alice", api.JobRunning,
			ended(1, 0, 30, api.OutcomePreempted, api.CausePreempted),
			resumeFrom(api.Attempt{Number: 2, Phase: api.AttemptRunning, CreatedAt: at(40), RunningAt: at(41)}, ck(1, 29.5))),
		opts: Options{Until: at(100)},
		want: []Span{
			{Attempt: 1, GPUs: 8, Useful: gm(29.5), Lost: gm(0.5), Cause: api.CausePreempted, Backoff: gm(10)},
			{Attempt: 2, GPUs: 8, Running: gm(59)},
		},
	}, {
		name: "no checkpoint known: an interrupted attempt is lost throughout",
		job:  job("1", "a", "alice", api.JobFailed, ended(1, 0, 60, api.OutcomeTimedOut, "")),
		want: []Span{{Attempt: 1, GPUs: 8, Lost: gm(60), Cause: api.CauseTimeLimit}},
	}, {
		name: "an attempt ended before causes were recorded: read from its reason",
		job: job("1", "a", "alice", api.JobFailed, func() api.Attempt {
			a := ended(1, 0, 60, api.OutcomeFailed, "")
			a.Reason = "no progress for 10m0s (hangTimeout 10m0s)"
			return a
		}()),
		want: []Span{{Attempt: 1, GPUs: 8, Lost: gm(60), Cause: api.CauseHang}},
	}, {
		name: "waiting to restart: the newest checkpoint will be resumed from, and the wait so far is backoff",
		job:  job("1", "a", "alice", api.JobRestarting, ended(1, 0, 60, api.OutcomeInterrupted, api.CauseGPUFault)),
		opts: Options{Until: at(70)}, latest: ck(1, 50),
		want: []Span{{Attempt: 1, GPUs: 8, Useful: gm(50), Lost: gm(10), Cause: api.CauseGPUFault, Backoff: gm(10)}},
	}, {
		name:   "a cancelled job's newest checkpoint is resumed by no one",
		job:    job("1", "a", "alice", api.JobCancelled, ended(1, 0, 60, api.OutcomeCancelled, api.CauseCancelled)),
		latest: ck(1, 50),
		want:   []Span{{Attempt: 1, GPUs: 8, Lost: gm(60), Cause: api.CauseCancelled}},
	}, {
		name: "a checkpoint of another attempt is not this one's",
		job:  job("1", "a", "alice", api.JobRestarting, ended(2, 0, 60, api.OutcomeFailed, api.CauseNodeLost)),
		opts: Options{Until: at(60)}, latest: ck(1, 50),
		want: []Span{{Attempt: 2, GPUs: 8, Lost: gm(60), Cause: api.CauseNodeLost}},
	}, {
		name: "a checkpoint recorded without its attempt counts if it was committed while the attempt ran",
		job: job("1", "a", "alice", api.JobSucceeded,
			ended(1, 0, 60, api.OutcomeFailed, api.CauseNodeLost),
			resumeFrom(ended(2, 60, 90, api.OutcomeSucceeded, api.CauseSucceeded), ck(0, 45))),
		want: []Span{{Attempt: 1, GPUs: 8, Useful: gm(45), Lost: gm(15), Cause: api.CauseNodeLost}, {Attempt: 2, GPUs: 8, Useful: gm(30)}},
	}, {
		name: "the window clips each part",
		job: job("1", "a", "alice", api.JobSucceeded,
			ended(1, 0, 60, api.OutcomeFailed, api.CauseNodeLost),
			resumeFrom(ended(2, 66, 120, api.OutcomeSucceeded, api.CauseSucceeded), ck(1, 40))),
		opts: Options{Since: at(50), Until: at(70)},
		want: []Span{
			{Attempt: 1, GPUs: 8, Lost: gm(10), Cause: api.CauseNodeLost, Backoff: gm(5)},
			{Attempt: 2, GPUs: 8, Useful: gm(4)},
		},
	}, {
		name: "an attempt wholly outside the window is left out",
		job: job("1", "a", "alice", api.JobSucceeded,
			ended(1, 0, 60, api.OutcomeFailed, api.CauseNodeLost),
			resumeFrom(ended(2, 66, 120, api.OutcomeSucceeded, api.CauseSucceeded), ck(1, 40))),
		opts: Options{Since: at(100)},
		want: []Span{{Attempt: 2, GPUs: 8, Useful: gm(20)}},
	}, {
		name: "stopping: settled to now, charged to the cause it stops for",
		job: job("1", "a", "alice", api.JobStopping, api.Attempt{Number: 1, Phase: api.AttemptStopping, Outcome: api.OutcomeInterrupted,
			Cause: api.CauseDrain, CreatedAt: at(0), RunningAt: at(1), StoppingAt: at(10)}),
		opts: Options{Until: at(11)},
		want: []Span{{Attempt: 1, GPUs: 8, Lost: gm(10), Cause: api.CauseDrain}},
	}, {
		name: "never ran in full: from its placement",
		job: job("1", "a", "alice", api.JobFailed, api.Attempt{Number: 1, Phase: api.AttemptEnded, Outcome: api.OutcomeFailed,
			Cause: api.CauseUserError, CreatedAt: at(0), EndedAt: at(2)}),
		want: []Span{{Attempt: 1, GPUs: 8, Lost: gm(2), Cause: api.CauseUserError}},
	}, {
		name: "fractional GPUs",
		job: &api.Job{ID: "1", Spec: api.JobSpec{Ranks: 4, GPUMilli: 250},
			Status: api.JobStatus{Phase: api.JobSucceeded, Attempts: []api.Attempt{ended(1, 0, 60, api.OutcomeSucceeded, api.CauseSucceeded)}}},
		want: []Span{{Attempt: 1, GPUs: 1, Useful: 3600}},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := tt.opts
			if o.Now.IsZero() {
				o.Now = now
				if o.Until.IsZero() {
					o.Until = now
				}
			}
			if tt.latest != nil {
				o.Latest = map[string]*api.Checkpoint{tt.job.ID: tt.latest}
			}
			if diff := cmp.Diff(tt.want, Attempts(tt.job, o)); diff != "" {
				t.Errorf("spans (-want +got):\n%s", diff)
			}
		})
	}
}

func TestReport(t *testing.T) {
	now := at(600)
	submitted := func(j *api.Job, m float64) *api.Job { j.SubmittedAt = at(m); return j }
	jobs := []*api.Job{
		job("1", "research", "alice", api.JobSucceeded, ended(1, 0, 60, api.OutcomeSucceeded, api.CauseSucceeded)),
		job("2", "research", "bob", api.JobSucceeded,
			ended(1, 0, 60, api.OutcomeFailed, api.CauseNodeLost),
			resumeFrom(ended(2, 66, 120, api.OutcomeSucceeded, api.CauseSucceeded), ck(1, 30))),
		submitted(job("3", "prod", "alice", api.JobRunning, api.Attempt{Number: 1, Phase: api.AttemptRunning, CreatedAt: at(569), RunningAt: at(570)}), 500),
		job("4", "prod", "bob", api.JobFailed, ended(1, 0, 15, api.OutcomeFailed, api.CauseUserError)),
		job("5", "prod", "carol", api.JobSucceeded, ended(1, -100, -40, api.OutcomeSucceeded, api.CauseSucceeded)), // before the window
		submitted(job("6", "prod", "carol", api.JobPending), 590),                                                  // waiting still
		submitted(job("7", "prod", "carol", api.JobCancelled), -60),                                                // cancelled waiting, before the window
	}
	row := func(key string, jobs int, useful, running, backoff float64, lost map[api.Cause]float64) api.UsageRow {
		r := api.UsageRow{Key: key, Jobs: jobs, UsefulGPUHours: useful, RunningGPUHours: running, RestartBackoffGangHours: backoff, LostGPUHours: lost}
		var l float64
		for _, v := range lost {
			l += v
		}
		r.GPUHours = useful + l + running
		if useful+l > 0 {
			r.Goodput = round(useful / (useful + l))
		}
		return r
	}
	waits := func(r api.UsageRow, pendingMinutes float64, restarts int) api.UsageRow {
		r.PendingHours, r.Restarts = round(pendingMinutes/60), restarts
		return r
	}
	h := func(minutes float64) float64 { return round(minutes * 8 / 60) } // GPU-hours of an 8-GPU gang
	total := waits(row("TOTAL", 5, h(60+30+54), h(30), h(5), map[api.Cause]float64{api.CauseNodeLost: h(30), api.CauseUserError: h(15)}), 69+10, 1)
	tests := []struct {
		by   api.UsageBy
		want []api.UsageRow
	}{
		{api.UsageByQueue, []api.UsageRow{
			waits(row("research", 2, h(60+30+54), 0, h(5), map[api.Cause]float64{api.CauseNodeLost: h(30)}), 0, 1),
			waits(row("prod", 3, 0, h(30), 0, map[api.Cause]float64{api.CauseUserError: h(15)}), 69+10, 0),
		}},
		{api.UsageByUser, []api.UsageRow{
			waits(row("bob", 2, h(30+54), 0, h(5), map[api.Cause]float64{api.CauseNodeLost: h(30), api.CauseUserError: h(15)}), 0, 1),
			waits(row("alice", 2, h(60), h(30), 0, nil), 69, 0),
			waits(row("carol", 1, 0, 0, 0, nil), 10, 0),
		}},
		{api.UsageByJob, []api.UsageRow{
			waits(row("2", 1, h(30+54), 0, h(5), map[api.Cause]float64{api.CauseNodeLost: h(30)}), 0, 1),
			row("1", 1, h(60), 0, 0, nil),
			waits(row("3", 1, 0, h(30), 0, nil), 69, 0),
			row("4", 1, 0, 0, 0, map[api.Cause]float64{api.CauseUserError: h(15)}),
			waits(row("6", 1, 0, 0, 0, nil), 10, 0),
		}},
	}
	for _, tt := range tests {
		t.Run(string(tt.by), func(t *testing.T) {
			got := Report(jobs, Options{Since: t0, Now: now, By: tt.by})
			want := api.UsageReport{Since: t0, Until: now, By: tt.by, Rows: tt.want, Total: total}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("report (-want +got):\n%s", diff)
			}
		})
	}
	if got := Report(nil, Options{Now: now}); got.By != api.UsageByQueue || got.Rows == nil || got.Total.Key != "TOTAL" {
		t.Errorf("empty report: %+v; want by queue, no rows (an empty list), a TOTAL row", got)
	}
}

func TestWaits(t *testing.T) {
	now := at(600)
	sub := func(m float64, phase api.JobPhase, as ...api.Attempt) *api.Job {
		j := job("1", "a", "alice", phase, as...)
		j.SubmittedAt = at(m)
		return j
	}
	cancelled := sub(10, api.JobCancelled)
	cancelled.Status.FinishedAt = at(40)
	for _, tt := range []struct {
		name     string
		job      *api.Job
		since    time.Time
		pending  float64 // minutes
		restarts int
	}{
		{"placed after 5 minutes", sub(0, api.JobSucceeded, ended(1, 6, 60, api.OutcomeSucceeded, api.CauseSucceeded)), time.Time{}, 5, 0},
		{"the window cuts the wait", sub(0, api.JobSucceeded, ended(1, 31, 60, api.OutcomeSucceeded, api.CauseSucceeded)), at(20), 10, 0},
		{"waiting still", sub(590, api.JobPending), time.Time{}, 10, 0},
		{"cancelled waiting", cancelled, time.Time{}, 30, 0},
		{"two restarts, one before the window", sub(0, api.JobSucceeded,
			ended(1, 1, 10, api.OutcomeFailed, api.CauseNodeLost),
			ended(2, 12, 20, api.OutcomeFailed, api.CauseGPUFault),
			ended(3, 31, 60, api.OutcomeSucceeded, api.CauseSucceeded)), at(25), 0, 1},
		{"no submission time: no wait known", job("1", "a", "alice", api.JobPending), time.Time{}, 0, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p, r := Waits(tt.job, Options{Since: tt.since, Now: now})
			if p != tt.pending*60 || r != tt.restarts {
				t.Errorf("Waits = %gs, %d restarts; want %gs, %d", p, r, tt.pending*60, tt.restarts)
			}
		})
	}
}
