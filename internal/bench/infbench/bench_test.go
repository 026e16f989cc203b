package infbench

import (
	"context"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/gangway/gangway/internal/inference/autoscale"
	"github.com/gangway/gangway/internal/inference/gateway"
	"github.com/gangway/gangway/internal/inference/openai"
	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestWorkloadConversations(t *testing.T) {
	w := Workload{Requests: 400, Rate: 10, Prefixes: 3, PrefixTokens: 64, Users: 2, Turns: 3, SuffixTokens: 20, OutputTokens: 10, Seed: 5}
	arr := w.Generate(16)
	if len(arr) != 400 {
		t.Fatalf("%d arrivals", len(arr))
	}
	// Find a second turn: its body extends an earlier body with the
	// answer the engine generates for that earlier request.
	found := false
	for j := range arr {
		for i := range j {
			a, b := arr[i], arr[j]
			if &a.Prefix[0] != &b.Prefix[0] || len(b.Body) <= len(a.Body)+a.MaxTokens || !slices.Equal(b.Body[:len(a.Body)], a.Body) {
				continue
			}
			for k := range a.MaxTokens {
				if b.Body[len(a.Body)+k] != openai.GeneratedToken(a.Seed, k) {
					t.Fatalf("turn after request %d does not carry its generated answer", i)
				}
			}
			found = true
		}
	}
	if !found {
		t.Fatal("no conversation continued")
	}
	for i := 1; i < len(arr); i++ {
		if arr[i].At < arr[i-1].At {
			t.Fatal("arrivals out of order")
		}
	}
	if !cmp.Equal(arr[10].Body, w.Generate(16)[10].Body) {
		t.Error("same seed, different workload")
	}
}

func TestBurstAndStepRates(t *testing.T) {
	w := Workload{Rate: 10, Burst: 3, BurstOn: 5 * time.Second, BurstPeriod: 20 * time.Second, StepAt: time.Minute, StepFactor: 10}
	tests := []struct {
		at   time.Duration
		want float64
	}{
		{time.Second, 30}, {10 * time.Second, 10 * (1 - 0.25*3) / 0.75}, {61 * time.Second, 300},
	}
	for _, tc := range tests {
		if got := w.rateAt(tc.at); math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("rate at %v = %v, want %v", tc.at, got, tc.want)
		}
	}
}

func TestSimulateIsCompleteAndDeterministic(t *testing.T) {
	w := llmdWorkload(300, 10)
	w.Prefixes, w.Seed = 10, 3
	arr := w.Generate(gateway.BlockSize)
	cfg := ClusterConfig{Engine: engineConfig(), Replicas: 3, Policy: gateway.PolicyPrefixAffinity, Seed: 1, Deadline: time.Hour}
	a, err := Simulate(cfg, arr)
	if err != nil {
		t.Fatal(err)
	}
	for i, o := range a {
		if o.Dropped || o.Output != arr[i].MaxTokens || o.TTFT <= 0 || o.E2E < o.TTFT {
			t.Fatalf("request %d: %+v (max tokens %d)", i, o, arr[i].MaxTokens)
		}
	}
	b, _ := Simulate(cfg, arr)
	if d := cmp.Diff(a, b); d != "" {
		t.Errorf("two runs differ:\n%s", d)
	}
}

