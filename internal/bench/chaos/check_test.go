package chaos

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gangway/gangway/internal/api"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// t0 is the synthetic runs' epoch; at(s) is s seconds after it.
var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func at(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }

func start(job string, att, rank, pid int, host string, s float64) Record {
	return Record{Ev: EvStart, Time: at(s), Host: host, PID: pid, Job: job, Attempt: att, Rank: rank}
}

func exit(job string, att, rank, pid, code int, s float64) Record {
	return Record{Ev: EvExit, Time: at(s), PID: pid, Job: job, Attempt: att, Rank: rank, Code: &code}
}

func exitLoss(job string, att, rank, pid int, s, loss float64) Record {
	r := exit(job, att, rank, pid, 0, s)
	r.FinalLoss = &loss
	return r
}

func gone(job string, att, rank, pid int, aliveUntil, s float64) Record {
	return Record{Ev: EvGone, Time: at(s), PID: pid, Job: job, Attempt: att, Rank: rank, AliveUntil: at(aliveUntil)}
}

func serverJob(id, name string, phase api.JobPhase) *api.Job {
	return &api.Job{ID: id, Spec: api.JobSpec{Name: name}, Status: api.JobStatus{Phase: phase}}
}

// restarted is a two-rank job whose first attempt lost rank 1's host at
// 10s (rank 0 stopped at 11s) and whose second attempt ran from 12s to the
// end.
func restarted(job string, a2start float64) []Record {
	return []Record{
		start(job, 1, 0, 100, "host1", 1), start(job, 1, 1, 101, "host2", 1),
		gone(job, 1, 1, 101, 10, 10.05), exit(job, 1, 0, 100, 143, 11),
		start(job, 2, 0, 200, "host1", a2start), start(job, 2, 1, 201, "host3", a2start),
		exit(job, 2, 0, 200, 0, 30), exit(job, 2, 1, 201, 0, 30),
	}
}

func sub(name, id string, ranks int) Submission {
	return Submission{Name: name, Kind: KindGang, Ranks: ranks, Tasks: 1, IDs: []string{id}, Tries: 1}
}

