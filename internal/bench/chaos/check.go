package chaos

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/gangway/gangway/internal/api"
)

// Submission is one job the harness submitted, as the harness saw it.
type Submission struct {
	// Name is unique to the submission; every job it made carries it.
	Name string `json:"name"`
	// Kind is what the job is: trainer, reference, gang or array.
	Kind string `json:"kind"`
	// Ranks is the job's world size (each task's, for an array).
	Ranks int `json:"ranks"`
	// Tasks is 1, or an array's task count.
	Tasks int `json:"tasks"`
	// Shape names the trainer configuration whose reference loss the
	// job's final loss must equal; "" for a job that is not a trainer.
	Shape string `json:"shape,omitempty"`
	// IDs are the job IDs the server acknowledged (an array's tasks); nil
	// when no try was answered.
	IDs []string `json:"ids,omitempty"`
	// Tries counts the POSTs; Unanswered those that got no answer (the
	// server may have stored the job all the same).
	Tries      int `json:"tries"`
	Unanswered int `json:"unanswered"`
	// SubmittedAt is when the first try was sent.
	SubmittedAt time.Time `json:"submitted_at"`
}

// Window is a span of time: a server outage.
type Window struct{ From, To time.Time }

// Input is everything Check judges. Only Records, the ranks' own
// account, decide whether a job ran, ran twice or finished; the server's
// view (ServerJobs) decides only whether it still knows an acknowledged
// job, how many jobs one submission made, and whether it gave a job up.
type Input struct {
	Records     []Record
	Submissions []Submission
	// ServerJobs is every job the server lists at the end; nil entries
	// are ignored.
	ServerJobs []*api.Job
	// Outages are the spans the server was down (with what grace the
	// caller gives agents to report afterwards): a rank that died in one
	// counts as killed by the outage, and a completion in one must not be
	// run again.
	Outages []Window
	// End is when the harness stopped watching: a rank with neither an
	// exit nor a gone record was alive until then.
	End time.Time
	// References is the final loss of an uninterrupted run per trainer
	// shape; Tolerance the relative difference allowed.
	References map[string]float64
	Tolerance  float64
}

// Verdict is what Check found. The counts in the first group must all be
// zero for a run to be ok.
type Verdict struct {
	// Jobs counts the jobs submitted (an array's tasks each), Acknowledged
	// those the server answered with an ID.
	Jobs         int `json:"jobs"`
	Acknowledged int `json:"acknowledged"`
	// Lost: acknowledged jobs the server no longer has.
	Lost int `json:"lost"`
	// Duplicated: jobs the server has beyond one per submitted job.
	Duplicated int `json:"duplicated"`
	// RanTwice: pairs of attempts of one job whose ranks were alive at
	// the same time.
	RanTwice int `json:"ran_twice"`
	// RankReruns: ranks of one attempt started more than once.
	RankReruns int `json:"rank_reruns"`
	// RerunAfterCompletion: jobs that started another attempt after one
	// had completed (every rank exited 0): work done twice. A node cut off
	// or losing its rank supervisor as its ranks finish cannot report the
	// exits, so this is reported, not judged (at least once), except for
	// RerunAfterOutage: completions while the server was down (or just
	// after), which agents must report once it is back.
	RerunAfterCompletion int `json:"rerun_after_completion"`
	RerunAfterOutage     int `json:"rerun_after_outage"`
	// Stuck: acknowledged jobs that did not complete (no attempt whose
	// every rank exited 0) and that the server has not given up either.
	Stuck int `json:"stuck"`
	// Failed: acknowledged jobs that did not complete and the server
	// ended (Failed or Cancelled).
	Failed int `json:"failed"`
	// LossMismatches: trainers whose completing attempt's final loss is
	// missing or differs from the reference.
	LossMismatches int `json:"loss_mismatches"`

	// RanksStarted counts start records; RanksKilled the ranks that ended
	// otherwise than by exiting 0 (or were still alive at the end), and
	// RanksKilledByServerOutage those of them that died while the server
	// was down (or just after): each one a violation, as no outage of the
	// control plane may kill a job.
	RanksStarted              int `json:"ranks_started"`
	RanksKilled               int `json:"ranks_killed"`
	RanksKilledByServerOutage int `json:"ranks_killed_by_server_outage"`

	// Problems names each violation, for people; Notes what is reported
	// but not judged.
	Problems []string `json:"problems,omitempty"`
	Notes    []string `json:"notes,omitempty"`
}

