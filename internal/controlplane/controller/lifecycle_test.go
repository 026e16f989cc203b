package controller

import (
	"testing"
	"time"

	"github.com/gangway/gangway/internal/api"
	"github.com/gangway/gangway/internal/controlplane/store"
	"github.com/gangway/gangway/internal/scheduler"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// The lifecycle's tests give it a world written as data (nodes, rank
// statuses, checkpoints, heartbeats, the time) and compare what it decided
// with what it should have: no store, no clock, no sleeps.

// t0 is when every test's attempt was created.
var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// fakeBeats are heartbeats by node; a node missing was never heard from.
type fakeBeats map[string]beat

func (f fakeBeats) Get(node string) (time.Time, int64) { return f[node].at, f[node].ack }

func (f fakeBeats) Run(node string) (time.Time, time.Time, bool) {
	b, ok := f[node]
	return b.run, b.at, ok
}

// world is what one test's lifecycle decides from.
type world struct {
	nodes    []*api.Node      // default: n1 and n2, ready
	ranks    []api.RankStatus // in the view
	reported []api.RankStatus // handed over since the view
	ckpt     *api.Checkpoint  // j1's newest
	progress *api.Progress    // j1's newest
	stops    map[int]int64    // j1's stop revisions by attempt, as the cache saw them
	beats    fakeBeats
	now      time.Time // default: t0 + 1m
}

func (w world) lifecycle(jobs ...*api.Job) lifecycle {
	v := store.View{Jobs: map[string]*api.Job{}, Nodes: map[string]*api.Node{}, Ranks: map[string]*api.RankStatus{},
		Ckpts: map[string]*api.Checkpoint{}, Progress: map[string]*api.Progress{}, Stops: map[string]map[int]int64{}}
	for _, j := range jobs {
		v.Jobs[j.ID] = j
	}
	nodes := w.nodes
	if nodes == nil {
		nodes = []*api.Node{node("n1"), node("n2")}
	}
	for _, n := range nodes {
		v.Nodes[n.Name] = n
	}
	for i := range w.ranks {
		r := &w.ranks[i]
		v.Ranks[api.TaskKey(r.JobID, r.Attempt, r.Rank)] = r
	}
	reported := map[string]*api.RankStatus{}
	for i := range w.reported {
		r := &w.reported[i]
		reported[api.TaskKey(r.JobID, r.Attempt, r.Rank)] = r
	}
	if w.ckpt != nil {
		v.Ckpts["j1"] = w.ckpt
	}
	if w.progress != nil {
		v.Progress["j1"] = w.progress
	}
	if w.stops != nil {
		v.Stops["j1"] = w.stops
	}
	now := w.now
	if now.IsZero() {
		now = t0.Add(time.Minute)
	}
	return lifecycle{v: v, reported: reported, beats: w.beats, nodeTimeout: 3 * time.Second, now: now}
}

func node(name string) *api.Node {
	return &api.Node{Name: name, Status: api.NodeStatus{State: api.NodeReady}}
}

func lostNode(name string) *api.Node {
	n := node(name)
	n.Status.State = api.NodeLost
	return n
}

func drainingNode(name string) *api.Node {
	n := node(name)
	n.Status.Draining = true
	return n
}

// running is job j1 with attempt 1 running: rank 0 on n1, rank 1 on n2,
// restarts after 1s by default. adjust, if not nil, changes it.
func running(adjust func(*api.Job)) *api.Job {
	j := &api.Job{ID: "j1", ModRevision: 100,
		Spec: api.JobSpec{Ranks: 2, GPUsPerRank: 1, Command: []string{"train"}, RestartBackoff: api.Duration(time.Second)},
		Status: api.JobStatus{Phase: api.JobRunning, Attempts: []api.Attempt{{
			Number: 1, Phase: api.AttemptRunning, CreatedAt: t0,
			Placement: []api.RankPlacement{{Rank: 0, Node: "n1", GPUs: []int{0}}, {Rank: 1, Node: "n2", NodeRank: 1, GPUs: []int{0}}},
		}}},
	}
	if adjust != nil {
		adjust(j)
	}
	return j
}

// stopping is j1 with attempt 1 stopping after it failed, as stop wrote
// it at revision 100.
func stopping(adjust func(*api.Job)) *api.Job {
	return running(func(j *api.Job) {
		j.Status.Phase = api.JobStopping
		a := j.Status.Current()
		a.Phase, a.Outcome, a.Reason, a.StoppingAt = api.AttemptStopping, api.OutcomeFailed, "rank 1 on n2 exited with code 1", t0
		if adjust != nil {
			adjust(j)
		}
	})
}

func rank(r int, state api.RankState, code int) api.RankStatus {
	return api.RankStatus{JobID: "j1", Attempt: 1, Rank: r, Node: []string{"n1", "n2"}[r], State: state, ExitCode: code}
}

func ranksRunning() []api.RankStatus {
	return []api.RankStatus{rank(0, api.RankRunning, 0), rank(1, api.RankRunning, 0)}
}

func acked(rev int64) fakeBeats {
	return fakeBeats{"n1": {at: t0, ack: rev}, "n2": {at: t0, ack: rev}}
}

func maxRestarts(n int) func(*api.Job) { return func(j *api.Job) { j.Spec.MaxRestarts = &n } }

// result is what a decision says, in the fields the lifecycle sets.
type result struct {
	Step          step
	Phase         api.JobPhase
	Reason        string
	Attempt       api.AttemptPhase
	Outcome       api.Outcome
	AttemptReason string
	Restarts      int
	NotBefore     time.Time
	Finished      time.Time
	RunningAt     time.Time
	StoppingAt    time.Time
	EndedAt       time.Time
}

func resultOf(d decision) result {
	if d.job == nil {
		return result{Step: d.step}
	}
	st := &d.job.Status
	r := result{Step: d.step, Phase: st.Phase, Reason: st.Reason, Restarts: st.Restarts, NotBefore: st.NotBefore, Finished: st.FinishedAt}
	if a := st.Current(); a != nil {
		r.Attempt, r.Outcome, r.AttemptReason = a.Phase, a.Outcome, a.Reason
		r.RunningAt, r.StoppingAt, r.EndedAt = a.RunningAt, a.StoppingAt, a.EndedAt
	}
	return r
}

// decideOnce runs decide on a copy of j and checks it left j as it was:
// the view's jobs are shared with the cache.
func decideOnce(t *testing.T, l lifecycle, j *api.Job) result {
	t.Helper()
	before := j.Clone()
	got := resultOf(l.decide(j))
	if diff := cmp.Diff(before, j, cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("decide changed the view's job (-before +after):\n%s", diff)
	}
	return got
}

var (
	now    = t0.Add(time.Minute)
	failed = func(reason string) result {
		return result{Step: stepStop, Phase: api.JobStopping, Reason: "stopping attempt 1: " + reason,
			Attempt: api.AttemptStopping, Outcome: api.OutcomeFailed, AttemptReason: reason, StoppingAt: now}
	}
)

func TestRunningAttempts(t *testing.T) {
	tests := []struct {
		name  string
		job   *api.Job
		world world
		want  result
	}{{
		name:  "every rank running stamps RunningAt",
		job:   running(nil),
		world: world{ranks: ranksRunning()},
		want:  result{Step: stepStamp, Phase: api.JobRunning, Attempt: api.AttemptRunning, RunningAt: now},
	}, {
		name:  "stamped once",
		job:   running(func(j *api.Job) { j.Status.Current().RunningAt = t0 }),
		world: world{ranks: ranksRunning()},
	}, {
		name:  "a rank not yet reported",
		job:   running(nil),
		world: world{ranks: ranksRunning()[:1]},
	}, {
		name:  "an attempt that is not running is left to stopping",
		job:   running(func(j *api.Job) { j.Status.Current().Phase = api.AttemptStopping }),
		world: world{ranks: []api.RankStatus{rank(0, api.RankExited, 1), rank(1, api.RankRunning, 0)}},
	}, {
		name:  "a failed rank stops the attempt",
		job:   running(nil),
		world: world{ranks: []api.RankStatus{rank(0, api.RankRunning, 0), {JobID: "j1", Attempt: 1, Rank: 1, Node: "n2", State: api.RankExited, ExitCode: 137, Signal: "SIGKILL"}}},
		want:  failed("rank 1 on n2 exited with code 137 (SIGKILL)"),
	}, {
		name:  "a reported status wins over the view's",
		job:   running(nil),
		world: world{ranks: ranksRunning(), reported: []api.RankStatus{rank(1, api.RankExited, 1)}},
		want:  failed("rank 1 on n2 exited with code 1"),
	}, {
		name: "a rank that could not start",
		job:  running(nil),
		world: world{ranks: []api.RankStatus{{JobID: "j1", Attempt: 1, Rank: 0, Node: "n1", State: api.RankFailedStart, Message: "no such file"},
			rank(1, api.RankRunning, 0)}},
		want: failed("rank 0 on n1 could not start: no such file"),
	}, {
		name:  "every rank exited 0: succeeded and ended in the same write",
		job:   running(nil),
		world: world{ranks: []api.RankStatus{rank(0, api.RankExited, 0), rank(1, api.RankExited, 0)}},
		want: result{Step: stepStopEnd, Phase: api.JobSucceeded, Finished: now, Attempt: api.AttemptEnded, Outcome: api.OutcomeSucceeded,
			AttemptReason: "every rank exited 0", StoppingAt: now, EndedAt: now},
	}, {
		name:  "cancelled by the user",
		job:   running(func(j *api.Job) { j.Status.CancelRequested = true }),
		world: world{ranks: ranksRunning()},
		want: result{Step: stepStop, Phase: api.JobStopping, Reason: "stopping attempt 1: cancelled by user", Attempt: api.AttemptStopping,
			Outcome: api.OutcomeCancelled, AttemptReason: "cancelled by user", StoppingAt: now},
	}, {
		name:  "a lost node fails the attempt",
		job:   running(nil),
		world: world{nodes: []*api.Node{node("n1"), lostNode("n2")}, ranks: ranksRunning()},
		want:  failed("node n2 lost"),
	}, {
		name:  "a node gone from the store is lost",
		job:   running(nil),
		world: world{nodes: []*api.Node{node("n1")}, ranks: ranksRunning()},
		want:  failed("node n2 lost"),
	}, {
		name:  "a lost node whose gang has exited elsewhere ends at once and restarts at once, using up no restart",
		job:   running(nil),
		world: world{nodes: []*api.Node{node("n1"), lostNode("n2")}, ranks: []api.RankStatus{rank(0, api.RankExited, 0)}},
		want: result{Step: stepStopEnd, Phase: api.JobRestarting, Reason: "attempt 1 failed (node n2 lost); requeued (node-lost uses up no restart)",
			NotBefore: now, Attempt: api.AttemptEnded, Outcome: api.OutcomeFailed,
			AttemptReason: "node n2 lost", StoppingAt: now, EndedAt: now},
	}, {
		name:  "a draining node interrupts the attempt",
		job:   running(nil),
		world: world{nodes: []*api.Node{node("n1"), drainingNode("n2")}, ranks: ranksRunning()},
		want: result{Step: stepStop, Phase: api.JobStopping, Reason: "stopping attempt 1: node n2 is draining", Attempt: api.AttemptStopping,
			Outcome: api.OutcomeInterrupted, AttemptReason: "node n2 is draining", StoppingAt: now},
	}, {
		name:  "a drain requeues at once and does not count a restart",
		job:   running(func(j *api.Job) { j.Status.Restarts = 2 }),
		world: world{nodes: []*api.Node{node("n1"), drainingNode("n2")}, ranks: []api.RankStatus{rank(0, api.RankExited, 143), rank(1, api.RankExited, 143)}},
		want: result{Step: stepStopEnd, Phase: api.JobRestarting, Reason: "attempt 1 interrupted (node n2 is draining); requeued",
			Restarts: 2, NotBefore: now, Attempt: api.AttemptEnded, Outcome: api.OutcomeInterrupted,
			AttemptReason: "node n2 is draining", StoppingAt: now, EndedAt: now},
	}, {
		name:  "within the time limit",
		job:   running(func(j *api.Job) { j.Spec.TimeLimit = api.Duration(time.Hour) }),
		world: world{ranks: ranksRunning(), now: t0.Add(time.Hour)},
		want:  result{Step: stepStamp, Phase: api.JobRunning, Attempt: api.AttemptRunning, RunningAt: t0.Add(time.Hour)},
	}, {
		name:  "past the time limit",
		job:   running(func(j *api.Job) { j.Spec.TimeLimit = api.Duration(time.Hour); j.Status.Current().RunningAt = t0 }),
		world: world{ranks: ranksRunning(), now: t0.Add(time.Hour + time.Second)},
		want: result{Step: stepStop, Phase: api.JobStopping, Reason: "stopping attempt 1: ran past its time limit of 1h0m0s",
			Attempt: api.AttemptStopping, Outcome: api.OutcomeTimedOut, AttemptReason: "ran past its time limit of 1h0m0s",
			RunningAt: t0, StoppingAt: t0.Add(time.Hour + time.Second)},
	}, {
		name: "silent past the hang timeout",
		job: running(func(j *api.Job) {
			j.Spec.HangTimeout = api.Duration(10 * time.Minute)
			j.Status.Current().RunningAt = t0
		}),
		world: world{ranks: ranksRunning(), progress: &api.Progress{Step: 5, Attempt: 1, Time: t0.Add(time.Minute)},
			now: t0.Add(11*time.Minute + 400*time.Millisecond)},
		want: result{Step: stepStop, Phase: api.JobStopping, Reason: "stopping attempt 1: no progress for 10m0s (hangTimeout 10m0s)",
			Attempt: api.AttemptStopping, Outcome: api.OutcomeFailed, AttemptReason: "no progress for 10m0s (hangTimeout 10m0s)",
			RunningAt: t0, StoppingAt: t0.Add(11*time.Minute + 400*time.Millisecond)},
	}, {
		name: "silent for just the hang timeout",
		job: running(func(j *api.Job) {
			j.Spec.HangTimeout = api.Duration(10 * time.Minute)
			j.Status.Current().RunningAt = t0
		}),
		world: world{ranks: ranksRunning(), progress: &api.Progress{Step: 5, Attempt: 1, Time: t0.Add(time.Minute)},
			now: t0.Add(11 * time.Minute)},
	}, {
		name: "the hang timeout counts only this attempt's progress",
		job: running(func(j *api.Job) {
			j.Spec.HangTimeout = api.Duration(10 * time.Minute)
			j.Status.Current().RunningAt = t0
		}),
		world: world{ranks: ranksRunning(), progress: &api.Progress{Step: 5, Attempt: 0, Time: t0},
			now: t0.Add(time.Hour)},
	}, {
		name:  "preempted: a checkpoint after the signal stops the attempt",
		job:   running(preemptedAt(t0.Add(time.Minute))),
		world: world{ranks: ranksRunning(), ckpt: &api.Checkpoint{Step: 7, Time: t0.Add(time.Minute + time.Second)}, now: t0.Add(2 * time.Minute)},
		want:  preempted("preempted for job j2 after checkpointing step 7", t0.Add(2*time.Minute)),
	}, {
		name:  "preempted: a checkpoint from before the signal does not count within the grace",
		job:   running(preemptedAt(t0.Add(time.Minute))),
		world: world{ranks: ranksRunning(), ckpt: &api.Checkpoint{Step: 6, Time: t0.Add(time.Minute)}, now: t0.Add(time.Minute + 29*time.Second)},
	}, {
		name:  "preempted: the grace expires without a checkpoint",
		job:   running(preemptedAt(t0.Add(time.Minute))),
		world: world{ranks: ranksRunning(), now: t0.Add(time.Minute + 30*time.Second)},
		want:  preempted("preempted for job j2; no checkpoint within the 30s grace", t0.Add(time.Minute+30*time.Second)),
	}, {
		name: "preempted: a rank dying of the signal is preempted, not failed",
		job:  running(preemptedAt(t0.Add(time.Minute))),
		world: world{ranks: []api.RankStatus{{JobID: "j1", Attempt: 1, Rank: 0, Node: "n1", State: api.RankExited, ExitCode: 138, Signal: "SIGUSR1"},
			rank(1, api.RankRunning, 0)}, now: t0.Add(time.Minute + time.Second)},
		want: preempted("preempted for job j2; rank 0 exited with code 138 (SIGUSR1) after the checkpoint signal", t0.Add(time.Minute+time.Second)),
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := decideOnce(t, tt.world.lifecycle(tt.job), tt.job)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("decision (-want +got):\n%s", diff)
			}
		})
	}
}