// TestCheck: each invariant is caught on records made to break it, and
// none on records of a clean restart.
func TestCheck(t *testing.T) {
	tests := []struct {
		name string
		in   Input
		want Verdict
	}{
		{
			name: "clean restart",
			in: Input{Records: restarted("1", 12), Submissions: []Submission{sub("a", "1", 2)},
				ServerJobs: []*api.Job{serverJob("1", "a", api.JobSucceeded)}},
			want: Verdict{Jobs: 1, Acknowledged: 1, RanksStarted: 4, RanksKilled: 2},
		},
		{
			name: "old rank alive after the new attempt started",
			in: Input{Records: restarted("1", 10.5), Submissions: []Submission{sub("a", "1", 2)},
				ServerJobs: []*api.Job{serverJob("1", "a", api.JobSucceeded)}},
			want: Verdict{Jobs: 1, Acknowledged: 1, RanTwice: 1, RanksStarted: 4, RanksKilled: 2},
		},
		{
			name: "old rank never seen dead",
			in: Input{
				Records: []Record{
					start("1", 1, 0, 100, "host1", 1), // nothing after: alive at the end
					start("1", 2, 0, 200, "host2", 20), exit("1", 2, 0, 200, 0, 30),
				},
				Submissions: []Submission{sub("a", "1", 1)}, ServerJobs: []*api.Job{serverJob("1", "a", api.JobSucceeded)}, End: at(40),
			},
			want: Verdict{Jobs: 1, Acknowledged: 1, RanTwice: 1, RanksStarted: 2, RanksKilled: 1},
		},
		{
			name: "an exit record wins over a gone record",
			in: Input{
				Records: []Record{
					start("1", 1, 0, 100, "host1", 1), gone("1", 1, 0, 100, 9, 9.1), exit("1", 1, 0, 100, 0, 9.05),
				},
				Submissions: []Submission{sub("a", "1", 1)}, ServerJobs: []*api.Job{serverJob("1", "a", api.JobSucceeded)},
			},
			want: Verdict{Jobs: 1, Acknowledged: 1, RanksStarted: 1},
		},
		{
			name: "a rank of one attempt started twice",
			in: Input{
				Records: []Record{
					start("1", 1, 0, 100, "host1", 1), gone("1", 1, 0, 100, 5, 5.1),
					start("1", 1, 0, 300, "host1", 6), exit("1", 1, 0, 300, 0, 9),
				},
				Submissions: []Submission{sub("a", "1", 1)}, ServerJobs: []*api.Job{serverJob("1", "a", api.JobSucceeded)},
			},
			want: Verdict{Jobs: 1, Acknowledged: 1, RankReruns: 1, RanksStarted: 2, RanksKilled: 1},
		},
		{
			name: "completed, then run again",
			in: Input{
				Records: []Record{
					start("1", 1, 0, 100, "host1", 1), exit("1", 1, 0, 100, 0, 5),
					start("1", 2, 0, 200, "host2", 7), exit("1", 2, 0, 200, 0, 9),
				},
				Submissions: []Submission{sub("a", "1", 1)}, ServerJobs: []*api.Job{serverJob("1", "a", api.JobSucceeded)},
			},
			want: Verdict{Jobs: 1, Acknowledged: 1, RerunAfterCompletion: 1, RanksStarted: 2},
		},
		{
			name: "completed while the server was down, then run again",
			in: Input{
				Records: []Record{
					start("1", 1, 0, 100, "host1", 1), exit("1", 1, 0, 100, 0, 5),
					start("1", 2, 0, 200, "host2", 7), exit("1", 2, 0, 200, 0, 9),
				},
				Submissions: []Submission{sub("a", "1", 1)}, ServerJobs: []*api.Job{serverJob("1", "a", api.JobSucceeded)},
				Outages: []Window{{From: at(4), To: at(8)}},
			},
			want: Verdict{Jobs: 1, Acknowledged: 1, RerunAfterCompletion: 1, RerunAfterOutage: 1, RanksStarted: 2},
		},
		{
			name: "completed at the very end of a server outage's window, then run again",
			in: Input{
				Records: []Record{
					start("1", 1, 0, 100, "host1", 1), exit("1", 1, 0, 100, 0, 5.5),
					start("1", 2, 0, 200, "host2", 7), exit("1", 2, 0, 200, 0, 9),
				},
				Submissions: []Submission{sub("a", "1", 1)}, ServerJobs: []*api.Job{serverJob("1", "a", api.JobSucceeded)},
				Outages: []Window{{From: at(4), To: at(6)}},
			},
			// Its agent had no time to report it inside the window.
			want: Verdict{Jobs: 1, Acknowledged: 1, RerunAfterCompletion: 1, RanksStarted: 2},
		},
		{
			name: "acknowledged and forgotten",
			in: Input{Records: restarted("1", 12), Submissions: []Submission{sub("a", "1", 2), sub("b", "2", 1)},
				ServerJobs: []*api.Job{serverJob("1", "a", api.JobSucceeded)}},
			// Job 2 never ran either: lost and stuck.
			want: Verdict{Jobs: 2, Acknowledged: 2, Lost: 1, Stuck: 1, RanksStarted: 4, RanksKilled: 2},
		},
		{
			name: "one submission, two jobs",
			in: Input{Records: restarted("1", 12), Submissions: []Submission{sub("a", "1", 2)},
				ServerJobs: []*api.Job{serverJob("1", "a", api.JobSucceeded), serverJob("7", "a", api.JobPending)}},
			want: Verdict{Jobs: 1, Acknowledged: 1, Duplicated: 1, RanksStarted: 4, RanksKilled: 2},
		},
		{
			name: "never acknowledged",
			in:   Input{Submissions: []Submission{{Name: "a", Ranks: 1, Tasks: 3, Tries: 9, Unanswered: 9}}},
			want: Verdict{Jobs: 3},
		},
		{
			name: "not every rank finished: stuck, or failed when the server gave up",
			in: Input{
				Records: []Record{
					start("1", 1, 0, 100, "host1", 1), exit("1", 1, 0, 100, 0, 5), start("1", 1, 1, 101, "host2", 1), exit("1", 1, 1, 101, 1, 5),
					start("2", 1, 0, 102, "host1", 1), exit("2", 1, 0, 102, 0, 5),
				},
				Submissions: []Submission{sub("a", "1", 2), sub("b", "2", 2)},
				ServerJobs:  []*api.Job{serverJob("1", "a", api.JobRunning), serverJob("2", "b", api.JobFailed)},
			},
			want: Verdict{Jobs: 2, Acknowledged: 2, Stuck: 1, Failed: 1, RanksStarted: 3, RanksKilled: 1},
		},
		{
			name: "ranks killed during a server outage",
			in: Input{Records: restarted("1", 12), Submissions: []Submission{sub("a", "1", 2)},
				ServerJobs: []*api.Job{serverJob("1", "a", api.JobSucceeded)},
				Outages:    []Window{{From: at(8), To: at(11.5)}}},
			// Rank 1 died at 10 (in it), rank 0 at 11 (in the grace).
			want: Verdict{Jobs: 1, Acknowledged: 1, RanksStarted: 4, RanksKilled: 2, RanksKilledByServerOutage: 2},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.in.End.IsZero() {
				tc.in.End = at(100)
			}
			got := Check(tc.in)
			if diff := cmp.Diff(tc.want, *got, cmpopts.IgnoreFields(Verdict{}, "Problems", "Notes")); diff != "" {
				t.Errorf("verdict (-want +got):\n%s\nproblems:\n%s", diff, strings.Join(got.Problems, "\n"))
			}
			wantOK := tc.want.Lost+tc.want.Duplicated+tc.want.RanTwice+tc.want.RankReruns+tc.want.RerunAfterOutage+tc.want.Stuck+tc.want.Failed+
				tc.want.RanksKilledByServerOutage == 0 && tc.want.Acknowledged == tc.want.Jobs
			if got.OK() != wantOK {
				t.Errorf("OK() = %v, want %v", got.OK(), wantOK)
			}
			if !wantOK && len(got.Problems) == 0 {
				t.Error("a violation with no problem named")
			}
			if tc.want.RerunAfterCompletion > tc.want.RerunAfterOutage && len(got.Notes) == 0 {
				t.Error("a rerun after completion not noted")
			}
		})
	}
}

