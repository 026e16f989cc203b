// Package autoscale decides how many replicas an inference deployment
// needs from how saturated its engines are.
//
// Saturation is measured per ready replica as the largest of its KV-cache
// usage, the KV tokens its in-flight requests may allocate over its KV
// capacity (both from the gateway and the engine's metrics; capacity from
// internal/hardware's model of the replica's GPU, TP and quantization), and its
// queued prefill over a queue budget. Summed over replicas it is the load
// in replica-equivalents; the wanted count is that load over the target
// utilization. Like Knative's KPA it averages over a stable window
// (60 s) and a panic window (6 s): when the panic-window count reaches
// twice the ready replicas it scales up at once and does not scale down
// until the load has been calm for a stable window. It scales down only
// when the remaining replicas could have absorbed the window's peak load
// and in-flight tokens, never below Min, and counts replicas still
// starting so that start-up time does not cause a second wave. With Min 0
// it scales to zero after an idle grace period, and Gate holds the first
// requests until a replica is ready.
//
// Everything here is pure logic over times passed in.
//
// It imports only the standard library.
package autoscale

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"
)

// Replica is one replica's state at a sample time.
type Replica struct {
	Ready bool // serving; false while starting
	// From the engine's /metrics.
	Running int
	Waiting int
	KVUsage float64 // 0..1
	// From the gateway.
	InFlightTokens        int64   // KV tokens its in-flight requests may allocate
	PendingPrefillSeconds float64 // estimated prefill queued on it
	// From the capacity model.
	CapacityTokens int64
}

// Sample is the deployment's state at one time.
type Sample struct {
	Replicas []Replica // ready and starting
	// Held is the requests the gateway holds for lack of a ready replica
	// or of one with room, and HeldTokens the KV tokens they would
	// allocate: demand the replicas' own figures do not show, counted in
	// the load as that share of one replica's KV capacity.
	Held       int
	HeldTokens int64
}

// Config tunes an Autoscaler. Zero fields take defaults.
type Config struct {
	Min, Max int
	// Target is the saturation each replica should run at; default 0.7.
	Target float64
	// QueueBudget is the queued prefill that counts as a saturated
	// replica; default 1s (a TTFT SLO of ~2 s leaves room for it).
	QueueBudget    time.Duration
	StableWindow   time.Duration // default 60s
	PanicWindow    time.Duration // default 6s
	PanicThreshold float64       // panic when the panic window wants this × ready; default 2
	// MaxScaleUpRate bounds one decision to this × the current count
	// (at least +1); default 10.
	MaxScaleUpRate float64
	// ScaleToZeroGrace is how long a deployment with Min 0 must be idle
	// before it goes to zero; default 5m.
	ScaleToZeroGrace time.Duration
}

// Validate reports the first bad field by name.
func (c Config) Validate() error {
	switch {
	case c.Min < 0:
		return fmt.Errorf("min: %d, want at least 0", c.Min)
	case c.Max < 1 || c.Max < c.Min:
		return fmt.Errorf("max: %d, want at least 1 and at least min (%d)", c.Max, c.Min)
	case c.Target <= 0 || c.Target > 1:
		return fmt.Errorf("target: %v, want in (0, 1]", c.Target)
	case c.PanicWindow <= 0 || c.StableWindow < c.PanicWindow:
		return fmt.Errorf("windows: panic %v, stable %v; want 0 < panic ≤ stable", c.PanicWindow, c.StableWindow)
	case c.PanicThreshold <= 1:
		return fmt.Errorf("panic_threshold: %v, want above 1", c.PanicThreshold)
	case c.MaxScaleUpRate <= 1:
		return fmt.Errorf("max_scale_up_rate: %v, want above 1", c.MaxScaleUpRate)
	case c.QueueBudget <= 0:
		return fmt.Errorf("queue_budget: %v, want positive", c.QueueBudget)
	}
	return nil
}

func (c Config) withDefaults() Config {
	if c.Target == 0 {
		c.Target = 0.7
	}
	if c.QueueBudget == 0 {
		c.QueueBudget = time.Second
	}
	if c.StableWindow == 0 {
		c.StableWindow = 60 * time.Second
	}
	if c.PanicWindow == 0 {
		c.PanicWindow = 6 * time.Second
	}
	if c.PanicThreshold == 0 {
		c.PanicThreshold = 2
	}
	if c.MaxScaleUpRate == 0 {
		c.MaxScaleUpRate = 10
	}
	if c.ScaleToZeroGrace == 0 {
		c.ScaleToZeroGrace = 5 * time.Minute
	}
	return c
}

