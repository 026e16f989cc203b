package chaos

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestVictims: which replicas each control-plane fault hits, given the
// leader and the plan's draw.
func TestVictims(t *testing.T) {
	for _, tt := range []struct {
		name            string
		kind            Kind
		n, leader, pick int
		want            []int
	}{
		{"leader-kill hits the leader", LeaderKill, 3, 2, 7, []int{2}},
		{"leader-kill without a leader hits none", LeaderKill, 3, -1, 0, nil},
		{"etcd-member-kill: the first follower", EtcdMemberKill, 3, 0, 0, []int{1}},
		{"etcd-member-kill: the second follower", EtcdMemberKill, 3, 0, 1, []int{2}},
		{"etcd-member-kill: the draw wraps", EtcdMemberKill, 3, 1, 4, []int{0}},
		{"etcd-member-kill never the leader of five", EtcdMemberKill, 5, 3, 3, []int{4}},
		{"etcd-member-kill without a leader: any", EtcdMemberKill, 3, -1, 2, []int{2}},
		{"quorum-loss of three: two", QuorumLoss, 3, 0, 1, []int{1, 2}},
		{"quorum-loss wraps around", QuorumLoss, 3, 0, 2, []int{0, 2}},
		{"quorum-loss of five: three", QuorumLoss, 5, 0, 4, []int{0, 1, 4}},
		{"server-kill: all", ServerKill, 3, 1, 0, []int{0, 1, 2}},
		{"server-kill of one server", ServerKill, 1, 0, 0, []int{0}},
		{"server-restart: all, in turn", ServerRestart, 5, 0, 0, []int{0, 1, 2, 3, 4}},
		{"a node's fault hits none", Freeze, 3, 0, 0, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := victims(tt.kind, tt.n, tt.leader, tt.pick)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("victims(%s, %d, leader %d, pick %d) (-want +got):\n%s", tt.kind, tt.n, tt.leader, tt.pick, diff)
			}
		})
	}
}

// TestVictimsEvenly: over the draw's range every follower is hit by as
// many etcd-member-kills, and every replica is among as many quorum
// losses, for three and five replicas.
func TestVictimsEvenly(t *testing.T) {
	for _, n := range []int{3, 5} {
		member, quorum := map[int]int{}, map[int]int{}
		for pick := range pickRange {
			for _, i := range victims(EtcdMemberKill, n, 0, pick) {
				member[i]++
			}
			for _, i := range victims(QuorumLoss, n, 0, pick) {
				quorum[i]++
			}
		}
		for i := 1; i < n; i++ {
			if member[i] != pickRange/(n-1) {
				t.Errorf("%d replicas: follower %d hit %d times of %d; want %d", n, i, member[i], pickRange, pickRange/(n-1))
			}
		}
		if member[0] != 0 {
			t.Errorf("%d replicas: the leader hit by etcd-member-kill %d times", n, member[0])
		}
		for i := range n {
			if want := pickRange * (n/2 + 1) / n; quorum[i] != want {
				t.Errorf("%d replicas: replica %d in %d quorum losses; want %d", n, i, quorum[i], want)
			}
		}
	}
}

// TestPlanReplicaKinds: the replica kinds take their own spans, and the
// kinds that pick replicas draw a pick.
func TestPlanReplicaKinds(t *testing.T) {
	c := DefaultPlan
	kinds := []Kind{LeaderKill, EtcdMemberKill, QuorumLoss}
	picks := map[int]bool{}
	for _, s := range Plan(3, 60, kinds, 4, c) {
		if s.Host != -1 {
			t.Errorf("%+v: a replica fault on a node", s)
		}
		span := c.ReplicaDown
		if s.Kind == QuorumLoss {
			span = c.QuorumLoss
		}
		if s.For < span.Min || s.For > span.Max {
			t.Errorf("%+v: down outside %s", s, span)
		}
		if s.Kind == LeaderKill && s.Pick != 0 {
			t.Errorf("%+v: a leader-kill drew a pick", s)
		}
		if s.Kind != LeaderKill {
			picks[s.Pick] = true
		}
	}
	if len(picks) < 10 {
		t.Errorf("60 faults drew only the picks %v", picks)
	}
}