// TestCheckLoss: a trainer's final loss is compared with its shape's
// reference, from the completing attempt's rank 0.
func TestCheckLoss(t *testing.T) {
	recs := []Record{
		start("1", 1, 0, 100, "host1", 1), start("1", 1, 1, 101, "host2", 1),
		exitLoss("1", 1, 0, 100, 10, 0.25), exit("1", 1, 1, 101, 0, 10),
	}
	tests := []struct {
		name string
		refs map[string]float64
		want int
	}{
		{"equal", map[string]float64{"w2": 0.25}, 0},
		{"within tolerance", map[string]float64{"w2": 0.25 * (1 + 1e-12)}, 0},
		{"differs", map[string]float64{"w2": 0.2500001}, 1},
		{"no reference", nil, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := sub("a", "1", 2)
			s.Kind, s.Shape = KindTrainer, "w2"
			v := Check(Input{Records: recs, Submissions: []Submission{s}, ServerJobs: []*api.Job{serverJob("1", "a", api.JobSucceeded)},
				End: at(20), References: tc.refs, Tolerance: LossTolerance})
			if v.LossMismatches != tc.want || v.OK() != (tc.want == 0) {
				t.Errorf("loss mismatches %d, OK %v; want %d: %v", v.LossMismatches, v.OK(), tc.want, v.Problems)
			}
		})
	}
}

// TestTiming: detection takes the first LostAt after each node fault;
// recovery the next attempt's RunningAt for each gang a fault interrupted.
func TestTiming(t *testing.T) {
	faults := []Fault{
		{Kind: AgentKill, Node: "host2", At: at(9), Healed: at(12)},
		{Kind: Freeze, Node: "host1", At: at(40), Healed: at(41)}, // hits job 1's attempt 2, which finishes
		{Kind: ServerKill, At: at(50), Healed: at(60)},            // nothing running
	}
	lost := map[string][]time.Time{"host2": {at(1), at(12.5)}, "host1": {at(70)}}
	if got, want := detections(faults, lost, at(100)), []sample{{0, 3.5}, {1, 30}}; !cmp.Equal(got, want, cmp.AllowUnexported(sample{}), cmpopts.EquateApprox(0, 1e-9)) {
		t.Errorf("detections = %v, want %v", got, want)
	}
	jobs := map[string]*api.Job{"1": {ID: "1", Status: api.JobStatus{Attempts: []api.Attempt{
		{Number: 1, RunningAt: at(1.5)}, {Number: 2, RunningAt: at(13)},
	}}}}
	samples, unrecovered := recoveries(faults, runs(restarted("1", 12), at(100)), jobs, at(100))
	if want := []sample{{0, 4}}; !cmp.Equal(samples, want, cmp.AllowUnexported(sample{}), cmpopts.EquateApprox(0, 1e-9)) || unrecovered != 0 {
		t.Errorf("recoveries = %v (%d unrecovered), want %v", samples, unrecovered, want)
	}
	// Rank 1 of attempt 1 died at 10 (after fault 0), rank 0 exited 143
	// at 11.
	if got, want := killedAfter(faults, runs(restarted("1", 12), at(100)), at(100)), []int{2, 0, 0}; !cmp.Equal(got, want) {
		t.Errorf("killedAfter = %v, want %v", got, want)
	}
	delete(jobs, "1")
	if samples, unrecovered := recoveries(faults, runs(restarted("1", 12), at(100)), jobs, at(100)); len(samples) != 0 || unrecovered != 1 {
		t.Errorf("with no next attempt: recoveries = %v, %d unrecovered; want none, 1", samples, unrecovered)
	}
}

