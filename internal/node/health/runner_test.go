package health

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"

	"github.com/gangway/gangway/internal/api"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// scripted is a hand-written Check that returns what its script says:
// set with say, read at each Run.
type scripted struct {
	name string

	mu      sync.Mutex // guards the fields below
	found   []api.HealthCheck
	hang    chan struct{} // non-nil: Run blocks until it is closed, ignoring ctx
	obey    bool          // with hang: Run returns when ctx ends
	panics  bool
	runs    int
	closed  bool
	started chan struct{} // receives on each Run, if non-nil and not full
}

func (s *scripted) Name() string { return s.name }

func (s *scripted) Run(ctx context.Context) []api.HealthCheck {
	s.mu.Lock()
	s.runs++
	hang, obey, panics, found := s.hang, s.obey, s.panics, append([]api.HealthCheck(nil), s.found...)
	s.mu.Unlock()
	if panics {
		panic("boom")
	}
	if hang != nil {
		if obey {
			select {
			case <-hang:
			case <-ctx.Done():
				return []api.HealthCheck{{Status: api.CheckError, Message: ctx.Err().Error()}}
			}
		} else {
			<-hang
		}
	}
	return found
}

func (s *scripted) Close() error { s.mu.Lock(); defer s.mu.Unlock(); s.closed = true; return nil }

func (s *scripted) say(found ...api.HealthCheck) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.found = found
}

func gpuOK(gpu int) api.HealthCheck { return api.HealthCheck{Status: api.CheckOK, GPU: gpu} }

// start runs r in the bubble and returns a stop that cancels and waits.
func start(t *testing.T, r *Runner) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	errc := make(chan error, 1)
	go func() { errc <- r.Run(ctx) }()
	return func() {
		cancel()
		if err := <-errc; err != nil {
			t.Errorf("Run = %v", err)
		}
	}
}

func changed(r *Runner) bool {
	select {
	case <-r.Changed():
		return true
	default:
		return false
	}
}

// brief keeps what a test compares: check, GPU, status, action, code,
// message and Since as an offset from t0.
type brief struct {
	Check  string
	GPU    int
	Status api.CheckStatus
	Action api.HealthAction
	Msg    string
	Since  time.Duration
}

func briefs(hs []api.HealthCheck, t0 time.Time) []brief {
	var out []brief
	for _, h := range hs {
		out = append(out, brief{h.Check, h.GPU, h.Status, h.Action, h.Message, h.Since.Sub(t0)})
	}
	return out
}

func TestRunnerSinceAndChanged(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		t0 := time.Now()
		a := &scripted{name: "ecc"}
		b := &scripted{name: "disk"}
		a.say(gpuOK(1), gpuOK(0))
		b.say(api.HealthCheck{Status: api.CheckOK, GPU: -1})
		r := NewRunner([]Check{a, b}, Options{})
		if len(r.Results()) != 0 {
			t.Fatal("results before the first run")
		}
		stop := start(t, r)
		defer stop()

		synctest.Wait()
		want := []brief{{"disk", -1, api.CheckOK, "", "", 0}, {"ecc", 0, api.CheckOK, "", "", 0}, {"ecc", 1, api.CheckOK, "", "", 0}}
		if diff := cmp.Diff(want, briefs(r.Results(), t0)); diff != "" {
			t.Fatalf("first run (-want +got):\n%s", diff)
		}
		if !changed(r) {
			t.Error("Changed did not fire after the first run")
		}

		// Same statuses, new message: Since stays, At moves, no signal.
		// (The test acts half-way between ticks, so that which of the
		// two comes first at an instant never matters.)
		a.say(gpuOK(0), api.HealthCheck{Status: api.CheckOK, GPU: 1, Message: "cool"})
		time.Sleep(1500 * time.Millisecond)
		synctest.Wait()
		if changed(r) {
			t.Error("Changed fired when only a message changed")
		}
		got := r.Results()
		if got[2].Message != "cool" || !got[2].Since.Equal(t0) || !got[2].At.Equal(t0.Add(time.Second)) {
			t.Errorf("after a message change: %+v; want Since t0, At t0+1s", got[2])
		}

		// GPU 1 turns fatal at 1.5s, seen at 2s: Since is then, and
		// Changed fires, once.
		a.say(gpuOK(0), api.HealthCheck{Status: api.CheckFatal, Action: api.ActionResetGPU, GPU: 1})
		time.Sleep(time.Second)
		synctest.Wait()
		if !changed(r) {
			t.Error("Changed did not fire when a GPU turned fatal")
		}
		time.Sleep(5 * time.Second)
		synctest.Wait()
		if changed(r) {
			t.Error("Changed fired again with nothing new")
		}
		want[2] = brief{"ecc", 1, api.CheckFatal, api.ActionResetGPU, "", 2 * time.Second}
		if diff := cmp.Diff(want, briefs(r.Results(), t0)); diff != "" {
			t.Errorf("after the fault (-want +got):\n%s", diff)
		}
	})
}