// OK reports whether every invariant held, the last DESIGN.md's "no
// outage of the control plane kills a job": no rank died of one.
func (v *Verdict) OK() bool {
	return v.Lost == 0 && v.Duplicated == 0 && v.RanTwice == 0 && v.RankReruns == 0 && v.RerunAfterOutage == 0 &&
		v.Stuck == 0 && v.Failed == 0 && v.LossMismatches == 0 && v.Acknowledged == v.Jobs &&
		v.RanksKilledByServerOutage == 0
}

// run is one process of one rank: a start record and how it ended.
type run struct {
	key        rankKey
	host       string
	pid        int
	start, end time.Time
	// code is the exit record's status; nil when the rank left none
	// (killed outright, or alive at the end).
	code *int
	// exited: an exit record; gone: a gone record and no exit record.
	exited, gone bool
	loss         *float64
}

// ok reports whether the rank finished: it exited 0.
func (r *run) ok() bool { return r.exited && r.code != nil && *r.code == 0 }

// runs pairs every start record with its exit (or gone) record. A rank
// with neither ends at end.
func runs(recs []Record, end time.Time) []*run {
	type id struct {
		k   rankKey
		pid int
	}
	byID := map[id]*run{}
	var out []*run
	for i := range recs {
		r := &recs[i]
		if r.Ev != EvStart {
			continue
		}
		x := &run{key: r.key(), host: r.Host, pid: r.PID, start: r.Time, end: end}
		byID[id{x.key, x.pid}] = x
		out = append(out, x)
	}
	for i := range recs {
		r := &recs[i]
		x := byID[id{r.key(), r.PID}]
		if x == nil {
			continue
		}
		switch r.Ev {
		case EvExit:
			x.exited, x.gone = true, false
			x.end, x.code, x.loss = r.Time, r.Code, r.FinalLoss
		case EvGone:
			if !x.exited {
				x.gone = true
				x.end = r.AliveUntil
				if x.end.Before(x.start) {
					x.end = x.start
				}
			}
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].start.Before(out[j].start) })
	return out
}

// maxProblems bounds Verdict.Problems.
const maxProblems = 40