// TestOutages: a server fault's window runs from the fault to the grace
// after the server answered again, cut short by the next fault (less the
// watch's slack).
func TestOutages(t *testing.T) {
	faults := []Fault{
		{Kind: ServerKill, At: at(10), Healed: at(20)},
		{Kind: Freeze, Node: "host1", At: at(30), Healed: at(31)},
		{Kind: ServerRestart, At: at(40), Healed: at(45)},
		{Kind: AgentKill, Node: "host2", At: at(47), Healed: at(48)},
	}
	want := []Window{{From: at(10), To: at(25)}, {From: at(40), To: at(47).Add(-lastSeenSlack)}}
	if diff := cmp.Diff(want, outages(faults, 5*time.Second)); diff != "" {
		t.Errorf("outages (-want +got):\n%s", diff)
	}
}

// TestPlan: a seed gives one plan; kinds, hosts and spans are respected.
func TestPlan(t *testing.T) {
	c := DefaultPlan
	a := Plan(7, 50, Kinds, 4, c)
	if diff := cmp.Diff(a, Plan(7, 50, Kinds, 4, c)); diff != "" {
		t.Fatalf("same seed, another plan:\n%s", diff)
	}
	if cmp.Equal(a, Plan(8, 50, Kinds, 4, c)) {
		t.Error("seeds 7 and 8 gave the same plan")
	}
	seen := map[Kind]bool{}
	for _, s := range a {
		seen[s.Kind] = true
		if s.Kind.onServer() != (s.Host == -1) || s.Host >= 4 {
			t.Errorf("%+v: host out of place", s)
		}
		if s.Gap < c.Gap.Min || s.Gap > c.Gap.Max {
			t.Errorf("%+v: gap outside %s", s, c.Gap)
		}
		if s.Kind == ServerKill && (s.For < c.ServerDown.Min || s.For > c.ServerDown.Max) {
			t.Errorf("%+v: downtime outside %s", s, c.ServerDown)
		}
	}
	if len(seen) != len(Kinds) {
		t.Errorf("50 faults drew only %v", seen)
	}
	for _, s := range Plan(1, 20, []Kind{Freeze}, 2, c) {
		if s.Kind != Freeze {
			t.Errorf("asked for freezes, got %+v", s)
		}
	}
	if _, err := ParseKinds("freeze,meteor"); err == nil {
		t.Error("ParseKinds took an unknown kind")
	}
	if s, err := ParseSpan("2s-30s"); err != nil || s != (Span{2 * time.Second, 30 * time.Second}) {
		t.Errorf("ParseSpan = %v, %v", s, err)
	}
	if _, err := ParseSpan("30s-2s"); err == nil {
		t.Error("ParseSpan took a span that ends before it starts")
	}
}

