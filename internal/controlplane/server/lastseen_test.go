package server

import (
	"testing"
	"time"

	"github.com/gangway/gangway/internal/api"
	"github.com/gangway/gangway/internal/controlplane/controller"
)

// TestLastSeenSurvivesALeaderChange: a node's last heartbeat, as the API
// shows it, is a heartbeat someone heard. A new leader's memory of
// heartbeats starts empty and stands in its own start for every node (to
// give each a full timeout); shown as the node's last heartbeat, it made a
// node dead for half an hour look seen when the leader changed.
func TestLastSeenSurvivesALeaderChange(t *testing.T) {
	leaderStart := time.Date(2026, 3, 1, 12, 30, 0, 0, time.UTC)
	died := leaderStart.Add(-30 * time.Minute)
	lost := func() *api.Node {
		return &api.Node{Name: "n2", Status: api.NodeStatus{State: api.NodeLost, LostAt: died.Add(5 * time.Second), LastSeenAt: died}}
	}
	tests := []struct {
		name  string
		node  *api.Node
		heard time.Time // by this leader; zero: never
		want  time.Time
	}{
		{"lost before this leader: as the leader that declared it lost heard it", lost(), time.Time{}, died},
		{"lost, and heard by this leader since (before it registers again)", lost(), leaderStart.Add(time.Second), leaderStart.Add(time.Second)},
		{"ready and not heard yet by this leader: unknown, not the leader's start", &api.Node{Name: "n2", Status: api.NodeStatus{State: api.NodeReady}}, time.Time{}, time.Time{}},
		{"ready and heard", &api.Node{Name: "n2", Status: api.NodeStatus{State: api.NodeReady}}, leaderStart.Add(2 * time.Second), leaderStart.Add(2 * time.Second)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := &Server{live: controller.NewLiveness(leaderStart)}
			if !tt.heard.IsZero() {
				s.live.Beat("n2", 0, tt.heard)
			}
			s.fillHeartbeat(tt.node)
			if got := tt.node.Status.LastHeartbeat; !got.Equal(tt.want) {
				t.Errorf("last heartbeat %s, want %s", got, tt.want)
			}
		})
	}
}
