package health

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/gangway/gangway/internal/api"
)

// Defaults for Options.
const (
	DefaultInterval = time.Second
	DefaultTimeout  = 5 * time.Second
)

// ErrRunning is returned by a second Run of the same Runner.
var ErrRunning = errors.New("health: runner already ran")

// Options configures a Runner.
type Options struct {
	// Interval is how often every check runs; DefaultInterval when 0.
	Interval time.Duration
	// Timeout bounds one run of one check; DefaultTimeout when 0. A check
	// still running then is reported as Status error, and not started
	// again until it returns.
	Timeout time.Duration
	// Logger receives panics and timeouts; nothing is logged when nil.
	Logger *slog.Logger
	// Now is the clock for Since and At; time.Now when nil.
	Now func() time.Time
}

// Runner runs checks on a schedule and keeps their latest findings.
type Runner struct {
	checks   []Check
	interval time.Duration
	timeout  time.Duration
	log      *slog.Logger
	now      func() time.Time
	changed  chan struct{}

	mu      sync.Mutex          // guards results and ran
	results [][]api.HealthCheck // by position in checks, sorted by GPU
	ran     bool
}

// NewRunner returns a runner of checks. It starts nothing.
func NewRunner(checks []Check, opts Options) *Runner {
	r := &Runner{
		checks:   slices.Clone(checks),
		interval: cmp.Or(opts.Interval, DefaultInterval),
		timeout:  cmp.Or(opts.Timeout, DefaultTimeout),
		log:      opts.Logger,
		now:      opts.Now,
		changed:  make(chan struct{}, 1),
		results:  make([][]api.HealthCheck, len(checks)),
	}
	if r.log == nil {
		r.log = slog.New(slog.DiscardHandler)
	}
	if r.now == nil {
		r.now = time.Now
	}
	return r
}

// Changed receives a value (the channel holds one; sends never block)
// after a run in which some finding's check, GPU, status, action or code
// changed, or a finding came or went. The channel is never closed.
func (r *Runner) Changed() <-chan struct{} { return r.changed }

// Results returns the latest findings of every check, sorted by check
// and GPU; empty before the first run. The caller owns the slice.
func (r *Runner) Results() []api.HealthCheck {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []api.HealthCheck
	for _, rs := range r.results {
		out = append(out, rs...)
	}
	slices.SortFunc(out, func(a, b api.HealthCheck) int {
		return cmp.Or(strings.Compare(a.Check, b.Check), cmp.Compare(a.GPU, b.GPU))
	})
	return out
}

// Run runs every check at once and then every Interval until ctx ends.
// It returns nil once every check it started has returned (a check that
// ignores its ctx holds it), after closing the checks that have a Close
// method. A Runner runs once: a second Run returns ErrRunning.
func (r *Runner) Run(ctx context.Context) error {
	r.mu.Lock()
	if r.ran {
		r.mu.Unlock()
		return ErrRunning
	}
	r.ran = true
	r.mu.Unlock()
	defer r.closeChecks()

	var wg sync.WaitGroup
	defer wg.Wait()
	idle := make(chan int, len(r.checks)) // a check whose run returned; one each at most
	busy := make([]bool, len(r.checks))   // owned by this goroutine
	t := time.NewTicker(r.interval)
	defer t.Stop()
	for {
		for i, c := range r.checks {
			if busy[i] {
				continue
			}
			busy[i] = true
			wg.Go(func() {
				r.call(ctx, i, c)
				idle <- i
			})
		}
	wait:
		for {
			select {
			case <-ctx.Done():
				return nil
			case i := <-idle:
				busy[i] = false
			case <-t.C:
				break wait
			}
		}
	}
}

func (r *Runner) closeChecks() {
	for _, c := range r.checks {
		if cl, ok := c.(io.Closer); ok {
			if err := cl.Close(); err != nil {
				r.log.Warn("health check close failed", "check", c.Name(), "err", err)
			}
		}
	}
}

