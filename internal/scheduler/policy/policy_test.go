package policy

import (
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gangway/gangway/internal/api"
)

func TestNew(t *testing.T) {
	for _, tc := range []struct {
		name, want string
	}{
		{"", Default},
		{"fifo", "fifo"},
		{" Backfill ", "backfill"},
		{"greedy", "greedy"},
		{"las", "gangway-4h"},
		{"gangway-4h", "gangway-4h"},
		{"gangway", "gangway"},
	} {
		p, err := New(tc.name)
		if err != nil {
			t.Fatalf("New(%q): %v", tc.name, err)
		}
		if p.Name() != tc.want {
			t.Errorf("New(%q).Name() = %q; want %q", tc.name, p.Name(), tc.want)
		}
	}
	_, err := New("sjf")
	if err == nil || !strings.Contains(err.Error(), `"sjf"`) || !strings.Contains(err.Error(), "backfill") {
		t.Errorf("New(sjf) = %v; want an error naming it and the known policies", err)
	}
	if !slices.IsSorted(Names()) || !slices.Contains(Names(), Default) {
		t.Errorf("Names() = %v; want sorted, with the default", Names())
	}
}

// TestGangwayLevels: a job's level follows its attained service, aging
// lifts a waiting job a level per AgingFactor × its run time, and a job
// that waited StarveAfter ranks above all.
func TestGangwayLevels(t *testing.T) {
	p := &GangwayPolicy{Thresholds: []float64{100, 200}, AgingFactor: 2, MinAging: 50, StarveAfter: 1000, MinRun: 10}
	j := &Job{Submit: 0, GPUs: 2}
	// Ran 0..60 on 2 GPUs: 120 GPU-seconds, level 1; it waits from 60.
	Replay(p, j, []Segment{{Start: 0, End: 60}}, 60)
	if got := p.Key(j, 60); got != (Key{A: 1, B: 0}) {
		t.Errorf("key after 120 GPU-s = %v; want level 1", got)
	}
	// Aging wait is max(50, 2·60) = 120 s: promoted at 180.
	if got := p.NextRekey(j, 60); got != 180 {
		t.Errorf("next rekey = %v; want 180", got)
	}
	Replay(p, j, []Segment{{Start: 0, End: 60}}, 180)
	if got := p.Key(j, 180).A; got != 0 {
		t.Errorf("level after aging = %v; want 0", got)
	}
	if got, want := p.Priority(j, 180), 2; got != want {
		t.Errorf("priority = %d; want %d", got, want)
	}
	if !p.Starving(j, 1060) || p.Priority(j, 1060) != p.Levels() {
		t.Errorf("after 1000 s of waiting: starving %v, priority %d; want true, %d", p.Starving(j, 1060), p.Priority(j, 1060), p.Levels())
	}
	// Running again from 200: protected for MinRun.
	Replay(p, j, []Segment{{Start: 0, End: 60}, {Start: 200, Open: true}}, 205)
	if !j.Running || !p.Protected(j, 205) || p.Protected(j, 210) {
		t.Errorf("running %v, protected at 205 %v, at 210 %v; want true, true, false", j.Running, p.Protected(j, 205), p.Protected(j, 210))
	}
	// Aging credit survives the start: 120 + 2·5 GPU-s is level 1 less
	// one promotion.
	if got := p.Key(j, 205).A; got != 0 {
		t.Errorf("running level = %v; want 0", got)
	}
	if got := p.NextRekey(j, 205); got != 205+(200-130)/2.0 {
		t.Errorf("running next rekey = %v; want the crossing of 200 GPU-s", got)
	}
}