// Check judges a chaos run.
func Check(in Input) *Verdict {
	v := &Verdict{}
	problem := func(format string, a ...any) {
		if len(v.Problems) < maxProblems {
			v.Problems = append(v.Problems, fmt.Sprintf(format, a...))
		}
	}
	note := func(format string, a ...any) {
		if len(v.Notes) < maxProblems {
			v.Notes = append(v.Notes, fmt.Sprintf(format, a...))
		}
	}
	rs := runs(in.Records, in.End)
	v.RanksStarted = len(rs)
	byJob := map[string][]*run{}
	for _, r := range rs {
		byJob[r.key.job] = append(byJob[r.key.job], r)
	}
	server := map[string]*api.Job{}
	byName := map[string]int{}
	for _, j := range in.ServerJobs {
		if j != nil {
			server[j.ID] = j
			byName[j.Spec.Name]++
		}
	}

	// No rank of an attempt started twice.
	starts := map[rankKey][]*run{}
	for _, r := range rs {
		starts[r.key] = append(starts[r.key], r)
	}
	keys := make([]rankKey, 0, len(starts))
	for k := range starts {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i].String() < keys[j].String() })
	for _, k := range keys {
		if s := starts[k]; len(s) > 1 {
			v.RankReruns++
			var where []string
			for _, r := range s {
				where = append(where, fmt.Sprintf("%s pid %d at %s", r.host, r.pid, stamp(r.start)))
			}
			problem("rank %s started %d times: %s", k, len(s), strings.Join(where, "; "))
		}
	}

	// No two attempts of a job alive at once.
	jobs := make([]string, 0, len(byJob))
	for j := range byJob {
		jobs = append(jobs, j)
	}
	sort.Strings(jobs)
	for _, j := range jobs {
		v.RanTwice += overlaps(byJob[j], problem)
	}

	// Ranks killed, and by a server outage.
	for _, r := range rs {
		if r.ok() {
			continue
		}
		v.RanksKilled++
		if w, ok := inOutage(r.end, in.Outages); ok && r.end.Before(in.End) {
			v.RanksKilledByServerOutage++
			if v.RanksKilledByServerOutage <= 3 {
				problem("rank %s on %s (pid %d) died %.1fs into a server outage (a %.1fs window, reporting grace included)%s", r.key, r.host, r.pid,
					r.end.Sub(w.From).Seconds(), w.To.Sub(w.From).Seconds(), endHow(r))
			}
		}
	}

	// Every acknowledged job exists, ran to completion once, and a
	// trainer ended where the reference did.
	for _, s := range in.Submissions {
		v.Jobs += s.Tasks
		v.Acknowledged += len(s.IDs)
		if n := byName[s.Name]; n > s.Tasks {
			v.Duplicated += n - s.Tasks
			problem("submission %s (%d tries, %d unanswered) made %d jobs, want %d", s.Name, s.Tries, s.Unanswered, n, s.Tasks)
		}
		if len(s.IDs) < s.Tasks {
			problem("submission %s: %d of %d jobs acknowledged after %d tries", s.Name, len(s.IDs), s.Tasks, s.Tries)
		}
		for _, id := range s.IDs {
			sj := server[id]
			if sj == nil {
				v.Lost++
				problem("job %s (%s) was acknowledged and the server no longer has it", id, s.Name)
			}
			att, done := completed(byJob[id], s.Ranks)
			if done {
				if later := startedAfter(byJob[id], att); later != nil {
					v.RerunAfterCompletion++
					end := lastEnd(byJob[id], att)
					report, why := note, ""
					// The completion must have been reportable in the
					// window: a node fault right after it may be what lost it.
					if w, ok := inOutage(end.Add(reportDelay), in.Outages); ok && !end.Before(w.From) {
						v.RerunAfterOutage++
						report, why = problem, fmt.Sprintf(", %.1fs into a server outage (a %.1fs window, reporting grace included)", end.Sub(w.From).Seconds(), w.To.Sub(w.From).Seconds())
					}
					report("job %s (%s) ran again after completing: every rank of attempt %d exited 0 by %s%s, then attempt %d rank %d started on %s at %s",
						id, s.Name, att, stamp(end), why, later.key.attempt, later.key.rank, later.host, stamp(later.start))
				}
			}
			switch {
			case done:
			case sj != nil && sj.Status.Phase.Final():
				v.Failed++
				problem("job %s (%s) did not complete; the server ended it %s: %s", id, s.Name, sj.Status.Phase, sj.Status.Reason)
				continue
			default:
				v.Stuck++
				phase := "unknown to the server"
				if sj != nil {
					phase = fmt.Sprintf("%s at the server (%s)", sj.Status.Phase, sj.Status.Reason)
				}
				problem("job %s (%s) did not complete by the end: %s", id, s.Name, phase)
				continue
			}
			if s.Shape == "" {
				continue
			}
			ref, ok := in.References[s.Shape]
			loss := finalLoss(byJob[id], att)
			switch {
			case !ok:
				v.LossMismatches++
				problem("trainer %s (%s): no reference loss for shape %s", id, s.Name, s.Shape)
			case loss == nil:
				v.LossMismatches++
				problem("trainer %s (%s): rank 0 of attempt %d reported no final loss", id, s.Name, att)
			case relDiff(*loss, ref) > in.Tolerance:
				v.LossMismatches++
				problem("trainer %s (%s): final loss %.17g, reference %.17g (relative difference %.3g)", id, s.Name, *loss, ref, relDiff(*loss, ref))
			}
		}
	}
	return v
}

