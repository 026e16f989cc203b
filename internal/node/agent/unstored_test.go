package agent

import (
	"testing"
	"time"

	"github.com/gangway/gangway/internal/api"
)

// TestUnstoredBeatRenewsLeaseKeepsReports: a heartbeat the leader heard but
// could not store (etcd without quorum) renews the ranks' lease, as the
// node is alive to the server, but drops none of the reports it carried;
// a stored one drops them.
func TestUnstoredBeatRenewsLeaseKeepsReports(t *testing.T) {
	for _, tt := range []struct {
		name     string
		unstored bool
		keep     int
	}{{"unstored", true, 2}, {"stored", false, 0}} {
		t.Run(tt.name, func(t *testing.T) {
			a := &Agent{tasks: map[string]*task{}, ran: map[string]time.Time{},
				lease:     api.RegisterResponse{FenceAfter: api.Duration(3 * time.Second), WitnessDown: api.Duration(time.Second)},
				witnesses: []api.Witness{{Node: "n2"}}}
			a.pendingPr = []api.Progress{{JobID: "1", Step: 1}, {JobID: "1", Step: 2}}
			a.pendingCk = []api.CheckpointReport{{JobID: "1"}, {JobID: "1"}}
			hb := a.snapshotReport()
			a.mu.Lock()
			d := a.reportedLocked(hb, api.HeartbeatResponse{Unstored: tt.unstored})
			pr, ck, ws := len(a.pendingPr), len(a.pendingCk), len(a.witnesses)
			a.mu.Unlock()
			if d < 2*time.Second {
				t.Errorf("lease renewed for %s; want about the 3s fence", d)
			}
			if pr != tt.keep || ck != tt.keep {
				t.Errorf("%d progress and %d checkpoint reports kept; want %d of each", pr, ck, tt.keep)
			}
			if tt.unstored && ws != 1 {
				t.Errorf("an unstored answer (which names no witnesses) left %d witnesses; want the one held", ws)
			}
		})
	}
}