// TestReplayMatchesEvents: Replay reaches the state that applying each
// rekey event as it comes (the simulator's way) does.
func TestReplayMatchesEvents(t *testing.T) {
	p := Gangway()
	p.MinAging = 30
	segs := []Segment{{Start: 10, End: 4000, GPUs: 4}, {Start: 9000, End: 20000, GPUs: 4}}
	ev := &Job{Submit: 0, GPUs: 4}
	ev.Wait(0)
	t0 := 0.0
	step := func(until float64) {
		for n := p.NextRekey(ev, t0); !math.IsInf(n, 1) && n <= until; n = p.NextRekey(ev, t0) {
			t0 = n
			p.Rekey(ev, t0)
		}
	}
	for _, s := range segs {
		step(s.Start)
		t0 = s.Start
		ev.Start(s.Start)
		step(s.End)
		ev.Attained += (s.End - s.Start) * float64(s.GPUs)
		ev.Wait(s.End)
		t0 = s.End
	}
	step(60000)
	got := &Job{Submit: 0, GPUs: 4}
	Replay(p, got, segs, 60000)
	if d := cmp.Diff(ev, got); d != "" {
		t.Errorf("Replay differs from events (-events +replay):\n%s", d)
	}
	if got.Promoted == 0 {
		t.Errorf("no aging in the replay; the test should cover it")
	}
}

func TestSubmitOrder(t *testing.T) {
	p, _ := New("backfill")
	a, b := &Job{Submit: 5}, &Job{Submit: 7, Running: true, SegStart: 8}
	if !p.Key(a, 100).Less(p.Key(b, 100)) || p.Preempts() || p.Protected(b, 9) || p.Levels() != 0 {
		t.Errorf("backfill: want submit order, no preemption, no levels")
	}
}

func BenchmarkGangwayKey(b *testing.B) {
	p := Gangway()
	j := &Job{Submit: 1, GPUs: 8, Running: true, SegStart: 10, Attained: 1e5}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		_ = p.Key(j, float64(i))
	}
}

// TestAPINames: the API validates queue specs against the policies
// registered here.
func TestAPINames(t *testing.T) {
	if d := cmp.Diff(api.QueuePolicies, Names()); d != "" {
		t.Errorf("api.QueuePolicies differs from the registered policies (-api +registered):\n%s", d)
	}
	if api.DefaultQueuePolicy != Default {
		t.Errorf("api.DefaultQueuePolicy = %q; want %q", api.DefaultQueuePolicy, Default)
	}
	q := api.QueueSpec{Name: "a", Policy: "sjf"}
	q.Default()
	err := q.Validate()
	if err == nil || !strings.Contains(err.Error(), "policy") || !strings.Contains(err.Error(), `"sjf"`) || !strings.Contains(err.Error(), "backfill, fifo") {
		t.Errorf("Validate(policy sjf) = %v; want the field, the value and the accepted names", err)
	}
	q.Policy = " LAS"
	q.Default()
	if err := q.Validate(); err != nil || q.Policy != "las" {
		t.Errorf("Validate(policy LAS) = %v, policy %q; want nil, las", err, q.Policy)
	}
}