// Decision is what Decide wants.
type Decision struct {
	Desired int     // replicas wanted, ready and starting together
	Load    float64 // stable-window load in replica-equivalents
	Panic   bool
	Reason  string
}

// Autoscaler turns samples into replica counts. It is not safe for
// concurrent use; one controller loop owns it.
type Autoscaler struct {
	cfg        Config
	samples    []point
	first      time.Time // first sample
	panicUntil time.Time
	lastBusy   time.Time
	lastUp     time.Time // last decision above the count it was given
}

type point struct {
	at     time.Time
	load   float64 // Σ saturation over ready replicas
	tokens int64   // Σ in-flight tokens
	cap    int64   // KV capacity of one replica (max seen)
	held   int
}

// ErrConfig wraps configuration errors from New.
var ErrConfig = errors.New("autoscale: bad config")

// New returns an Autoscaler for cfg (defaults applied).
func New(cfg Config) (*Autoscaler, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	return &Autoscaler{cfg: cfg}, nil
}

// Config returns the configuration with defaults applied.
func (a *Autoscaler) Config() Config { return a.cfg }

// Saturation is one replica's load: 1 means full.
func (a *Autoscaler) Saturation(r Replica) float64 {
	s := r.KVUsage
	if r.CapacityTokens > 0 {
		s = math.Max(s, float64(r.InFlightTokens)/float64(r.CapacityTokens))
	}
	s = math.Max(s, r.PendingPrefillSeconds/a.cfg.QueueBudget.Seconds())
	if r.Waiting > 0 {
		// Requests the engine cannot admit: it is full whatever else says.
		s = math.Max(s, 1)
	}
	return s
}

// Observe records a sample taken at now. Samples older than the stable
// window are dropped.
func (a *Autoscaler) Observe(now time.Time, s Sample) {
	p := point{at: now, held: s.Held}
	for _, r := range s.Replicas {
		p.cap = max(p.cap, r.CapacityTokens)
		if !r.Ready {
			continue
		}
		p.load += a.Saturation(r)
		p.tokens += r.InFlightTokens
		if r.Running+r.Waiting > 0 || r.InFlightTokens > 0 {
			a.lastBusy = now
		}
	}
	if s.Held > 0 {
		a.lastBusy = now
	}
	if s.HeldTokens > 0 && p.cap > 0 {
		p.load += float64(s.HeldTokens) / float64(p.cap)
		p.tokens += s.HeldTokens
	}
	if a.first.IsZero() {
		a.first = now
	}
	a.samples = append(a.samples, p)
	cut := 0
	for cut < len(a.samples) && now.Sub(a.samples[cut].at) > a.cfg.StableWindow {
		cut++
	}
	a.samples = a.samples[cut:]
}

// window returns the mean and peak load and the peak tokens over the last d.
func (a *Autoscaler) window(now time.Time, d time.Duration) (mean, peak float64, peakTokens int64, n int) {
	var sum float64
	for i := len(a.samples) - 1; i >= 0; i-- {
		p := a.samples[i]
		if now.Sub(p.at) > d {
			break
		}
		sum += p.load
		peak = math.Max(peak, p.load)
		peakTokens = max(peakTokens, p.tokens)
		n++
	}
	if n > 0 {
		mean = sum / float64(n)
	}
	return mean, peak, peakTokens, n
}