func preemptedAt(at time.Time) func(*api.Job) {
	return func(j *api.Job) {
		a := j.Status.Current()
		a.RunningAt, a.PreemptedAt, a.PreemptedFor = t0, at, "j2"
	}
}

func preempted(reason string, at time.Time) result {
	return result{Step: stepStop, Phase: api.JobStopping, Reason: "stopping attempt 1: " + reason,
		Attempt: api.AttemptStopping, Outcome: api.OutcomePreempted, AttemptReason: reason, RunningAt: t0, StoppingAt: at}
}

func TestStoppingAttempts(t *testing.T) {
	restarting := result{Step: stepEnd, Phase: api.JobRestarting, Reason: "attempt 1 failed: rank 1 on n2 exited with code 1; restart 1 of 3 after 1s",
		Restarts: 1, NotBefore: now.Add(time.Second), Attempt: api.AttemptEnded, Outcome: api.OutcomeFailed,
		AttemptReason: "rank 1 on n2 exited with code 1", StoppingAt: t0, EndedAt: now}
	tests := []struct {
		name  string
		job   *api.Job
		world world
		want  result
	}{{
		name:  "waits for an agent that has not acknowledged the stop",
		job:   stopping(nil),
		world: world{ranks: ranksRunning(), beats: fakeBeats{"n1": {ack: 100}, "n2": {ack: 99}}},
	}, {
		name:  "ends once every agent acknowledged the stop revision",
		job:   stopping(nil),
		world: world{ranks: ranksRunning(), beats: acked(100)},
		want:  restarting,
	}, {
		name:  "the stop revision the cache saw the assignments deleted at",
		job:   stopping(nil),
		world: world{ranks: ranksRunning(), stops: map[int]int64{1: 90}, beats: acked(90)},
		want:  restarting,
	}, {
		name:  "a stop revision the cache saw is never later than the job's",
		job:   stopping(nil),
		world: world{ranks: ranksRunning(), stops: map[int]int64{1: 120}, beats: acked(100)},
		want:  restarting,
	}, {
		name:  "the stop revision an older version recorded",
		job:   stopping(func(j *api.Job) { j.Status.Current().StopRevision = 80 }),
		world: world{ranks: ranksRunning(), stops: map[int]int64{1: 90}, beats: acked(80)},
		want:  restarting,
	}, {
		name:  "ends without acknowledgements once every rank exited",
		job:   stopping(nil),
		world: world{ranks: []api.RankStatus{rank(0, api.RankExited, 143), rank(1, api.RankExited, 1)}},
		want:  restarting,
	}, {
		name:  "a node lost while its gang is stopping: its agent fenced itself",
		job:   stopping(nil),
		world: world{nodes: []*api.Node{node("n1"), lostNode("n2")}, ranks: ranksRunning(), beats: fakeBeats{"n1": {ack: 100}}},
		want:  restarting,
	}, {
		name:  "a node lost while its gang is stopping, the rest exited",
		job:   stopping(nil),
		world: world{nodes: []*api.Node{node("n1"), lostNode("n2")}, ranks: []api.RankStatus{rank(0, api.RankExited, 143)}},
		want:  restarting,
	}, {
		name:  "a node lost does not end a gang whose other agent has not let go",
		job:   stopping(nil),
		world: world{nodes: []*api.Node{node("n1"), lostNode("n2")}, ranks: ranksRunning(), beats: fakeBeats{"n1": {ack: 99}}},
	}, {
		name: "no attempt",
		job:  stopping(func(j *api.Job) { j.Status.Attempts = nil }),
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := decideOnce(t, tt.world.lifecycle(tt.job), tt.job)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("decision (-want +got):\n%s", diff)
			}
		})
	}
}