// TestLaneAssign: the from-scratch assignment the controller uses puts
// in the lane overdue jobs up to its share, longest wait first, a gang wider
// than the room left included.
func TestLaneAssign(t *testing.T) {
	p := Lane()
	p.LaneShare = 0.25 // 16 of 64 GPUs
	now := 10 * 3600.0
	running := &Job{Submit: 0, GPUs: 8, Running: true, SegStart: 7 * 3600, LaneRun: true} // started in the lane, 3 h into its turn
	plain := &Job{Submit: 0, GPUs: 8, Running: true, SegStart: 3600}                      // started by its level
	old := &Job{Submit: 3600, PendSince: 3600, GPUs: 16}                                  // overdue since 5 h
	older := &Job{Submit: 0, PendSince: 0, GPUs: 4}                                       // overdue since 4 h: first
	fresh := &Job{Submit: 9 * 3600, PendSince: 9 * 3600, GPUs: 1}                         // not overdue
	jobs := []*Job{running, plain, old, older, fresh}
	p.Assign(jobs, 64, now)
	want := []LaneState{LaneRunning, LaneNone, LaneGranted, LaneGranted, LaneNone}
	for i, j := range jobs {
		if j.Lane != want[i] {
			t.Errorf("job %d: lane %d; want %d", i, j.Lane, want[i])
		}
	}
	// 8 + 4 = 12 < 16: "old" (16 GPUs) still enters; now the lane is full.
	if p.Room() {
		t.Errorf("lane holds %d of 64 GPUs at share 0.25 and still has room", p.held)
	}
	late := &Job{Submit: 0, PendSince: 3600, GPUs: 1}
	p.Rekey(late, now)
	if late.Lane != LaneWaiting {
		t.Errorf("an overdue job with the lane full: lane %d; want waiting", late.Lane)
	}
	if got := p.Priority(old, now); got != p.Levels() {
		t.Errorf("granted job's priority %d; want the top, %d", got, p.Levels())
	}
	if !p.Protected(running, now) || p.Protected(plain, now) {
		t.Error("a lane job must be protected, a levels job past min-run not")
	}
	if !p.Key(older, now).Less(p.Key(fresh, now)) || !p.Key(older, now).Less(p.Key(old, now)) {
		t.Error("granted jobs rank first, longest wait first")
	}
	p.Started(old)
	if p.Stopped(running); p.Room() {
		t.Error("lane at 20 of 16 GPUs has room")
	}
	if p.Stopped(old); !p.Room() || old.Lane != LaneNone {
		t.Error("lane jobs' ends free room")
	}
}

// TestLaneTurn: a job runs in the lane for its turn, protected; then it
// leaves the lane for its level, freeing the lane's room, its rekey
// event due at the turn's end; and the controller's Assign agrees.
func TestLaneTurn(t *testing.T) {
	p := Lane() // 4-hour turns
	p.Reset(64)
	j := &Job{Submit: 0, PendSince: 0, GPUs: 12}
	p.Rekey(j, 5*3600) // overdue: granted
	j.Start(5 * 3600)
	p.Started(j)
	if j.Lane != LaneRunning || p.held != 12 {
		t.Fatalf("granted 12-GPU job started: lane %d, lane holds %d; want running, 12", j.Lane, p.held)
	}
	// Its next level is at 64 GPU-hours, 10 h 20 min: the turn ends first.
	if got := p.NextRekey(j, 8*3600); got != 9*3600 {
		t.Errorf("next rekey of a lane job 3 h into its turn at %g; want its end, %d", got, 9*3600)
	}
	if p.TurnOver(j, 9*3600-1) || !p.Protected(j, 9*3600-1) {
		t.Error("a lane job left the lane, or lost its protection, before its turn ended")
	}
	if !p.TurnOver(j, 9*3600) || j.Lane != LaneNone || p.held != 0 || p.Protected(j, 9*3600) {
		t.Errorf("at its turn's end: lane %d, room %v; want out of the lane, room freed, unprotected", j.Lane, p.Room())
	}
	if p.Priority(j, 9*3600) >= p.Levels() {
		t.Error("a job whose turn is over keeps the lane's priority")
	}
	if p.Stopped(j) {
		t.Error("a job out of the lane freed the lane's room again when it stopped")
	}
	// Assign, from the attempt's record alone.
	k := &Job{GPUs: 12, Running: true, SegStart: 0, LaneRun: true}
	for _, tc := range []struct {
		now  float64
		want LaneState
	}{{4*3600 - 1, LaneRunning}, {4 * 3600, LaneNone}} {
		p.Assign([]*Job{k}, 64, tc.now)
		if k.Lane != tc.want {
			t.Errorf("Assign at %gs into a lane start: lane %d; want %d", tc.now, k.Lane, tc.want)
		}
	}
	// LaneTurn 0: the lane keeps a job until it ends.
	p.LaneTurn = 0
	p.Assign([]*Job{k}, 64, 100*3600)
	if k.Lane != LaneRunning || p.TurnOver(k, 100*3600) || !math.IsInf(p.NextRekey(&Job{GPUs: 1, Running: true, Lane: LaneRunning, Attained: 1e12}, 0), 1) {
		t.Errorf("with no turn a lane job left the lane (lane %d)", k.Lane)
	}
}