// The fidelity gate and the routing target, on the full routing scenario.
func TestRoutingScenario(t *testing.T) {
	if testing.Short() || raceEnabled {
		t.Skip("full routing scenario: single-goroutine simulator, too slow under -race")
	}
	rep, err := Run(context.Background(), Options{
		Scenarios: []string{ScenarioRouting},
		Policies: []string{gateway.PolicyPrecisePrefix, gateway.PolicyApproxPrefix, gateway.PolicyLoad, gateway.PolicyRandom,
			gateway.PolicyRoundRobin, gateway.PolicyPrefixAffinity},
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Checks) != 2 {
		t.Fatalf("checks: %+v", rep.Checks)
	}
	for _, c := range rep.Checks {
		if !c.Pass {
			t.Errorf("%s: %s", c.Name, c.Detail)
		} else {
			t.Logf("%s: %s", c.Name, c.Detail)
		}
	}
}

func TestQuickVirtualScenarios(t *testing.T) {
	if raceEnabled {
		t.Skip("single-goroutine simulator, too slow under -race")
	}
	rep, err := Run(context.Background(), Options{
		Quick:     true,
		Scenarios: []string{ScenarioNoReuse, ScenarioBurst, ScenarioAutoscale},
		Policies:  []string{gateway.PolicyRoundRobin, gateway.PolicyLeastRequest, gateway.PolicyPrefixAffinity},
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Results) != 9 || len(rep.Checks) != 3 {
		t.Fatalf("%d results, %d checks", len(rep.Results), len(rep.Checks))
	}
	for _, c := range rep.Checks {
		if !c.Pass {
			t.Errorf("%s: %s", c.Name, c.Detail)
		}
	}
	for _, r := range rep.Results {
		if r.Requests == 0 || r.TTFTp99ms <= 0 || r.E2Ep99ms < r.TTFTp99ms {
			t.Errorf("implausible summary %+v", r)
		}
	}
}

// The overhead scenario runs end to end on loopback; its latency targets
// are for `gangway bench inference`, not for a test on a shared machine.
func TestOverheadRuns(t *testing.T) {
	cases := []overheadCase{
		{name: "open-loop 200 req/s", rate: 200, requests: 200, promptBytes: 1000},
		{name: "closed-loop 5 concurrent, 220 KB prompts", concurrency: 5, requests: 20, promptBytes: 220_000},
	}
	res, err := runOverhead(context.Background(), cases, "", "", func(string, ...any) {})
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 2 {
		t.Fatalf("%d results", len(res))
	}
	for _, r := range res {
		if r.Requests != cases[0].requests && r.Requests != cases[1].requests || r.Dropped > 0 || r.DirectP99ms <= 0 || r.E2Ep99ms <= 0 {
			t.Errorf("overhead %s: %+v", r.Load, r)
		}
	}
}

func TestRunRejectsUnknownNames(t *testing.T) {
	if _, err := Run(context.Background(), Options{Scenarios: []string{"nope"}}); err == nil {
		t.Error("unknown scenario accepted")
	}
	if _, err := Run(context.Background(), Options{Scenarios: []string{ScenarioRouting}, Policies: []string{"nope"}}); err == nil {
		t.Error("unknown policy accepted")
	}
}

// BenchmarkRoutingScenario times the simulator on the full routing
// workload for the default policy.
func BenchmarkRoutingScenario(b *testing.B) {
	sc := virtualScenarios(false)[0]
	sc.workload.Seed = 1
	arr := sc.workload.Generate(gateway.BlockSize)
	for b.Loop() {
		if _, err := runVirtual(sc, gateway.PolicyPrefixAffinity, 1, arr); err != nil {
			b.Fatal(err)
		}
	}
}

// A burst that one replica cannot hold while a second one starts: with
// the admission queue the overflow waits in the gateway and goes to the
// new replica once it is ready; without it, it piles onto the first.
func TestAdmissionQueueSendsOverflowToTheNewReplica(t *testing.T) {
	w := Workload{Requests: 120, Rate: 40, SuffixTokens: 4000, OutputTokens: 300, Seed: 2}
	arr := w.Generate(gateway.BlockSize)
	for _, tc := range []struct {
		name      string
		admission *Admission
	}{{"queue", &Admission{MaxQueued: 1000, Timeout: time.Hour, MaxPendingPrefill: 2 * time.Second}}, {"no queue", nil}} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := ClusterConfig{
				Engine: engineConfig(), Replicas: 2, Policy: gateway.PolicyPrefixAffinity, Seed: 1, Deadline: time.Hour,
				Scaler: fixedScaler(2), InitialReplicas: 1, StartupTime: 20 * time.Second, Admission: tc.admission,
			}
			outs, err := Simulate(cfg, arr)
			if err != nil {
				t.Fatal(err)
			}
			early := 0 // arrived while only the first replica was up, served by the second
			for _, o := range outs {
				if o.Dropped {
					t.Fatalf("dropped %+v", o)
				}
				if o.Arrival < 10*time.Second && o.Replica == 1 {
					early++
				}
			}
			if (tc.admission != nil) != (early > 0) {
				t.Errorf("%d requests that arrived before the second replica was ready were served by it", early)
			}
		})
	}
}

// fixedScaler wants n replicas.
type fixedScaler int

func (n fixedScaler) Desired(time.Time, autoscale.Sample, int) int { return int(n) }