// TestEndedAttempts covers where a job goes once its attempt ended: done,
// requeued, or restarting after a backoff that doubles up to its cap.
func TestEndedAttempts(t *testing.T) {
	ended := func(outcome api.Outcome, reason string, adjust ...func(*api.Job)) *api.Job {
		return stopping(func(j *api.Job) {
			a := j.Status.Current()
			a.Outcome, a.Reason = outcome, reason
			for _, f := range adjust {
				f(j)
			}
		})
	}
	// history: n earlier attempts that ended with reason after running
	// for ran, each counted as a restart.
	history := func(n int, reason string, ran time.Duration) func(*api.Job) {
		return func(j *api.Job) {
			j.Status.Restarts = n
			var prev []api.Attempt
			for i := range n {
				at := t0.Add(-time.Duration(n-i) * time.Hour)
				prev = append(prev, api.Attempt{Number: i + 1, Phase: api.AttemptEnded, Outcome: api.OutcomeFailed, Reason: reason,
					RunningAt: at, EndedAt: at.Add(ran)})
			}
			j.Status.Attempts = append(prev, j.Status.Attempts...)
		}
	}
	restarts := func(n int) func(*api.Job) { return history(n, "exit 1", time.Second) }
	ranFor := func(d time.Duration) func(*api.Job) {
		return func(j *api.Job) { j.Status.Current().RunningAt = now.Add(-d) }
	}
	done := func(phase api.JobPhase, reason string, outcome api.Outcome, attemptReason string) result {
		return result{Step: stepEnd, Phase: phase, Reason: reason, Finished: now, Attempt: api.AttemptEnded,
			Outcome: outcome, AttemptReason: attemptReason, StoppingAt: t0, EndedAt: now}
	}
	restart := func(n int, backoff time.Duration, reason string) result {
		return result{Step: stepEnd, Phase: api.JobRestarting, Reason: reason, Restarts: n, NotBefore: now.Add(backoff),
			Attempt: api.AttemptEnded, Outcome: api.OutcomeFailed, AttemptReason: "exit 1", StoppingAt: t0, EndedAt: now}
	}
	tests := []struct {
		name string
		job  *api.Job
		want result
	}{{
		name: "succeeded",
		job:  ended(api.OutcomeSucceeded, "every rank exited 0"),
		want: done(api.JobSucceeded, "", api.OutcomeSucceeded, "every rank exited 0"),
	}, {
		name: "cancelled",
		job:  ended(api.OutcomeCancelled, "cancelled by user"),
		want: done(api.JobCancelled, "cancelled by user", api.OutcomeCancelled, "cancelled by user"),
	}, {
		name: "a cancel requested while the attempt failed wins over a restart",
		job:  ended(api.OutcomeFailed, "exit 1", func(j *api.Job) { j.Status.CancelRequested = true }),
		want: done(api.JobCancelled, "cancelled by user", api.OutcomeFailed, "exit 1"),
	}, {
		name: "timed out: failed, never restarted",
		job:  ended(api.OutcomeTimedOut, "ran past its time limit of 1h0m0s"),
		want: done(api.JobFailed, "attempt 1 ran past its time limit of 1h0m0s", api.OutcomeTimedOut, "ran past its time limit of 1h0m0s"),
	}, {
		name: "preempted: requeued at once, no restart counted",
		job:  ended(api.OutcomePreempted, "preempted for job j2 after checkpointing step 7", restarts(3)),
		want: result{Step: stepEnd, Phase: api.JobRestarting, Reason: "attempt 1 preempted (preempted for job j2 after checkpointing step 7); requeued",
			Restarts: 3, NotBefore: now, Attempt: api.AttemptEnded, Outcome: api.OutcomePreempted,
			AttemptReason: "preempted for job j2 after checkpointing step 7", StoppingAt: t0, EndedAt: now},
	}, {
		name: "interrupted: requeued at once, no restart counted",
		job:  ended(api.OutcomeInterrupted, "node n2 is draining", restarts(3)),
		want: result{Step: stepEnd, Phase: api.JobRestarting, Reason: "attempt 1 interrupted (node n2 is draining); requeued",
			Restarts: 3, NotBefore: now, Attempt: api.AttemptEnded, Outcome: api.OutcomeInterrupted,
			AttemptReason: "node n2 is draining", StoppingAt: t0, EndedAt: now},
	}, {
		name: "first failure: the restart backoff itself",
		job:  ended(api.OutcomeFailed, "exit 1"),
		want: restart(1, time.Second, "attempt 1 failed: exit 1; restart 1 of 3 after 1s"),
	}, {
		name: "the backoff doubles per restart",
		job:  ended(api.OutcomeFailed, "exit 1", restarts(2)),
		want: restart(3, 4*time.Second, "attempt 1 failed: exit 1; restart 3 of 3 after 4s"),
	}, {
		name: "the backoff stops doubling at its cap",
		job:  ended(api.OutcomeFailed, "exit 1", maxRestarts(20), restarts(9)),
		want: restart(10, api.MaxRestartBackoff, "attempt 1 failed: exit 1; restart 10 of 20 after 5m0s"),
	}, {
		name: "a backoff doubled past int64 is capped",
		job:  ended(api.OutcomeFailed, "exit 1", maxRestarts(100), restarts(40)),
		want: restart(41, api.MaxRestartBackoff, "attempt 1 failed: exit 1; restart 41 of 100 after 5m0s"),
	}, {
		name: "a backoff whose shift would wrap to zero is still capped",
		job:  ended(api.OutcomeFailed, "exit 1", maxRestarts(100), restarts(60)),
		want: restart(61, api.MaxRestartBackoff, "attempt 1 failed: exit 1; restart 61 of 100 after 5m0s"),
	}, {
		name: "an attempt that ran past BackoffReset restarts after the base backoff",
		job:  ended(api.OutcomeFailed, "exit 1", maxRestarts(20), restarts(9), ranFor(BackoffReset)),
		want: func() result {
			r := restart(10, time.Second, "attempt 1 failed: exit 1; restart 10 of 20 after 1s")
			r.RunningAt = now.Add(-BackoffReset)
			return r
		}(),
	}, {
		name: "crashes before a long run do not count",
		job:  ended(api.OutcomeFailed, "exit 1", maxRestarts(20), history(9, "exit 1", BackoffReset)),
		want: restart(10, time.Second, "attempt 1 failed: exit 1; restart 10 of 20 after 1s"),
	}, {
		name: "lost nodes do not double the backoff",
		job:  ended(api.OutcomeFailed, "exit 1", maxRestarts(20), history(9, "node n2 lost", time.Second)),
		want: restart(10, time.Second, "attempt 1 failed: exit 1; restart 10 of 20 after 1s"),
	}, {
		name: "no backoff restarts at once",
		job:  ended(api.OutcomeFailed, "exit 1", func(j *api.Job) { j.Spec.RestartBackoff = 0 }),
		want: restart(1, 0, "attempt 1 failed: exit 1; restart 1 of 3 after 0s"),
	}, {
		name: "maxRestarts exhausted",
		job:  ended(api.OutcomeFailed, "exit 1", restarts(3)),
		want: func() result {
			r := done(api.JobFailed, "attempt 1 failed: exit 1; no restarts left (maxRestarts 3)", api.OutcomeFailed, "exit 1")
			r.Restarts = 3
			return r
		}(),
	}, {
		name: "maxRestarts 0 never restarts",
		job:  ended(api.OutcomeFailed, "exit 1", maxRestarts(0)),
		want: done(api.JobFailed, "attempt 1 failed: exit 1; no restarts left (maxRestarts 0)", api.OutcomeFailed, "exit 1"),
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := world{ranks: []api.RankStatus{rank(0, api.RankExited, 1), rank(1, api.RankExited, 1)}}
			got := decideOnce(t, w.lifecycle(tt.job), tt.job)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("decision (-want +got):\n%s", diff)
			}
		})
	}
}

