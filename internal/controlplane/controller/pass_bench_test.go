package controller

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/gangway/gangway/internal/api"
)

// BenchmarkReconcileSteady is one pass over 500 running one-GPU jobs on 64
// nodes that need no write: the snapshot, the node checks and the
// lifecycle's decisions, which every pass pays for every live job.
func BenchmarkReconcileSteady(b *testing.B) {
	tc := newTestControl(b)
	ctx := context.Background()
	var last *api.Node
	for i := 2; i <= 64; i++ {
		n := &api.Node{Name: "n" + strconv.Itoa(i), Address: "127.0.0.1", Status: api.NodeStatus{State: api.NodeReady}}
		for g := range 8 {
			n.GPUs = append(n.GPUs, api.GPU{Index: g, Model: "H100-SXM-80GB"})
		}
		if err := tc.st.PutNode(ctx, n); err != nil {
			b.Fatal(err)
		}
		last = n
	}
	const jobs = 500
	for range jobs {
		if _, err := tc.st.CreateJob(ctx, api.JobSpec{Queue: "default", Ranks: 1, GPUsPerRank: 1, Command: []string{"true"}}, time.Now()); err != nil {
			b.Fatal(err)
		}
	}
	// pass runs one pass and waits until the cache has its writes.
	pass := func() {
		rev, err := tc.ctl.Reconcile(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if err := tc.cache.WaitRevision(ctx, max(rev, 1)); err != nil {
			b.Fatal(err)
		}
	}
	running := func() (n int, ranks []api.RankStatus) {
		for _, j := range tc.cache.Snapshot().Jobs {
			if j.Status.Phase == api.JobRunning {
				n++
				a := j.Status.Current()
				ranks = append(ranks, api.RankStatus{JobID: j.ID, Attempt: a.Number, Rank: 0, Node: a.Placement[0].Node, State: api.RankRunning})
			}
		}
		return n, ranks
	}
	if err := tc.cache.WaitRevision(ctx, 1); err != nil {
		b.Fatal(err)
	}
	for i := 0; ; i++ {
		pass()
		if n, ranks := running(); n == jobs {
			if err := tc.st.PutRankStatuses(ctx, ranks); err != nil {
				b.Fatal(err)
			}
			break
		} else if i > 100 {
			b.Fatalf("%d of %d jobs running after %d passes", n, jobs, i)
		}
	}
	// A write after the statuses: once the cache has it, it has them.
	if err := tc.st.PutNode(ctx, last); err != nil {
		b.Fatal(err)
	}
	if err := tc.cache.WaitRevision(ctx, last.ModRevision); err != nil {
		b.Fatal(err)
	}
	pass() // stamps RunningAt
	pass()
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if rev, err := tc.ctl.Reconcile(ctx); err != nil || rev != 0 {
			b.Fatalf("a steady pass wrote (revision %d): %v", rev, err)
		}
	}
}
