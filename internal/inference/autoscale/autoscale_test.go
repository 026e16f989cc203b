package autoscale

import (
	"context"
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var t0 = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

const capTokens = 300_000

// replicas returns n ready replicas each at saturation s (through in-flight tokens).
func replicas(n int, s float64) []Replica {
	out := make([]Replica, n)
	for i := range out {
		out[i] = Replica{Ready: true, InFlightTokens: int64(s * capTokens), CapacityTokens: capTokens}
		if s > 0 {
			out[i].Running = 10
		}
	}
	return out
}

func mustNew(t *testing.T, c Config) *Autoscaler {
	t.Helper()
	a, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// run feeds one sample per second from 'from' for d, each from f, and
// returns the last decision, applying each decision as the new count.
func run(a *Autoscaler, from time.Time, d time.Duration, current *int, f func(n int) Sample) Decision {
	var dec Decision
	for t := time.Duration(0); t < d; t += time.Second {
		now := from.Add(t)
		a.Observe(now, f(*current))
		dec = a.Decide(now, *current)
		*current = dec.Desired
	}
	return dec
}

func TestSaturation(t *testing.T) {
	a := mustNew(t, Config{Max: 10})
	tests := []struct {
		name string
		r    Replica
		want float64
	}{
		{"kv usage", Replica{KVUsage: 0.4, CapacityTokens: capTokens}, 0.4},
		{"in-flight tokens", Replica{KVUsage: 0.1, InFlightTokens: capTokens / 2, CapacityTokens: capTokens}, 0.5},
		{"prefill queue", Replica{PendingPrefillSeconds: 1.5}, 1.5},
		{"waiting means full", Replica{KVUsage: 0.2, Waiting: 3}, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := a.Saturation(tc.r); got != tc.want {
				t.Errorf("Saturation = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestTenfoldStepPanicsUpAtOnce(t *testing.T) {
	a := mustNew(t, Config{Min: 1, Max: 20})
	n := 2
	run(a, t0, 120*time.Second, &n, func(n int) Sample { return Sample{Replicas: replicas(n, 0.5)} })
	if n != 2 {
		t.Fatalf("steady at 2×0.5 load: %d replicas, want 2", n)
	}
	// Load steps 10×: 10 replica-loads on 2 replicas (each at 5.0).
	// The new replicas start for 30 s: the 2 ready ones carry it all.
	step := t0.Add(120 * time.Second)
	var first time.Duration = -1
	for s := time.Duration(0); s <= 6*time.Second; s += time.Second {
		a.Observe(step.Add(s), Sample{Replicas: replicas(2, 5)})
		d := a.Decide(step.Add(s), n)
		if d.Desired > n && !d.Panic {
			t.Errorf("scaled up without panic: %+v", d)
		}
		if d.Desired > 2 && first < 0 {
			first = s
		}
		n = d.Desired
	}
	if first != 0 {
		t.Errorf("first scale-up %v after the step, want at once", first)
	}
	if want := 15; n != want { // ceil(10/0.7)
		t.Errorf("after the 6 s panic window: %d replicas, want %d (10 replica-loads at 0.7)", n, want)
	}
}

func TestNoScaleDownInPanicAndOnlyWhenAbsorbable(t *testing.T) {
	a := mustNew(t, Config{Min: 1, Max: 20})
	n := 2
	run(a, t0, 10*time.Second, &n, func(n int) Sample { return Sample{Replicas: replicas(n, 3)} })
	if n < 6 {
		t.Fatalf("load 6 on 2 replicas: scaled to %d", n)
	}
	high := n
	// Load drops to almost nothing: no scale-down during the panic's
	// stable window.
	from := t0.Add(10 * time.Second)
	d := run(a, from, 50*time.Second, &n, func(n int) Sample { return Sample{Replicas: replicas(n, 0.01)} })
	if n < high || !d.Panic {
		t.Fatalf("scaled down to %d inside the panic window (%+v)", n, d)
	}
	// After a calm stable window it scales down, to what absorbs the peak.
	d = run(a, from.Add(50*time.Second), 130*time.Second, &n, func(n int) Sample { return Sample{Replicas: replicas(n, 0.01)} })
	if n != 1 || d.Panic {
		t.Errorf("after calm: %d replicas (%+v), want 1", n, d)
	}
}

func TestScaleDownKeepsRoomForPeak(t *testing.T) {
	a := mustNew(t, Config{Min: 1, Max: 20, PanicThreshold: 100})
	n := 4
	// Mostly idle, but one spike per window to 2.4 replica-loads.
	d := run(a, t0, 200*time.Second, &n, func(n int) Sample {
		return Sample{Replicas: replicas(n, 0.05)}
	})
	if n != 1 {
		t.Fatalf("idle deployment kept %d replicas (%s)", n, d.Reason)
	}
	a = mustNew(t, Config{Min: 1, Max: 20, PanicThreshold: 100})
	n = 4
	i := 0
	d = run(a, t0, 200*time.Second, &n, func(n int) Sample {
		i++
		if i%30 == 0 {
			return Sample{Replicas: replicas(n, 2.4/float64(n))}
		}
		return Sample{Replicas: replicas(n, 0.05)}
	})
	if n != 4 || !strings.Contains(d.Reason, "holding") && !strings.Contains(d.Reason, "fits 4") {
		t.Errorf("with peaks of 2.4 replica-loads every 30 s: %d replicas (%s), want 4", n, d.Reason)
	}
}

func TestBoundsAndRate(t *testing.T) {
	a := mustNew(t, Config{Min: 2, Max: 5, MaxScaleUpRate: 1.5})
	a.Observe(t0, Sample{Replicas: replicas(2, 10)})
	if d := a.Decide(t0, 2); d.Desired != 3 {
		t.Errorf("rate-limited scale-up from 2 at 1.5× = %d, want 3", d.Desired)
	}
	a.Observe(t0.Add(time.Second), Sample{Replicas: replicas(4, 10)})
	if d := a.Decide(t0.Add(time.Second), 4); d.Desired != 5 {
		t.Errorf("desired = %d, want max 5", d.Desired)
	}
	b := mustNew(t, Config{Min: 2, Max: 5})
	n := 3
	run(b, t0, 10*time.Minute, &n, func(n int) Sample { return Sample{Replicas: replicas(n, 0)} })
	if n != 2 {
		t.Errorf("idle with min 2: %d replicas", n)
	}
}

func TestStartingReplicasPreventSecondWave(t *testing.T) {
	a := mustNew(t, Config{Min: 1, Max: 40})
	n := 2
	// Ready replicas stay overloaded while new ones start (30 s start-up):
	// the count must settle, not keep climbing.
	var counts []int
	for s := range 30 {
		now := t0.Add(time.Duration(s) * time.Second)
		rs := replicas(2, 4)
		for range n - 2 {
			rs = append(rs, Replica{CapacityTokens: capTokens}) // starting
		}
		a.Observe(now, Sample{Replicas: rs})
		n = a.Decide(now, n).Desired
		counts = append(counts, n)
	}
	if n != 12 { // ceil(8 / 0.7)
		t.Errorf("settled at %d replicas (%v), want 12", n, counts)
	}
}

func TestScaleToZeroAndBack(t *testing.T) {
	a := mustNew(t, Config{Min: 0, Max: 4, ScaleToZeroGrace: time.Minute})
	n := 1
	run(a, t0, 30*time.Second, &n, func(n int) Sample { return Sample{Replicas: replicas(n, 0)} })
	if n != 1 {
		t.Fatalf("went to %d before the grace period", n)
	}
	run(a, t0.Add(30*time.Second), 60*time.Second, &n, func(n int) Sample { return Sample{Replicas: replicas(n, 0)} })
	if n != 0 {
		t.Fatalf("idle past grace: %d replicas, want 0", n)
	}
	now := t0.Add(2 * time.Minute)
	a.Observe(now, Sample{Held: 1})
	if d := a.Decide(now, 0); d.Desired != 1 {
		t.Errorf("held request at zero: desired %d (%s), want 1", d.Desired, d.Reason)
	}
}

// Requests the gateway holds because every replica is full are demand
// the replicas' figures cannot show (they are capped at full): their
// tokens count in the load, so a held backlog scales the deployment up.
func TestHeldTokensCountAsLoad(t *testing.T) {
	for _, tc := range []struct {
		held int64
		want int
	}{{0, 2}, {4 * capTokens, 7}} {
		a := mustNew(t, Config{Min: 1, Max: 10})
		n := 2
		run(a, t0, 10*time.Second, &n, func(n int) Sample {
			return Sample{Replicas: replicas(n, 0.6), Held: int(tc.held / 1000), HeldTokens: tc.held}
		})
		if n < tc.want {
			t.Errorf("held tokens %d: %d replicas, want at least %d", tc.held, n, tc.want)
		}
		if tc.held == 0 && n != tc.want {
			t.Errorf("no held tokens, at target: %d replicas, want %d", n, tc.want)
		}
	}
}

// A grace period shorter than the stable window still scales an idle
// deployment to zero once it has passed: the window's hold after a
// scale-up is for load, and there has been none.
func TestScaleToZeroAfterShortGrace(t *testing.T) {
	a := mustNew(t, Config{Min: 0, Max: 4, ScaleToZeroGrace: 2 * time.Second})
	n := 0
	a.Observe(t0, Sample{Held: 1})
	if n = a.Decide(t0, n).Desired; n != 1 {
		t.Fatalf("held request at zero: %d", n)
	}
	run(a, t0.Add(time.Second), 5*time.Second, &n, func(n int) Sample { return Sample{Replicas: replicas(n, 0.2)} })
	if n != 1 {
		t.Fatalf("busy: %d replicas, want 1", n)
	}
	run(a, t0.Add(6*time.Second), time.Second, &n, func(n int) Sample { return Sample{Replicas: replicas(n, 0)} })
	if n != 1 {
		t.Fatalf("idle for 1s of a 2s grace: %d replicas, want 1", n)
	}
	run(a, t0.Add(7*time.Second), 3*time.Second, &n, func(n int) Sample { return Sample{Replicas: replicas(n, 0)} })
	if n != 0 {
		t.Fatalf("idle past a 2s grace, 10s after a scale-up: %d replicas, want 0", n)
	}
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name string
		c    Config
		want string
	}{
		{"max below min", Config{Min: 3, Max: 2}, "max: 2"},
		{"target", Config{Max: 2, Target: 1.5}, "target"},
		{"windows", Config{Max: 2, PanicWindow: time.Minute, StableWindow: time.Second}, "windows"},
		{"negative min", Config{Min: -1, Max: 2}, "min: -1"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(tc.c)
			if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("New = %v, want ErrConfig naming %q", err, tc.want)
			}
		})
	}
}

func TestGateHoldsUntilOpen(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := NewGate()
		done := make(chan error, 2)
		go func() { done <- g.Wait(context.Background()) }()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		go func() { done <- g.Wait(ctx) }()
		synctest.Wait()
		if g.Held() != 2 {
			t.Fatalf("held = %d, want 2", g.Held())
		}
		time.Sleep(30 * time.Second) // replica starting
		g.Open()
		for range 2 {
			if err := <-done; err != nil {
				t.Errorf("Wait = %v", err)
			}
		}
		if err := g.Wait(context.Background()); err != nil || g.Held() != 0 {
			t.Errorf("open gate: %v, held %d", err, g.Held())
		}
		g.Shut()
		ctx2, cancel2 := context.WithTimeout(context.Background(), time.Second)
		defer cancel2()
		if err := g.Wait(ctx2); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("shut gate with deadline: %v", err)
		}
	})
}