func TestWaitingJobs(t *testing.T) {
	waiting := func(phase api.JobPhase, cancel bool) *api.Job {
		return &api.Job{ID: "j1", Status: api.JobStatus{Phase: phase, CancelRequested: cancel}}
	}
	cancelled := result{Step: stepFinish, Phase: api.JobCancelled, Reason: "cancelled before it ran", Finished: now}
	tests := []struct {
		name string
		job  *api.Job
		want result
	}{
		{"pending, cancelled", waiting(api.JobPending, true), cancelled},
		{"restarting, cancelled", waiting(api.JobRestarting, true), cancelled},
		{"pending", waiting(api.JobPending, false), result{}},
		{"finished", waiting(api.JobSucceeded, true), result{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := decideOnce(t, world{}.lifecycle(tt.job), tt.job)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("decision (-want +got):\n%s", diff)
			}
		})
	}
}

func TestNodeLost(t *testing.T) {
	type lost struct {
		State  api.NodeState
		Reason string
		LostAt time.Time
		// LastSeenAt is stored with the loss: a new leader's memory of
		// heartbeats starts empty.
		LastSeenAt time.Time
		Silent     time.Duration
	}
	tests := []struct {
		name  string
		node  *api.Node
		heard time.Time
		want  *lost
	}{
		{"heard from within the timeout", node("n1"), now.Add(-3 * time.Second), nil},
		{"silent past the timeout", node("n1"), now.Add(-3500 * time.Millisecond),
			&lost{api.NodeLost, "no heartbeat for 3.5s", now, now.Add(-3500 * time.Millisecond), 3500 * time.Millisecond}},
		{"lost already", lostNode("n1"), now.Add(-time.Hour), nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := world{beats: fakeBeats{"n1": {at: tt.heard}}}.lifecycle()
			before := tt.node.Clone()
			m, silent := l.nodeLost("n1", tt.node)
			var got *lost
			if m != nil {
				got = &lost{m.Status.State, m.Status.Reason, m.Status.LostAt, m.Status.LastSeenAt, silent}
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("nodeLost (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(before, tt.node, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("nodeLost changed the view's node (-before +after):\n%s", diff)
			}
		})
	}
}

