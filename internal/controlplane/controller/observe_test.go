package controller

import (
	"sync"
	"testing"
	"time"

	"github.com/gangway/gangway/internal/api"
)

// recorder is an Observer that keeps what it heard.
type recorder struct {
	mu             sync.Mutex
	passes, placed int
	queues         []string
	restarts       []api.Cause
}

func (r *recorder) Passed(took, scheduling time.Duration, placed, preempted int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.passes++
	r.placed += placed
}

func (r *recorder) Placed(queue string, waited time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.queues = append(r.queues, queue)
}

func (r *recorder) Restarted(cause api.Cause) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.restarts = append(r.restarts, cause)
}

func TestObserverHearsPlacementsAndPendingKinds(t *testing.T) {
	rec := &recorder{}
	tc := newTestControlWith(t, func(c *Config) { c.Observer = rec })
	tc.run(t)
	first := tc.submitRunning(t) // takes all 8 GPUs
	_, waiting := tc.submit(t, tc.newJob(t, 8))
	if waiting.Status.Phase != api.JobPending {
		t.Fatalf("second 8-GPU job is %s; want Pending", waiting.Status.Phase)
	}
	for deadline := time.Now().Add(10 * time.Second); tc.ctl.PendingKinds()[waiting.ID] == ""; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("PendingKinds() = %v; want job %s in it", tc.ctl.PendingKinds(), waiting.ID)
		}
	}
	// The default queue's policy (gangway) walks the queue greedily: the
	// gang waits for capacity, holding no reservation (a backfill queue's
	// would: TestClusterReservesForSeveralBlockedGangs).
	if got := tc.ctl.PendingKinds()[waiting.ID]; got != "capacity" {
		t.Errorf("job %s waits for %q; want capacity", waiting.ID, got)
	}
	if _, ok := tc.ctl.PendingKinds()[first.ID]; ok {
		t.Errorf("running job %s is among the waiting: %v", first.ID, tc.ctl.PendingKinds())
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if rec.passes == 0 || rec.placed != 1 || len(rec.queues) != 1 || rec.queues[0] != "default" {
		t.Errorf("heard %d passes placing %d, placements in queues %v; want passes placing 1, one placement in default", rec.passes, rec.placed, rec.queues)
	}
}
