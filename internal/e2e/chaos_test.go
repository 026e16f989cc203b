package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gangway/gangway/internal/bench/chaos"
)

// chaosShape is a short chaos run's shape: so many faults of these kinds,
// their spans.
type chaosShape struct {
	faults int
	kinds  []chaos.Kind
	plan   chaos.PlanConfig
}

// shortChaos is the short chaos run's shape: six faults, one of each kind
// that matters most (an agent killed with its supervisor, a host cut off,
// an agent frozen past the node timeout, an Xid 79 on a node's GPU, the
// server killed and the server restarted), spans shrunk so that the whole
// run takes about a minute.
var shortChaos = chaosShape{
	faults: 6,
	kinds:  []chaos.Kind{chaos.AgentSupervisorKill, chaos.Partition, chaos.Freeze, chaos.GPUFault, chaos.ServerKill, chaos.ServerRestart},
	plan: chaos.PlanConfig{
		Gap:        chaos.Span{Min: 4 * time.Second, Max: 7 * time.Second},
		AgentDown:  chaos.Span{Min: time.Second, Max: 4 * time.Second},
		Partition:  chaos.Span{Min: 4 * time.Second, Max: 6 * time.Second},
		Freeze:     chaos.Span{Min: 3500 * time.Millisecond, Max: 5 * time.Second},
		ServerDown: chaos.Span{Min: 4 * time.Second, Max: 6 * time.Second},
	},
}

// replicatedChaos is the short replicated run's shape: six faults, one
// of each kind that matters most with three replicas (the leader killed, a
// follower's etcd member killed, a majority killed, the replicas restarted
// in turn, an agent killed with its supervisor, a host cut off), spans
// shrunk so that the whole run takes about a minute. A majority lost with
// the leader alive is the fault that found heartbeats held past the
// agents' lease by writes etcd could not take. The killed agent stays down
// past the node timeout (4.5 s), so that its node is always declared lost
// and the run always measures a detection: an agent back in 3.8 s beat
// the timeout on one CI machine and left the run with nothing measured.
var replicatedChaos = chaosShape{
	faults: 6,
	kinds:  []chaos.Kind{chaos.LeaderKill, chaos.EtcdMemberKill, chaos.QuorumLoss, chaos.ServerRestart, chaos.AgentSupervisorKill, chaos.Partition},
	plan: chaos.PlanConfig{
		Gap:         chaos.Span{Min: 4 * time.Second, Max: 7 * time.Second},
		AgentDown:   chaos.Span{Min: 6500 * time.Millisecond, Max: 8 * time.Second},
		Partition:   chaos.Span{Min: 4 * time.Second, Max: 6 * time.Second},
		ReplicaDown: chaos.Span{Min: 3 * time.Second, Max: 8 * time.Second},
		QuorumLoss:  chaos.Span{Min: 2 * time.Second, Max: 4 * time.Second},
	},
}

// chaosSeed is the first seed whose plan has every kind of shape, so that
// the run covers them all whatever the plan's code draws.
func chaosSeed(t *testing.T, shape chaosShape) uint64 {
	for seed := uint64(1); seed < 1000; seed++ {
		seen := map[chaos.Kind]bool{}
		for _, s := range chaos.Plan(seed, shape.faults, shape.kinds, 3, shape.plan) {
			seen[s.Kind] = true
		}
		if len(seen) == len(shape.kinds) {
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
func TestChaosShort(t *testing.T) {
	needCluster(t)
	seed := chaosSeed(t, shortChaos)
	res := runShortChaos(t, chaos.Config{
		Agents: 3, GPUs: 8, Netns: true,
		Faults: shortChaos.faults, Seed: seed, Kinds: shortChaos.kinds, Plan: shortChaos.plan,
		Settle: 90 * time.Second, WaveEvery: 8 * time.Second, TrainSteps: 150, StepDelay: 40 * time.Millisecond,
	})
	// The GPU fault, on a node in a network namespace of its own: its
	// agent's health checks took it out of service (the harness fails the
	// fault otherwise) and the invariants above held while its gangs moved.
	if k := res.ByKind[chaos.GPUFault]; k == nil || k.DetectionSamples == 0 {
		t.Errorf("no gpu-fault took its node out of service: %+v", k)
	}
}

// TestChaosReplicatedShort runs the chaos harness briefly against three
// server replicas, each with an embedded etcd member: the leader killed,
// a follower's etcd member killed, a rolling restart, an agent killed with
// its supervisor and a host cut off, while two engines of an inference
// deployment serve requests through the replicas' gateways. It asserts
// every invariant TestChaosShort does, that the leader-kill's failover
// was measured, and that no request failed within its budget.
func TestChaosReplicatedShort(t *testing.T) {
	needCluster(t)
	seed := chaosSeed(t, replicatedChaos)
	res := runShortChaos(t, chaos.Config{
		Replicas: 3, Agents: 3, GPUs: 8, Netns: true, Engines: 2,
		Faults: replicatedChaos.faults, Seed: seed, Kinds: replicatedChaos.kinds, Plan: replicatedChaos.plan,
		Settle: 90 * time.Second, WaveEvery: 8 * time.Second, TrainSteps: 150, StepDelay: 40 * time.Millisecond,
	})
	if res.Replicas != 3 {
		t.Errorf("replicas %d, want 3", res.Replicas)
	}
	if res.FailoverSamples < 1 || res.FailoverP50S <= 0 {
		t.Errorf("failover: %d samples, p50 %.2fs; want the leader-kill's", res.FailoverSamples, res.FailoverP50S)
	}
	if res.Requests == 0 || res.RequestsFailed != 0 {
		t.Errorf("inference requests: %d, %d failed (%d retries); want some, none failed", res.Requests, res.RequestsFailed, res.RequestRetries)
	}
}

// runShortChaos runs cfg (in a temporary directory, with the test's
// binary) and checks what both short runs promise: every fault injected,
// every job acknowledged, every invariant held, something measured, ok.
func runShortChaos(t *testing.T, cfg chaos.Config) *chaos.Result {
	t.Helper()
	dir := t.TempDir()
	cfg.Bin, cfg.Dir = gangwayBin, dir
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	var progress bytes.Buffer
	res, err := chaos.Run(ctx, cfg, &progress)
	t.Logf("progress:\n%s", progress.String())
	if res == nil {
		t.Fatalf("chaos: %v", err)
	}
	b, _ := json.MarshalIndent(res, "", "  ")
	t.Logf("RESULT chaos seed %d: %s", cfg.Seed, b)
	t.Cleanup(func() {
		if t.Failed() {
			dumpChaos(t, dir)
		}
	})
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
		{"duplicated", res.Duplicated}, {"ran_twice", res.RanTwice}, {"rank_reruns", res.RankReruns},
		{"ranks_killed_by_server_outage", res.RanksKilledByServerOutage},
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
	if !t.Failed() && !res.OK {
		t.Errorf("not ok: %v", res.Problems)
	}
	return res
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