func TestPreempting(t *testing.T) {
	type marked struct {
		Reason       string
		PreemptedAt  time.Time
		PreemptedFor string
	}
	pe := scheduler.Preemption{JobID: "j1", For: "j2", Reason: "priority 10 over 0"}
	tests := []struct {
		name string
		job  *api.Job
		pe   scheduler.Preemption
		want *marked
	}{
		{"a running attempt gets the checkpoint signal", running(nil), pe,
			&marked{"preempted for job j2 (priority 10 over 0); SIGUSR1 sent, stopping within 30s", now, "j2"}},
		{"its own signal and grace", running(func(j *api.Job) {
			j.Spec.CheckpointSignal, j.Spec.PreemptionGracePeriod = "SIGTERM", api.Duration(time.Minute)
		}), pe, &marked{"preempted for job j2 (priority 10 over 0); SIGTERM sent, stopping within 1m0s", now, "j2"}},
		{"preempted already", running(preemptedAt(t0)), pe, nil},
		{"stopping", stopping(nil), pe, nil},
		{"no attempt", running(func(j *api.Job) { j.Status.Attempts = nil }), pe, nil},
		{"gone", running(nil), scheduler.Preemption{JobID: "j9", For: "j2"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := tt.job.Clone()
			l := world{}.lifecycle(tt.job)
			m := l.preempting(tt.pe)
			var got *marked
			if m != nil {
				a := m.Status.Current()
				got = &marked{m.Status.Reason, a.PreemptedAt, a.PreemptedFor}
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("preempting (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(before, tt.job, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("preempting changed the view's job (-before +after):\n%s", diff)
			}
		})
	}
}

// A node lost just after every rank of its gang exited 0 loses the exits
// with it; its agent reports them once back. The job then succeeds with
// that attempt rather than running again.
func TestLateSuccess(t *testing.T) {
	stopAt := t0.Add(30 * time.Second)
	// restarting: attempt 1 ended as n2's loss wrote it (using up no
	// restart).
	restarting := func(outcome api.Outcome, reason string) *api.Job {
		return running(func(j *api.Job) {
			j.Status.Phase = api.JobRestarting
			a := j.Status.Current()
			a.Phase, a.Outcome, a.Reason, a.StoppingAt, a.EndedAt = api.AttemptEnded, outcome, reason, stopAt, stopAt
		})
	}
	// rerunning: attempt 2 runs on n1 alone after attempt 1 ended so.
	rerunning := func() *api.Job {
		j := restarting(api.OutcomeFailed, "node n2 lost")
		j.Status.Phase = api.JobRunning
		j.Status.Attempts = append(j.Status.Attempts, api.Attempt{Number: 2, Phase: api.AttemptRunning, CreatedAt: stopAt.Add(time.Second),
			Placement: []api.RankPlacement{{Rank: 0, Node: "n1", GPUs: []int{0}}, {Rank: 1, Node: "n1", GPUs: []int{1}}}})
		return j
	}
	exit := func(r, code int, sig string, at time.Time) api.RankStatus {
		rs := rank(r, api.RankExited, code)
		rs.Signal, rs.FinishedAt = sig, at
		return rs
	}
	before := stopAt.Add(-time.Second)
	bothZero := []api.RankStatus{exit(0, 0, "", before), exit(1, 0, "", before)}
	lateReason := "attempt 1 succeeded: every rank exited 0 before node n2 lost; the exits were reported late"
	tests := []struct {
		name        string
		job         *api.Job
		ranks       []api.RankStatus // in the view
		reported    []api.RankStatus
		want        result
		wantAttempt api.Outcome // attempt 1's outcome afterwards, if a job is written
	}{{
		name:        "restarting, both exits in the view: succeeded, attempt 1 rewritten",
		job:         restarting(api.OutcomeFailed, "node n2 lost"),
		ranks:       bothZero,
		want:        result{Step: stepFinish, Phase: api.JobSucceeded, Reason: lateReason, Finished: now, Attempt: api.AttemptEnded, Outcome: api.OutcomeSucceeded, AttemptReason: "every rank exited 0 (reported after the attempt ended: node n2 lost)", StoppingAt: stopAt, EndedAt: stopAt},
		wantAttempt: api.OutcomeSucceeded,
	}, {
		name:     "restarting, the lost node's exit just reported",
		job:      restarting(api.OutcomeFailed, "node n2 lost"),
		ranks:    []api.RankStatus{exit(0, 0, "", before)},
		reported: []api.RankStatus{exit(1, 0, "", before)},
		want:     result{Step: stepFinish, Phase: api.JobSucceeded, Reason: lateReason, Finished: now, Attempt: api.AttemptEnded, Outcome: api.OutcomeSucceeded, AttemptReason: "every rank exited 0 (reported after the attempt ended: node n2 lost)", StoppingAt: stopAt, EndedAt: stopAt},
	}, {
		name:  "one exit still unknown: the job restarts as it would",
		job:   restarting(api.OutcomeFailed, "node n2 lost"),
		ranks: []api.RankStatus{exit(0, 0, "", before)},
	}, {
		name:  "a rank exited 0 only after the stop: it may have exited on the stop signal",
		job:   restarting(api.OutcomeFailed, "node n2 lost"),
		ranks: []api.RankStatus{exit(0, 0, "", stopAt.Add(time.Second)), exit(1, 0, "", before)},
	}, {
		name:  "a rank killed by a signal did not finish",
		job:   restarting(api.OutcomeFailed, "node n2 lost"),
		ranks: []api.RankStatus{exit(0, 0, "SIGKILL", before), exit(1, 0, "", before)},
	}, {
		name:  "a preempted attempt whose ranks exited 0 after checkpointing is no success",
		job:   restarting(api.OutcomePreempted, "preempted for job j2 after checkpointing step 7"),
		ranks: bothZero,
	}, {
		name:  "a rank that failed is no success",
		job:   restarting(api.OutcomeFailed, "node n2 lost"),
		ranks: []api.RankStatus{exit(0, 1, "", before), exit(1, 0, "", before)},
	}, {
		name:  "attempt 2 runs: it is stopped as superseded",
		job:   rerunning(),
		ranks: bothZero,
		want: result{Step: stepStop, Phase: api.JobStopping, Reason: "stopping attempt 2: attempt 1 had succeeded (its ranks' exits were reported late)",
			Attempt: api.AttemptStopping, Outcome: api.OutcomeSuperseded, AttemptReason: "attempt 1 had succeeded (its ranks' exits were reported late)", StoppingAt: now},
		wantAttempt: api.OutcomeSucceeded,
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := world{ranks: tt.ranks, reported: tt.reported}
			l := w.lifecycle(tt.job)
			d := l.decide(tt.job)
			if diff := cmp.Diff(tt.want, resultOf(d)); diff != "" {
				t.Errorf("decision (-want +got):\n%s", diff)
			}
			if tt.wantAttempt != "" && d.job.Status.Attempts[0].Outcome != tt.wantAttempt {
				t.Errorf("attempt 1's outcome = %s, want %s", d.job.Status.Attempts[0].Outcome, tt.wantAttempt)
			}
			if tt.job.Status.Attempts[0].Outcome == api.OutcomeSucceeded {
				t.Error("decide rewrote the view's job")
			}
		})
	}

	// The superseded attempt, once stopped, ends the job as succeeded.
	j := rerunning()
	j.Status.Phase = api.JobStopping
	a := j.Status.Current()
	a.Phase, a.Outcome, a.Reason, a.StoppingAt = api.AttemptStopping, api.OutcomeSuperseded, "attempt 1 had succeeded (its ranks' exits were reported late)", now
	w := world{ranks: []api.RankStatus{{JobID: "j1", Attempt: 2, Rank: 0, Node: "n1", State: api.RankExited, Signal: "SIGTERM"},
		{JobID: "j1", Attempt: 2, Rank: 1, Node: "n1", State: api.RankExited, Signal: "SIGTERM"}}}
	le := w.lifecycle(j)
	got := resultOf(le.decide(j))
	if got.Phase != api.JobSucceeded || got.Reason != a.Reason || got.Outcome != api.OutcomeSuperseded {
		t.Errorf("superseded attempt ended as %+v; want the job Succeeded with reason %q", got, a.Reason)
	}
}
