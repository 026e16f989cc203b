package server

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/gangway/gangway/internal/api"
	"github.com/gangway/gangway/internal/base/wait"
)

// TestStragglers feeds the detector lines of a four-rank gang on four
// nodes stepping every 100 ms, as the trainer writes them, and checks who
// is declared and when.
func TestStragglers(t *testing.T) {
	t0 := time.Date(2026, 12, 3, 0, 0, 0, 0, time.UTC)
	pol := stragglerPolicy{factor: 1.5, window: 10 * time.Second}
	type gang struct {
		compute []float64 // each rank's work per step, s
		nodes   []string  // each rank's node
	}
	tests := []struct {
		name  string
		g     gang
		steps int // lines per rank, one per step of 100 ms
		want  int // rank declared, -1 none
		after time.Duration
	}{
		{name: "an even gang has none", g: gang{[]float64{0.05, 0.05, 0.052, 0.049}, []string{"a", "b", "c", "d"}}, steps: 300, want: -1},
		{name: "a rank at twice the median is declared after the window",
			g: gang{[]float64{0.03, 0.03, 0.03, 0.07}, []string{"a", "b", "c", "d"}}, steps: 300, want: 3, after: 10 * time.Second},
		{name: "not within the window", g: gang{[]float64{0.03, 0.03, 0.03, 0.07}, []string{"a", "b", "c", "d"}}, steps: 90, want: -1},
		{name: "twice a tiny median costs under a tenth of the step: noise",
			g: gang{[]float64{0.001, 0.001, 0.001, 0.003}, []string{"a", "b", "c", "d"}}, steps: 300, want: -1},
		{name: "a slow node holding half the gang is found once",
			g: gang{[]float64{0.03, 0.03, 0.07, 0.07}, []string{"a", "a", "c", "c"}}, steps: 300, want: 2, after: 10 * time.Second},
		{name: "two nodes of one rank each cannot tell", g: gang{[]float64{0.03, 0.09}, []string{"a", "b"}}, steps: 300, want: -1},
		{name: "all on one node: nothing to compare with", g: gang{[]float64{0.03, 0.03, 0.03, 0.09}, []string{"a", "a", "a", "a"}}, steps: 300, want: -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := newStragglers()
			var got []api.Straggler
			var at time.Duration
			for step := 1; step <= tt.steps; step++ {
				now := t0.Add(time.Duration(step) * 100 * time.Millisecond)
				for r, c := range tt.g.compute {
					p := api.Progress{JobID: "7", Attempt: 1, Rank: r, Step: int64(step), Time: now, ComputeS: c}
					if s := d.observe(tt.g.nodes[r], p, now, pol); len(s) > 0 {
						got = append(got, s...)
						at = now.Sub(t0)
					}
				}
			}
			switch {
			case tt.want < 0 && len(got) > 0:
				t.Fatalf("declared %+v; want none", got)
			case tt.want < 0:
				return
			case len(got) != 1 || got[0].Rank != tt.want || got[0].Node != tt.g.nodes[tt.want]:
				t.Fatalf("declared %+v; want rank %d alone, once", got, tt.want)
			}
			// Behind from its second line (the first gives no step time),
			// declared one window later.
			if at < tt.after || at > tt.after+time.Second {
				t.Errorf("declared at %s; want about %s", at, tt.after)
			}
			if s := got[0]; s.MedianS < 0.029 || s.MedianS > 0.031 || s.ComputeS < 0.069 {
				t.Errorf("straggler %+v: want compute 0.07 against a median of 0.03", s)
			}
			if len(d.of("7")) != 1 {
				t.Errorf("describe lists %d stragglers; want 1", len(d.of("7")))
			}
		})
	}
}

// TestStragglerAttempts: a new attempt starts its gang's record afresh,
// and an old attempt's late lines count for nothing.
func TestStragglerAttempts(t *testing.T) {
	t0 := time.Date(2026, 12, 3, 0, 0, 0, 0, time.UTC)
	d := newStragglers()
	pol := stragglerPolicy{factor: 1.5, window: time.Second}
	feed := func(attempt, steps int, slow float64) int {
		n := 0
		for step := 1; step <= steps; step++ {
			now := t0.Add(time.Duration(step) * 100 * time.Millisecond)
			for r := range 4 {
				c := 0.03
				if r == 3 {
					c = slow
				}
				n += len(d.observe(string(rune('a'+r)), api.Progress{JobID: "7", Attempt: attempt, Rank: r, Step: int64(step), Time: now, ComputeS: c}, now, pol))
			}
		}
		return n
	}
	if n := feed(2, 30, 0.03); n != 0 {
		t.Fatalf("attempt 2, even: %d declared", n)
	}
	if n := feed(1, 30, 0.09); n != 0 {
		t.Errorf("late lines of attempt 1 declared %d stragglers", n)
	}
	if n := feed(3, 30, 0.09); n != 1 {
		t.Errorf("attempt 3 with a slow rank: %d declared; want 1", n)
	}
}

// TestStragglerCheckOff: a job whose spec turns the check off (pipeline
// stages of uneven cost) has no straggler declared from the same lines
// that declare one in a job left checked, whose straggler is stored for
// every replica to list.
func TestStragglerCheckOff(t *testing.T) {
	s, err := New(Config{DataDir: filepath.Join(t.TempDir(), "server"), StragglerWindow: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	c, _, stop := runServer(t, s)
	defer stop()
	ctx := t.Context()
	ids := map[string]string{}
	for _, check := range []string{"on", "off"} {
		j, err := c.Submit(ctx, []byte("command: [\"true\"]\nranks: 3\nstragglerCheck: "+check+"\n"))
		if err != nil {
			t.Fatal(err)
		}
		ids[check] = j.ID
	}
	if err := wait.Until(ctx, 10*time.Millisecond, func() (bool, error) {
		_, on := s.cache.Job(ids["on"])
		_, off := s.cache.Job(ids["off"])
		return on && off, nil
	}); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	for step := int64(1); step <= 40; step++ {
		for r, node := range []string{"a", "b", "c"} {
			work := 0.03
			if r == 2 {
				work = 0.09 // three times the others'
			}
			hb := api.Heartbeat{Node: node}
			for _, id := range ids {
				hb.Progress = append(hb.Progress, api.Progress{JobID: id, Attempt: 1, Rank: r, Step: step,
					Time: t0.Add(time.Duration(step) * 100 * time.Millisecond), ComputeS: work})
			}
			s.watchStragglers(ctx, &hb)
		}
	}
	if got := s.strag.of(ids["on"]); len(got) != 1 || got[0].Rank != 2 {
		t.Fatalf("checked job: stragglers %+v; want rank 2", got)
	}
	if got := s.strag.of(ids["off"]); len(got) != 0 {
		t.Errorf("job with stragglerCheck off: stragglers %+v; want none", got)
	}
	// Stored, so that another replica (one that took no heartbeat of the
	// gang: a fresh memory here) still lists it in describe job.
	s.strag = newStragglers()
	if got := s.stragglersOf(ctx, ids["on"]); len(got) != 1 || got[0].Rank != 2 || got[0].Node != "c" {
		t.Errorf("after a failover: stragglers %+v; want rank 2 on c, from the store", got)
	}
}
