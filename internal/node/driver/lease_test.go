package driver

import (
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// TestLapsedLeaseFencesEveryRank: while an agent renews the supervisor's
// lease its ranks live; once the renewals stop (the agent dead, frozen or
// cut off from the server) the supervisor kills every rank by itself, and
// says so in the exit.
func TestLapsedLeaseFencesEveryRank(t *testing.T) {
	s, _ := newSup(t)
	var hs []*Handle
	for range 2 {
		h, dir := start(t, s, `echo ready; while :; do sleep 0.05; done`)
		waitFile(t, filepath.Join(dir, "stdout.log"), "ready")
		hs = append(hs, h)
	}
	// Renewed for a while past the first lease's end: nothing dies.
	for range 6 {
		s.Lease(400 * time.Millisecond)
		time.Sleep(150 * time.Millisecond)
	}
	for _, h := range hs {
		select {
		case <-h.Done():
			t.Fatalf("rank %d died while its lease was renewed: %+v", h.PID(), h.Exit())
		default:
		}
	}
	// No renewal: the lease lapses and both die without anyone asking.
	for _, h := range hs {
		e := wait(t, h)
		if e.Signal != syscall.SIGKILL.String() || e.Message == "" || !e.Fenced {
			t.Errorf("rank %d exit = %+v; want killed, with the fence named", h.PID(), e)
		}
	}
	// A rank started after the fence, with no lease, runs.
	h, dir := start(t, s, `echo ready; sleep 0.5; exit 3`)
	waitFile(t, filepath.Join(dir, "stdout.log"), "ready")
	if e := wait(t, h); e.Code != 3 || e.Fenced {
		t.Errorf("a rank started after the fence exited %+v; want its own code 3", e)
	}
}