func TestRunnerHangingCheck(t *testing.T) {
	for _, obey := range []bool{false, true} {
		name := "ignores its ctx"
		if obey {
			name = "returns when its ctx ends"
		}
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				t0 := time.Now()
				stuck := &scripted{name: "xid", hang: make(chan struct{}), obey: obey}
				other := &scripted{name: "disk"}
				other.say(api.HealthCheck{Status: api.CheckOK, GPU: -1})
				r := NewRunner([]Check{stuck, other}, Options{Interval: time.Second, Timeout: 5 * time.Second})
				stop := start(t, r)
				defer stop()
				defer close(stuck.hang) // before stop, for the one that ignores ctx

				time.Sleep(3 * time.Second)
				synctest.Wait()
				if got := briefs(r.Results(), t0); len(got) != 1 || got[0].Check != "disk" {
					t.Fatalf("at 3s: %+v; want only disk", got)
				}
				other.mu.Lock()
				runs := other.runs
				other.mu.Unlock()
				if runs != 4 {
					t.Errorf("disk ran %d times in 3s; want 4 (the hung check must not hold the loop)", runs)
				}
				time.Sleep(3 * time.Second)
				synctest.Wait()
				want := []brief{
					{"disk", -1, api.CheckOK, "", "", 0},
					{"xid", -1, api.CheckError, "", "check xid did not answer in 5s", 5 * time.Second},
				}
				if diff := cmp.Diff(want, briefs(r.Results(), t0)); diff != "" {
					t.Errorf("at 6s (-want +got):\n%s", diff)
				}
				stuck.mu.Lock()
				runs = stuck.runs
				stuck.mu.Unlock()
				if !obey && runs != 1 {
					t.Errorf("the hung check was started %d times; want once while it hangs", runs)
				}
			})
		})
	}
}

func TestRunnerKeepsFatalWhenCheckFails(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		t0 := time.Now()
		c := &scripted{name: "xid"}
		c.say(gpuOK(0), api.HealthCheck{Status: api.CheckFatal, Action: api.ActionCordonNode, GPU: 1, Code: 79})
		r := NewRunner([]Check{c}, Options{Interval: time.Second, Timeout: 2 * time.Second})
		stop := start(t, r)
		defer stop()
		synctest.Wait()
		c.mu.Lock()
		c.panics = true
		c.mu.Unlock()
		time.Sleep(time.Second)
		synctest.Wait()
		want := []brief{
			{"xid", -1, api.CheckError, "", "check xid panicked: boom", time.Second},
			{"xid", 1, api.CheckFatal, api.ActionCordonNode, "", 0},
		}
		if diff := cmp.Diff(want, briefs(r.Results(), t0)); diff != "" {
			t.Errorf("(-want +got):\n%s", diff)
		}
		c.mu.Lock()
		c.panics = false
		c.mu.Unlock()
		time.Sleep(time.Second)
		synctest.Wait()
		if got := r.Results(); len(got) != 2 || got[0].GPU != 0 || got[0].Status != api.CheckOK {
			t.Errorf("after the check recovered: %+v", got)
		}
	})
}

func TestRunnerMergesAndCloses(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		t0 := time.Now()
		c := &scripted{name: "ib"}
		c.say(
			api.HealthCheck{Check: "wrong", Status: api.CheckError, GPU: -1, Message: "mlx5_2: unreadable"},
			api.HealthCheck{Status: api.CheckWarn, Action: api.ActionCount, GPU: -1, Message: "mlx5_3: down"},
			api.HealthCheck{Status: api.CheckOK, GPU: -1},
		)
		r := NewRunner([]Check{c}, Options{})
		stop := start(t, r)
		synctest.Wait()
		stop()
		want := []brief{{"ib", -1, api.CheckWarn, api.ActionCount, "mlx5_3: down; mlx5_2: unreadable", 0}}
		if diff := cmp.Diff(want, briefs(r.Results(), t0)); diff != "" {
			t.Errorf("(-want +got):\n%s", diff)
		}
		if !c.closed {
			t.Error("Run did not close the check")
		}
		if err := r.Run(context.Background()); !errors.Is(err, ErrRunning) {
			t.Errorf("second Run = %v; want ErrRunning", err)
		}
	})
}