// TestConfigure: settings reach the policy, zero fields keep its
// defaults, and a setting the policy does not use is refused by name.
func TestConfigure(t *testing.T) {
	p, err := Configure("gangway", Settings{LaneShare: 0.3, OverdueAfter: 7200, LevelBase: 60, MinRun: 30, LaneTurn: 600})
	if err != nil {
		t.Fatal(err)
	}
	lp := p.(*LanePolicy)
	if lp.LaneShare != 0.3 || lp.OverdueAfter != 7200 || lp.MinRun != 30 || lp.LaneTurn != 600 || len(lp.Thresholds) != 13 || lp.Thresholds[0] != 60 || lp.Thresholds[12] != 60*4096 {
		t.Errorf("configured lane policy %+v", lp)
	}
	p, _ = Configure("gangway", Settings{})
	if d := cmp.Diff(Lane(), p, cmp.AllowUnexported(LanePolicy{})); d != "" {
		t.Errorf("no settings differ from the defaults (-default +configured):\n%s", d)
	}
	if got := p.(Tunable).Settings(); got != (Settings{LaneShare: 0.25, OverdueAfter: 4 * 3600, LevelBase: 3600, MinRun: 120, LaneTurn: 4 * 3600}) {
		t.Errorf("default settings %+v", got)
	}
	p, _ = Configure("las", Settings{OverdueAfter: 600})
	if p.(*GangwayPolicy).StarveAfter != 600 {
		t.Errorf("las: overdueAfter is its starvation bound; got %+v", p)
	}
	for _, tc := range []struct {
		name string
		s    Settings
		want string
	}{
		{"backfill", Settings{LaneShare: 0.5}, "laneShare"},
		{"las", Settings{LaneShare: 0.5}, "laneShare"},
		{"gangway-4h", Settings{LaneTurn: 60}, "laneTurn"},
		{"gangway", Settings{LaneShare: 1.5}, "(0, 1]"},
		{"gangway", Settings{MinRun: -1}, "minRun"},
	} {
		if _, err := Configure(tc.name, tc.s); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Configure(%s, %+v) = %v; want an error naming %q", tc.name, tc.s, err, tc.want)
		}
	}
}

// TestAPISettings: the API accepts for each policy exactly the settings
// that Configure takes, and ForQueue reads them from a queue spec.
func TestAPISettings(t *testing.T) {
	all := map[string]Settings{"laneShare": {LaneShare: 0.5}, "overdueAfter": {OverdueAfter: 60}, "levelBase": {LevelBase: 60}, "minRun": {MinRun: 60}, "laneTurn": {LaneTurn: 60}}
	for _, name := range Names() {
		for field, s := range all {
			_, err := Configure(name, s)
			if want := slices.Contains(api.QueuePolicySettings[name], field); (err == nil) != want {
				t.Errorf("Configure(%s, %s) = %v; api.QueuePolicySettings says used: %v", name, field, err, want)
			}
		}
	}
	q := api.QueueSpec{Name: "q", Policy: "gangway", LaneShare: 0.5, OverdueAfter: api.Duration(2 * time.Hour), LevelBase: api.Duration(time.Minute), MinRun: api.Duration(time.Second), LaneTurn: api.Duration(time.Hour)}
	p, err := ForQueue(&q)
	if err != nil {
		t.Fatal(err)
	}
	if got := p.(Tunable).Settings(); got != (Settings{LaneShare: 0.5, OverdueAfter: 7200, LevelBase: 60, MinRun: 1, LaneTurn: 3600}) {
		t.Errorf("ForQueue settings %+v", got)
	}
}
