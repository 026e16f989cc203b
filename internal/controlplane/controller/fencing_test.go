package controller

import (
	"strings"
	"testing"
	"time"
)

func TestNewFencingHoldsItsInequalities(t *testing.T) {
	// The argument in fencing.go needs: a witness's "down" shows a gap the
	// server also sees (WitnessDown > StreakGap + I/4); a healthy beat
	// never breaks a run (StreakGap > I + I/4); a witness's silence shows
	// before the agent's own fence lapses, even when the agent's last beat
	// came a whole interval before the witness's (FenceAfter − I >
	// WitnessDown + I/4); and a run outlasts a lease given on a witness's
	// word (WitnessRun > FenceAfter + I/4).
	for _, c := range []struct{ i, n time.Duration }{
		{time.Second, 4500 * time.Millisecond}, {time.Second, 4 * time.Second}, {2 * time.Second, 9 * time.Second},
		{500 * time.Millisecond, 3 * time.Second},
	} {
		f := NewFencing(c.i, c.n, 0)
		if f.Witnesses == 0 {
			t.Fatalf("I=%s N=%s: no witnesses", c.i, c.n)
		}
		q := c.i / 4
		if !(f.WitnessDown > f.StreakGap+q/2 && f.StreakGap > c.i+q && f.FenceAfter-c.i > f.WitnessDown+q/2 && f.WitnessRun > f.FenceAfter+q) {
			t.Errorf("I=%s N=%s: %+v breaks the contract", c.i, c.n, f)
		}
	}
	if f := NewFencing(time.Second, 3*time.Second, 0); f.Witnesses != 0 {
		t.Errorf("N=3I leaves no room for a witness's silence to show before the fence, got %d witnesses", f.Witnesses)
	}
}

func TestNodeLostWaitsForAWitness(t *testing.T) {
	f := NewFencing(time.Second, 4500*time.Millisecond, time.Minute)
	silent := now.Add(-5 * time.Second) // past the 4.5s timeout
	long := now.Add(-time.Hour)         // a run begun long ago
	tests := []struct {
		name   string
		beats  fakeBeats
		lost   bool
		reason string
	}{
		{"a witness heard throughout", fakeBeats{"n1": {at: silent}, "w1": {at: now, run: long}}, true, "while its witness w1 was heard"},
		{"the second witness heard", fakeBeats{"n1": {at: silent}, "w1": {at: silent, run: long}, "w2": {at: now.Add(-time.Second), run: long}}, true, "witness w2"},
		{"witnesses silent too: the control plane may have been cut off", fakeBeats{"n1": {at: silent}, "w1": {at: silent, run: long}, "w2": {at: silent, run: long}}, false, ""},
		{"a witness heard again only lately", fakeBeats{"n1": {at: silent}, "w1": {at: now, run: now.Add(-f.WitnessRun + time.Millisecond)}}, false, ""},
		{"a witness never heard by this leader", fakeBeats{"n1": {at: silent}}, false, ""},
		{"past the longest outage", fakeBeats{"n1": {at: now.Add(-f.MaxOutage - f.NodeTimeout - time.Second)}}, true, "past the longest outage"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := lifecycle{beats: tt.beats, nodeTimeout: f.NodeTimeout, fence: f, now: now}
			n := node("n1")
			n.Status.Witnesses = []string{"w1", "w2"}
			m, _ := l.nodeLost("n1", n)
			if (m != nil) != tt.lost {
				t.Fatalf("lost = %v, want %v", m != nil, tt.lost)
			}
			if m != nil && !strings.Contains(m.Status.Reason, tt.reason) {
				t.Errorf("reason %q, want it to say %q", m.Status.Reason, tt.reason)
			}
		})
	}
	// While the agent may still hold the previous set, a witness of each
	// set must have been heard.
	l0 := lifecycle{beats: fakeBeats{"n1": {at: silent}, "w1": {at: now, run: long}}, nodeTimeout: f.NodeTimeout, fence: f, now: now}
	n := node("n1")
	n.Status.Witnesses, n.Status.PrevWitnesses = []string{"w1"}, []string{"w9"}
	if m, _ := l0.nodeLost("n1", n); m != nil {
		t.Error("lost on a witness of the new set alone while the agent may hold the old one")
	}
	n.Status.PrevWitnesses = []string{"w9", "w1"}
	if m, _ := l0.nodeLost("n1", n); m == nil {
		t.Error("not lost with a witness of both sets heard")
	}
	// Without witnesses the node timeout alone decides, as before.
	l := lifecycle{beats: fakeBeats{"n1": {at: silent}}, nodeTimeout: f.NodeTimeout, fence: f, now: now}
	if m, _ := l.nodeLost("n1", node("n1")); m == nil {
		t.Error("a node with no witnesses silent past the timeout is not lost")
	}
}

func TestLivenessRuns(t *testing.T) {
	l := NewLiveness(t0).SetStreakGap(1300 * time.Millisecond)
	at := t0
	for range 5 {
		l.Beat("n", 0, at)
		at = at.Add(time.Second)
	}
	since, last, ok := l.Run("n")
	if !ok || !since.Equal(t0) || !last.Equal(t0.Add(4*time.Second)) {
		t.Fatalf("run = %v..%v %v, want %v..%v", since, last, ok, t0, t0.Add(4*time.Second))
	}
	gapEnd := t0.Add(4*time.Second + 1400*time.Millisecond)
	l.Beat("n", 0, gapEnd)
	if since, _, _ := l.Run("n"); !since.Equal(gapEnd) {
		t.Errorf("a 1.4s gap did not break the run: since %v", since)
	}
	l.Beat("n", 0, gapEnd.Add(time.Second))
	l.Break("n", gapEnd.Add(time.Second))
	if since, _, _ := l.Run("n"); !since.Equal(gapEnd.Add(time.Second)) {
		t.Errorf("Break did not start the run again: since %v", since)
	}
	if _, _, ok := l.Run("never"); ok {
		t.Error("a node never heard has a run")
	}
}