// TestRankMain: the wrapper records a start and an exit with the
// command's status, signal and final loss, and exits as the command did.
func TestRankMain(t *testing.T) {
	env := map[string]string{"GANGWAY_NODE": "host3", "GANGWAY_JOB_ID": "42", "GANGWAY_JOB_NAME": "x", "GANGWAY_ATTEMPT": "2", "RANK": "1"}
	tests := []struct {
		name       string
		script     string
		wantCode   int
		wantSignal string
		wantLoss   *float64
	}{
		{"success with a loss", "echo step; echo final_loss=0.125", 0, "", ptr(0.125)},
		{"failure", "echo oops >&2; exit 3", 3, "", nil},
		{"killed by a signal", "kill -KILL $$", 128 + 9, "SIGKILL", nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			log := filepath.Join(t.TempDir(), "ranks.jsonl")
			var stdout, stderr strings.Builder
			code := RankMain([]string{"--log", log, "--", "sh", "-c", tc.script}, func(k string) string { return env[k] }, &stdout, &stderr)
			if code != tc.wantCode {
				t.Errorf("exit %d, want %d (stderr %q)", code, tc.wantCode, stderr.String())
			}
			recs, err := ReadRecords(log)
			if err != nil {
				t.Fatal(err)
			}
			if len(recs) != 2 || recs[0].Ev != EvStart || recs[1].Ev != EvExit {
				t.Fatalf("records %+v, want a start and an exit", recs)
			}
			for _, r := range recs {
				if r.Host != "host3" || r.Job != "42" || r.Name != "x" || r.Attempt != 2 || r.Rank != 1 || r.PID != os.Getpid() {
					t.Errorf("record %+v: wrong rank", r)
				}
			}
			e := recs[1]
			if e.Code == nil || *e.Code != tc.wantCode || e.Signal != tc.wantSignal || !cmp.Equal(e.FinalLoss, tc.wantLoss) {
				t.Errorf("exit record %+v (code %v, loss %v), want code %d signal %q loss %v", e, deref(e.Code), deref(e.FinalLoss), tc.wantCode, tc.wantSignal, deref(tc.wantLoss))
			}
			if !e.Time.After(recs[0].Time) {
				t.Errorf("exit at %s, not after the start at %s", e.Time, recs[0].Time)
			}
			if tc.wantLoss != nil && !strings.Contains(stdout.String(), "step\n") {
				t.Errorf("output not passed through: %q", stdout.String())
			}
		})
	}
	if code := RankMain([]string{"--", "true"}, func(string) string { return "" }, &strings.Builder{}, &strings.Builder{}); code != 2 {
		t.Errorf("no --log: exit %d, want 2", code)
	}
}

func deref[T any](p *T) any {
	if p == nil {
		return nil
	}
	return *p
}

// TestReadRecordsPartialLine: a line caught mid-write is left for later.
func TestReadRecordsPartialLine(t *testing.T) {
	p := filepath.Join(t.TempDir(), "ranks.jsonl")
	if err := os.WriteFile(p, []byte(`{"ev":"start","t":"2026-01-02T03:04:05.123456789Z","pid":7,"job":"1","attempt":1,"rank":0}`+"\n"+`{"ev":"exi`), 0o644); err != nil {
		t.Fatal(err)
	}
	lr := lineReader{path: p}
	recs, err := lr.next()
	if err != nil || len(recs) != 1 || recs[0].Time.Nanosecond() != 123456789 {
		t.Fatalf("records %+v, %v; want the one whole line, to the nanosecond", recs, err)
	}
	f, _ := os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0)
	f.WriteString(`t","t":"2026-01-02T03:04:06Z","pid":7,"job":"1","attempt":1,"rank":0,"code":0}` + "\n")
	f.Close()
	recs, err = lr.next()
	if err != nil || len(recs) != 1 || recs[0].Ev != EvExit {
		t.Fatalf("then %+v, %v; want the exit", recs, err)
	}
}

// TestOutageWindowStopsBeforeTheNextFault: a rank the next fault kills is
// last seen alive a poll before it; that death is not the outage's.
func TestOutageWindowStopsBeforeTheNextFault(t *testing.T) {
	t0 := time.Date(2026, 12, 2, 16, 0, 0, 0, time.UTC)
	faults := []Fault{
		{Kind: ServerRestart, At: t0, Healed: t0.Add(6 * time.Second)},
		{Kind: AgentSupervisorKill, At: t0.Add(8 * time.Second), Healed: t0.Add(10 * time.Second)},
	}
	ws := outages(faults, 5*time.Second)
	if len(ws) != 1 || !ws[0].To.Equal(t0.Add(8*time.Second-lastSeenSlack)) {
		t.Fatalf("windows %+v; want one ending %s before the next fault", ws, lastSeenSlack)
	}
	if _, in := inOutage(t0.Add(8*time.Second-30*time.Millisecond), ws); in {
		t.Error("a rank last seen 30ms before the next fault counted as the outage's")
	}
	if _, in := inOutage(t0.Add(3*time.Second), ws); !in {
		t.Error("a death 3s into the outage not counted")
	}
}
