package scheduler

import (
	"testing"
	"time"
)

// A queue's own mode (Queue.Mode) applies to its gangs alone: a backfill
// queue's blocked gang gets a reservation on a greedy cluster, and the
// other queues' gangs respect it; a strict queue stops behind its own
// gang that does not fit, and the others go on.
func TestQueueOwnMode(t *testing.T) {
	now := 10 * hour
	running := []Running{
		ending(job("r1", "q", nodeNames(1, 6)...), now+hour),
		ending(job("r2", "q", nodeNames(9, 16)...), now+3*hour),
	}
	backfill, strict, greedy := Backfill, Strict, Greedy
	t.Run("backfill queue on a greedy cluster", func(t *testing.T) {
		// "big" has no usage, so fair share decides its head first.
		reqs := []Request{
			{JobID: "head", Queue: "big", Ranks: 64, Order: 1, EstimatedDuration: 5 * time.Hour},
			{JobID: "long", Queue: "q", Ranks: 8, Order: 2, EstimatedDuration: 2 * time.Hour},
			{JobID: "short", Queue: "q", Ranks: 8, Order: 3, EstimatedDuration: 30 * time.Minute},
			{JobID: "unknown", Queue: "q", Ranks: 1, Order: 4},
		}
		for _, tt := range []struct {
			name       string
			mode       *Mode
			wantPlaced []string
			wantKinds  map[string]PendingKind
			wantResv   []Reservation
		}{
			{"own backfill", &backfill, []string{"short"},
				map[string]PendingKind{"head": PendingReserved, "long": PendingCapacity, "unknown": PendingCapacity},
				[]Reservation{{JobID: "head", Start: now + hour, Nodes: nodeNames(1, 8)}}},
			{"pass's greedy", nil, []string{"long", "short"},
				map[string]PendingKind{"head": PendingCapacity, "unknown": PendingCapacity}, nil},
		} {
			t.Run(tt.name, func(t *testing.T) {
				snap := withRunning(t, small, running)
				snap.Now = now
				snap.Queues = []Queue{{Name: "big", Mode: tt.mode}, {Name: "q"}}
				plan := ScheduleWith(snap, reqs, Options{Mode: Greedy, MaxReservations: ServerReservations})
				checkPlan(t, snap, reqs, plan)
				checkOutcome(t, plan, tt.wantPlaced, tt.wantKinds, tt.wantResv)
			})
		}
	})
	t.Run("strict queue on a greedy cluster", func(t *testing.T) {
		reqs := []Request{
			{JobID: "head", Queue: "fifo", Ranks: 64, Order: 1},
			{JobID: "behind", Queue: "fifo", Ranks: 1, Order: 2},
			{JobID: "other", Queue: "q", Ranks: 8, Order: 3},
		}
		snap := withRunning(t, small, running)
		snap.Now = now
		snap.Queues = []Queue{{Name: "fifo", Mode: &strict}, {Name: "q"}}
		plan := ScheduleWith(snap, reqs, Options{Mode: Greedy})
		checkPlan(t, snap, reqs, plan)
		checkOutcome(t, plan, []string{"other"},
			map[string]PendingKind{"head": PendingCapacity, "behind": PendingBlocked}, nil)
		if got, want := pendingOf(plan, "behind").Reason, "strict FIFO: waits behind head, which does not fit"; got != want {
			t.Errorf("behind: reason %q, want %q", got, want)
		}
	})
	t.Run("greedy queue on a strict cluster", func(t *testing.T) {
		reqs := []Request{
			{JobID: "head", Queue: "a", Ranks: 64, Order: 1},
			{JobID: "behind", Queue: "b", Ranks: 1, Order: 2},
			{JobID: "free", Queue: "g", Ranks: 8, Order: 3},
		}
		snap := withRunning(t, small, running)
		snap.Now = now
		snap.Queues = []Queue{{Name: "a"}, {Name: "b"}, {Name: "g", Mode: &greedy}}
		p := NewPass(snap, reqs, Options{Mode: Strict})
		for {
			if _, more := p.Step(); !more {
				break
			}
			if p.Exhausted() {
				t.Fatal("Exhausted with a greedy queue still to decide")
			}
		}
		plan := p.Plan()
		checkPlan(t, snap, reqs, plan)
		checkOutcome(t, plan, []string{"free"},
			map[string]PendingKind{"head": PendingCapacity, "behind": PendingBlocked}, nil)
	})
}