// overlaps counts the pairs of attempts among one job's runs that were
// alive at the same time, reporting each.
func overlaps(rs []*run, problem func(string, ...any)) int {
	byAtt := map[int][]*run{}
	for _, r := range rs {
		byAtt[r.key.attempt] = append(byAtt[r.key.attempt], r)
	}
	atts := make([]int, 0, len(byAtt))
	for a := range byAtt {
		atts = append(atts, a)
	}
	slices.Sort(atts)
	n := 0
	for i, a := range atts {
		for _, b := range atts[i+1:] {
			if x, y, ok := firstOverlap(byAtt[a], byAtt[b]); ok {
				n++
				problem("job %s ran twice: attempt %d rank %d on %s (pid %d, %s–%s%s) and attempt %d rank %d on %s (pid %d, from %s) were alive together for %.3fs",
					x.key.job, a, x.key.rank, x.host, x.pid, stamp(x.start), stamp(x.end), endHow(x), b, y.key.rank, y.host, y.pid, stamp(y.start),
					earlier(x.end, y.end).Sub(later(x.start, y.start)).Seconds())
			}
		}
	}
	return n
}

// firstOverlap finds a run of as and one of bs alive at the same time.
func firstOverlap(as, bs []*run) (*run, *run, bool) {
	for _, x := range as {
		for _, y := range bs {
			if x.start.Before(y.end) && y.start.Before(x.end) {
				return x, y, true
			}
		}
	}
	return nil, nil, false
}

func endHow(r *run) string {
	switch {
	case r.exited:
		return fmt.Sprintf(", exited %d", *r.code)
	case r.gone:
		return ", killed (last seen alive)"
	}
	return ", alive at the end"
}

// completed reports whether some attempt of a job had every one of its
// ranks exit 0, and which (the first).
func completed(rs []*run, ranks int) (int, bool) {
	ok := map[int]map[int]bool{}
	for _, r := range rs {
		if r.ok() {
			if ok[r.key.attempt] == nil {
				ok[r.key.attempt] = map[int]bool{}
			}
			ok[r.key.attempt][r.key.rank] = true
		}
	}
	best := 0
	for a, m := range ok {
		if len(m) >= ranks && (best == 0 || a < best) {
			all := true
			for i := range ranks {
				all = all && m[i]
			}
			if all {
				best = a
			}
		}
	}
	return best, best > 0
}

// reportDelay is how long an agent may take to report a rank's exit: a
// heartbeat interval and a round trip, twice.
const reportDelay = 2 * time.Second

// inOutage returns the outage t falls in.
func inOutage(t time.Time, outages []Window) (Window, bool) {
	for _, w := range outages {
		if !t.Before(w.From) && !t.After(w.To) {
			return w, true
		}
	}
	return Window{}, false
}

// startedAfter returns the first run of an attempt after att, if any.
func startedAfter(rs []*run, att int) *run {
	for _, r := range rs { // in start order
		if r.key.attempt > att {
			return r
		}
	}
	return nil
}

// lastEnd is when the last rank of attempt att ended.
func lastEnd(rs []*run, att int) time.Time {
	var t time.Time
	for _, r := range rs {
		if r.key.attempt == att && r.end.After(t) {
			t = r.end
		}
	}
	return t
}

// finalLoss is the loss rank 0 of attempt att printed at its end.
func finalLoss(rs []*run, att int) *float64 {
	for _, r := range rs {
		if r.key.attempt == att && r.key.rank == 0 && r.ok() && r.loss != nil {
			return r.loss
		}
	}
	return nil
}

func relDiff(a, ref float64) float64 {
	return math.Abs(a-ref) / math.Max(math.Abs(ref), 1e-300)
}

func earlier(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func stamp(t time.Time) string { return t.Format("15:04:05.000") }

// JobRanks sums one job up from the records: how many of its rank
// processes ended otherwise than by exiting 0 (a rank with no exit record
// counts: it was killed, or is still running), and the final loss rank 0
// printed in the first attempt whose every one of ranks ranks exited 0
// (nil when no attempt did).
func JobRanks(recs []Record, job string, ranks int) (killed int, finalLossOf *float64) {
	var mine []*run
	for _, r := range runs(recs, time.Time{}) {
		if r.key.job == job {
			mine = append(mine, r)
			if !r.ok() {
				killed++
			}
		}
	}
	if att, ok := completed(mine, ranks); ok {
		finalLossOf = finalLoss(mine, att)
	}
	return killed, finalLossOf
}