// Decide returns the wanted replica count given current, the replicas
// that exist now (ready plus starting).
func (a *Autoscaler) Decide(now time.Time, current int) Decision {
	c := a.cfg
	clamp := func(n int) int { return min(max(n, c.Min), c.Max) }
	if len(a.samples) == 0 {
		return Decision{Desired: clamp(current), Reason: "no samples yet"}
	}
	last := a.samples[len(a.samples)-1]
	// From zero: a held request needs a replica now.
	if current == 0 {
		if last.held > 0 {
			return Decision{Desired: clamp(max(1, c.Min)), Reason: fmt.Sprintf("%d requests held at zero replicas", last.held)}
		}
		return Decision{Desired: clamp(0), Reason: "idle at zero"}
	}
	stable, peak, peakTokens, _ := a.window(now, c.StableWindow)
	panicLoad, _, _, _ := a.window(now, c.PanicWindow)
	wantStable := int(math.Ceil(stable / c.Target))
	wantPanic := int(math.Ceil(panicLoad / c.Target))
	maxUp := max(current+1, int(math.Ceil(float64(current)*c.MaxScaleUpRate)))

	// current counts replicas still starting: they will absorb load, so
	// a load step does not start a second wave while the first boots.
	if float64(wantPanic) >= c.PanicThreshold*float64(current) && wantPanic > current {
		a.panicUntil = now.Add(c.StableWindow)
	}
	d := Decision{Load: stable}
	switch {
	case c.Min == 0 && last.held == 0 && !now.Before(a.panicUntil) &&
		now.Sub(a.lastBusy) >= c.ScaleToZeroGrace && now.Sub(a.first) >= c.ScaleToZeroGrace:
		// Idle for the whole grace period (and watched that long): nothing
		// for the stable window's hold to protect against.
		d.Desired = 0
		d.Reason = fmt.Sprintf("idle for %v: scale to zero", c.ScaleToZeroGrace)
	case now.Before(a.panicUntil):
		d.Panic = true
		d.Desired = clamp(min(max(wantPanic, wantStable, current), maxUp))
		d.Reason = fmt.Sprintf("panic: %.2f replica-loads over %v", panicLoad, c.PanicWindow)
	case wantStable > current:
		d.Desired = clamp(min(wantStable, maxUp))
		d.Reason = fmt.Sprintf("load %.2f over %v at target %.2f", stable, c.StableWindow, c.Target)
	case wantStable < current && (now.Sub(a.first) < c.StableWindow || now.Sub(a.lastUp) < c.StableWindow):
		d.Desired = clamp(current)
		d.Reason = fmt.Sprintf("not scaling down until %v of samples since start or the last scale-up", c.StableWindow)
	case wantStable < current:
		d.Desired = clamp(a.scaleDownTo(now, current, wantStable, peak, peakTokens, last.cap, &d.Reason))
	default:
		d.Desired = clamp(current)
		d.Reason = "steady"
	}
	if d.Desired > current {
		a.lastUp = now
	}
	return d
}

// scaleDownTo returns the smallest count at or above want that could
// have absorbed the window's peak load and in-flight tokens.
func (a *Autoscaler) scaleDownTo(now time.Time, current, want int, peak float64, peakTokens, capTokens int64, reason *string) int {
	c := a.cfg
	if want == 0 && c.Min == 0 {
		if now.Sub(a.lastBusy) >= c.ScaleToZeroGrace {
			*reason = fmt.Sprintf("idle for %v: scale to zero", c.ScaleToZeroGrace)
			return 0
		}
		want = 1
	}
	n := max(want, 1)
	for n < current {
		loadOK := peak/float64(n) <= c.Target
		tokensOK := capTokens == 0 || float64(peakTokens) <= float64(n)*float64(capTokens)*c.Target
		if loadOK && tokensOK {
			break
		}
		n++
	}
	if n < current {
		*reason = fmt.Sprintf("peak load %.2f over %v fits %d replicas at target %.2f", peak, c.StableWindow, n, c.Target)
	} else {
		*reason = fmt.Sprintf("holding %d: fewer could not absorb the window's peak load %.2f", current, peak)
	}
	return n
}

// Gate holds requests while a deployment has no ready replica (scaled to
// zero or not yet started). It is safe for concurrent use.
type Gate struct {
	mu   sync.Mutex // guards open, ch, held
	open bool
	ch   chan struct{} // closed when the gate opens; replaced when it shuts
	held int
}

// NewGate returns a shut gate.
func NewGate() *Gate { return &Gate{ch: make(chan struct{})} }

// Wait returns nil once the gate is open (at once if it is), or ctx's
// error if ctx ends first. While it waits, Held counts it.
func (g *Gate) Wait(ctx context.Context) error {
	g.mu.Lock()
	if g.open {
		g.mu.Unlock()
		return nil
	}
	ch := g.ch
	g.held++
	g.mu.Unlock()
	defer func() {
		g.mu.Lock()
		g.held--
		g.mu.Unlock()
	}()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Open lets waiting and future requests through.
func (g *Gate) Open() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.open {
		g.open = true
		close(g.ch)
	}
}

// Shut makes future requests wait.
func (g *Gate) Shut() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.open {
		g.open = false
		g.ch = make(chan struct{})
	}
}

// Held is how many requests are waiting.
func (g *Gate) Held() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.held
}
