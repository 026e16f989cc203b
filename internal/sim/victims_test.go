package sim

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/gangway/gangway/internal/scheduler/policy"
	"github.com/gangway/gangway/internal/sim/trace"
)

// TestVictimsRule feeds the same jobs to the simulator's ranking (rank,
// then below for a starving head or lowest) and to policy.Victims, the
// controller's, and checks that both offer the same victims (issue 22:
// the controller's policy and the simulator's live are one code path).
func TestVictimsRule(t *testing.T) {
	const now = 30_000.0
	starving, lost := 0, 0 // cases with a starving head; with victims of the quota
	for seed := range uint64(300) {
		rng := rand.New(rand.NewPCG(seed, 22))
		e := &engine{pol: FromPolicy(policy.Gangway()), c: &cluster{healthy: 8 + rng.IntN(40)}, now: now}
		n := 2 + rng.IntN(40)
		e.jobs = make([]job, n)
		for i := range e.jobs {
			j := &e.jobs[i]
			*j = job{idx: int32(i), t: &trace.Job{}, submit: float64(rng.IntN(20_000)), gpus: 1 + rng.IntN(8), milli: 1000}
			// Attained service across levels; some jobs wait past the
			// starvation bound (4 h), some started within min-run.
			j.attained = float64(rng.IntN(6)) * 3600 * float64(j.gpus)
			if rng.IntN(2) == 0 {
				j.phase, j.segStart = phaseRunning, now-float64(rng.IntN(3000))
				e.run = append(e.run, j)
			} else {
				j.phase, j.pendSince = phasePending, now-float64(rng.IntN(20_000))
				e.insertPending(j)
			}
		}
		e.runDirty = true

		var want []*job
		starts, losers := e.rank()
		if len(starts) > 0 {
			if head := e.pq.first(); head != nil && e.pol.starving(head, now) {
				want = e.below(head)
				starving++
			} else {
				want = lowest(losers, starts)
				lost += min(len(want), 1)
			}
		}

		all := make([]*job, n)
		for i := range e.jobs {
			all[i] = &e.jobs[i]
		}
		slices.SortFunc(all, func(a, b *job) int {
			ka, kb := e.pol.key(a, now), e.pol.key(b, now)
			if ka.less(kb) {
				return -1
			}
			if kb.less(ka) {
				return 1
			}
			return 0
		})
		ranked := make([]policy.Ranked, n)
		for i, j := range all {
			run := j.phase == phaseRunning
			ranked[i] = policy.Ranked{GPUs: j.gpus, Running: run, Protected: run && e.pol.protected(j, now), Starving: e.pol.starving(j, now)}
		}
		offered := policy.Victims(ranked, e.c.healthy)
		var got []int32
		for i, j := range all {
			if offered != nil && offered[i] {
				got = append(got, j.idx)
			}
		}
		var wantIdx []int32
		for _, j := range want {
			wantIdx = append(wantIdx, j.idx)
		}
		slices.Sort(got)
		slices.Sort(wantIdx)
		if !slices.Equal(got, wantIdx) {
			t.Fatalf("seed %d: policy.Victims offers %v; the simulator %v", seed, got, wantIdx)
		}
	}
	if starving < 10 || lost < 10 {
		t.Fatalf("%d cases with a starving head, %d with jobs that lose their place; want both kinds", starving, lost)
	}
}