// call runs check i once and records what came of it. It returns once
// the check's Run has returned.
func (r *Runner) call(ctx context.Context, i int, c Check) {
	name := c.Name()
	cctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	type answer struct {
		found []api.HealthCheck
		fail  string
	}
	done := make(chan answer, 1)
	go func() {
		defer func() {
			if p := recover(); p != nil {
				r.log.Error("health check panicked", "check", name, "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
				done <- answer{fail: fmt.Sprintf("check %s panicked: %v", name, p)}
			}
		}()
		done <- answer{found: c.Run(cctx)}
	}()
	late := fmt.Sprintf("check %s did not answer in %v", name, r.timeout)
	timer := time.NewTimer(r.timeout)
	defer timer.Stop()
	select {
	case a := <-done:
		switch {
		case ctx.Err() != nil:
			// Shutting down: what a cut-short run found is not news.
		case cctx.Err() != nil:
			r.record(i, name, nil, late) // it answered only when cut off
		default:
			r.record(i, name, a.found, a.fail)
		}
	case <-timer.C:
		r.log.Warn("health check did not answer", "check", name, "timeout", r.timeout)
		r.record(i, name, nil, late)
		<-done
	case <-ctx.Done():
		<-done
	}
}

// record stores check i's findings (or, when fail is set, that it failed)
// and signals Changed if they differ from the last in what matters.
func (r *Runner) record(i int, name string, found []api.HealthCheck, fail string) {
	now := r.now()
	r.mu.Lock()
	defer r.mu.Unlock()
	prev := r.results[i]
	var next []api.HealthCheck
	if fail != "" {
		// The check said nothing this time. A fatal finding it made
		// before stands (with its old At): a hung check must not return
		// a GPU to service.
		nodeFatal := false
		for _, h := range prev {
			if h.Fatal() {
				next = append(next, h)
				nodeFatal = nodeFatal || h.GPU < 0
			}
		}
		if !nodeFatal {
			next = append(next, api.HealthCheck{Check: name, Status: api.CheckError, GPU: -1, Message: fail, At: now})
		}
	} else {
		next = merge(name, found)
		for j := range next {
			next[j].At = now
		}
	}
	for j := range next {
		h := &next[j]
		if p, ok := findGPU(prev, h.GPU); ok && sameStatus(p, *h) {
			h.Since = p.Since
		} else if h.Since.IsZero() || h.Since.After(now) {
			h.Since = now
		}
	}
	slices.SortFunc(next, func(a, b api.HealthCheck) int { return cmp.Compare(a.GPU, b.GPU) })
	r.results[i] = next
	if !slices.EqualFunc(prev, next, sameStatus) {
		select {
		case r.changed <- struct{}{}:
		default:
		}
	}
}

// merge names every finding after its check and folds findings for the
// same GPU into the worst of them, their messages joined.
func merge(name string, found []api.HealthCheck) []api.HealthCheck {
	var out []api.HealthCheck
	for _, h := range found {
		h.Check = name
		j := slices.IndexFunc(out, func(o api.HealthCheck) bool { return o.GPU == h.GPU })
		if j < 0 {
			out = append(out, h)
			continue
		}
		worst, other := out[j], h
		if severity(h) > severity(worst) {
			worst, other = h, worst
		}
		if other.Message != "" {
			worst.Message = strings.TrimPrefix(worst.Message+"; "+other.Message, "; ")
		}
		out[j] = worst
	}
	return out
}

// severity orders findings: fatal, warn, error, ok; then by action.
func severity(h api.HealthCheck) int {
	rank := map[api.CheckStatus]int{api.CheckOK: 0, api.CheckError: 1, api.CheckWarn: 2, api.CheckFatal: 3}[h.Status]
	act := slices.Index([]api.HealthAction{api.ActionNone, api.ActionCount, api.ActionResetGPU, api.ActionCordonGPU, api.ActionCordonNode}, h.Action)
	return rank*10 + act
}

func findGPU(hs []api.HealthCheck, gpu int) (api.HealthCheck, bool) {
	for _, h := range hs {
		if h.GPU == gpu {
			return h, true
		}
	}
	return api.HealthCheck{}, false
}

// sameStatus reports whether two findings say the same about the same
// thing, whatever their messages and times.
func sameStatus(a, b api.HealthCheck) bool {
	return a.Check == b.Check && a.GPU == b.GPU && a.Status == b.Status && a.Action == b.Action && a.Code == b.Code
}
