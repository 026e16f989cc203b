package infbench

import (
	"container/heap"
	"fmt"
	"time"

	"github.com/gangway/gangway/internal/hardware"
	"github.com/gangway/gangway/internal/inference/autoscale"
	"github.com/gangway/gangway/internal/inference/enginesim"
	"github.com/gangway/gangway/internal/inference/gateway"
	"github.com/gangway/gangway/internal/inference/openai"
)

// Arrival is one request of a workload: a shared prefix (a customer's
// system prompt), a body (conversation history and the new question) and
// an output length. The prompt is built when the request arrives.
type Arrival struct {
	At           time.Duration // since the start of the run
	Prefix       []uint32      // shared between requests; never modified
	PrefixHashes []uint64      // block hashes of Prefix (BlockHashes)
	Body         []uint32      // after the prefix; may share a backing array; never modified
	MaxTokens    int
	Seed         uint64 // the engine's generation seed (openai.GeneratedToken)
}

func (a *Arrival) prompt() []uint32 {
	p := make([]uint32, 0, len(a.Prefix)+len(a.Body))
	return append(append(p, a.Prefix...), a.Body...)
}

// Outcome is what happened to one request.
type Outcome struct {
	Arrival    time.Duration
	TTFT       time.Duration // 0 when it never got a token
	E2E        time.Duration
	Output     int // tokens generated
	Cached     int // prompt tokens served from the replica's prefix cache
	Replica    int
	Dropped    bool          // the run ended first (or no replica would take it)
	Rejected   bool          // the admission queue turned it away (full, or held past its timeout)
	Held       time.Duration // time spent in the admission queue
	Preempted  int
	PromptLen  int
	HitBlocks  int // blocks the router believed cached on its pick
	RouteBlock int // blocks of the prompt
}

// ClusterConfig is a virtual-time cluster: identical replicas behind one
// Router.
type ClusterConfig struct {
	Engine         hardware.Config
	Replicas       int
	Policy         string
	PolicyImpl     gateway.Policy // overrides Policy when set
	Seed           uint64
	ScrapeInterval time.Duration // how often the router sees engine metrics; default 100ms
	// Deadline ends the run: requests unfinished by then are Dropped.
	Deadline time.Duration
	// Scaler, when set, is asked for a replica count every ScaleEvery
	// and replicas start after StartupTime.
	Scaler     Scaler
	ScaleEvery time.Duration
	// StartupTime is how long a new replica takes to become ready.
	StartupTime time.Duration
	// InitialReplicas, when Scaler is set, is how many start ready.
	InitialReplicas int
	// Admission, when set, holds requests that every replica is too full
	// for, as the gateway does (gateway.Config.MaxQueued/QueueTimeout).
	Admission *Admission
}

// Admission bounds the virtual gateway's admission queue.
type Admission struct {
	MaxQueued         int
	Timeout           time.Duration
	MaxPendingPrefill time.Duration // gateway.RouterOptions.MaxPendingPrefill
}

// Scaler decides replica counts from the cluster's state.
type Scaler interface {
	// Desired is called every ScaleEvery with every replica that exists
	// (ready or starting), the requests held for lack of a ready one,
	// and the current count; it returns the wanted count.
	Desired(now time.Time, s autoscale.Sample, current int) int
}

// AutoscalerScaler adapts an autoscale.Autoscaler.
type AutoscalerScaler struct{ A *autoscale.Autoscaler }

// Desired observes the sample and decides.
func (s AutoscalerScaler) Desired(now time.Time, smp autoscale.Sample, current int) int {
	s.A.Observe(now, smp)
	return s.A.Decide(now, current).Desired
}

type simReplica struct {
	id      string
	eng     *enginesim.Engine
	busy    bool
	readyAt time.Duration // when it can serve; > now while starting
	ready   bool
	drain   bool // scale-down: take no new requests, stop when empty
	stopped bool
	events  []stepEvent
}

type stepEvent struct {
	req      *enginesim.Request
	first    bool
	finished bool
}

type simReq struct {
	idx    int
	ticket *gateway.Ticket
	rep    int
}

// event kinds, in the order ties are processed.
const (
	evStepDone = iota
	evReady
	evScrape
	evScale
	evArrival
)

type event struct {
	at   time.Duration
	kind int
	i    int // arrival index or replica index
	seq  int64
}

type eventHeap []event

func (h eventHeap) Len() int { return len(h) }
func (h eventHeap) Less(a, b int) bool {
	if h[a].at != h[b].at {
		return h[a].at < h[b].at
	}
	if h[a].kind != h[b].kind {
		return h[a].kind < h[b].kind
	}
	return h[a].seq < h[b].seq
}
func (h eventHeap) Swap(a, b int) { h[a], h[b] = h[b], h[a] }
func (h *eventHeap) Push(x any)   { *h = append(*h, x.(event)) }
func (h *eventHeap) Pop() any     { o := *h; x := o[len(o)-1]; *h = o[:len(o)-1]; return x }
func (h *eventHeap) push(e event) { heap.Push(h, e) }
func (h *eventHeap) pop() event   { return heap.Pop(h).(event) }

// epoch anchors virtual time for the router, which works in time.Time.
var epoch = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

type cluster struct {
	cfg      ClusterConfig
	router   *gateway.Router
	reps     []*simReplica
	cap      gateway.Capacity
	arrivals []Arrival
	out      []Outcome
	held     []int // arrivals waiting for a ready replica
	queued   []int // arrivals waiting for a replica with room (admission), first come first
	peak     int   // most replicas the scaler asked for
	ev       eventHeap
	seq      int64
	now      time.Duration
}

func (c *cluster) push(at time.Duration, kind, i int) {
	c.seq++
	c.ev.push(event{at: at, kind: kind, i: i, seq: c.seq})
}

// CachedPrefixBlocks is the precise policy's oracle: the engine's cache.
func (c *cluster) CachedPrefixBlocks(id string, hashes []uint64) int {
	for _, r := range c.reps {
		if r.id == id {
			return r.eng.CachedPrefixBlocks(hashes)
		}
	}
	return 0
}

// Simulate runs arrivals through a virtual cluster, driven by a
// discrete-event loop that never sleeps, and returns one Outcome per
// arrival (in arrival order).
func Simulate(cfg ClusterConfig, arrivals []Arrival) ([]Outcome, error) {
	outs, _, err := simulate(cfg, arrivals)
	return outs, err
}

func simulate(cfg ClusterConfig, arrivals []Arrival) ([]Outcome, *cluster, error) {
	if cfg.ScrapeInterval == 0 {
		cfg.ScrapeInterval = 100 * time.Millisecond
	}
	if cfg.Replicas < 1 {
		return nil, nil, fmt.Errorf("replicas: %d, want at least 1", cfg.Replicas)
	}
	if cfg.Deadline <= 0 {
		return nil, nil, fmt.Errorf("deadline: %v, want positive", cfg.Deadline)
	}
	pol := cfg.PolicyImpl
	if pol == nil {
		p, err := gateway.NewPolicy(cfg.Policy)
		if err != nil {
			return nil, nil, err
		}
		pol = p
	}
	var err error
	c := &cluster{cfg: cfg, arrivals: arrivals, out: make([]Outcome, len(arrivals))}
	c.router, err = gateway.NewRouter(pol, gateway.RouterOptions{Seed: cfg.Seed, Oracle: c, HoldWhenSaturated: cfg.Admission != nil, MaxPendingPrefill: admissionPrefill(cfg.Admission)})
	if err != nil {
		return nil, nil, err
	}
	c.cap = gateway.CapacityFromConfig(cfg.Engine)
	initial := cfg.Replicas
	if cfg.Scaler != nil {
		initial = max(cfg.InitialReplicas, 0)
	}
	for range initial {
		if err := c.addReplica(0, true); err != nil {
			return nil, nil, err
		}
	}
	c.syncRouter()
	for i, a := range arrivals {
		c.out[i] = Outcome{Arrival: a.At, Replica: -1, PromptLen: len(a.Prefix) + len(a.Body)}
		c.push(a.At, evArrival, i)
	}
	c.push(0, evScrape, 0)
	if cfg.Scaler != nil {
		if cfg.ScaleEvery <= 0 {
			cfg.ScaleEvery = time.Second
			c.cfg.ScaleEvery = cfg.ScaleEvery
		}
		c.push(0, evScale, 0)
	}
	pending := len(arrivals)
	for c.ev.Len() > 0 && pending > 0 {
		e := c.ev.pop()
		if e.at > cfg.Deadline {
			break
		}
		c.now = e.at
		switch e.kind {
		case evArrival:
			if c.arrive(e.i) {
				pending--
			}
		case evStepDone:
			done, freed := c.stepDone(e.i)
			pending -= done
			if freed {
				pending -= c.admitQueued()
			}
		case evReady:
			r := c.reps[e.i]
			if !r.stopped {
				r.ready = true
				c.syncRouter()
				pending -= c.releaseHeld()
				pending -= c.admitQueued()
			}
		case evScrape:
			for _, r := range c.reps {
				if r.ready {
					l := r.eng.Load()
					c.router.Observe(r.id, gateway.EngineLoad{At: epoch.Add(c.now), Running: l.Running, Waiting: l.Waiting, KVUsage: l.KVUsage}, true)
				}
			}
			pending -= c.admitQueued() // expire what waited too long
			c.push(c.now+cfg.ScrapeInterval, evScrape, 0)
		case evScale:
			pending -= c.scale()
			pending -= c.admitQueued()
			c.push(c.now+c.cfg.ScaleEvery, evScale, 0)
		}
	}
	for i := range c.out {
		if c.out[i].E2E == 0 {
			c.out[i].Dropped = true
		}
	}
	return c.out, c, nil
}

func admissionPrefill(a *Admission) time.Duration {
	if a == nil {
		return 0
	}
	return a.MaxPendingPrefill
}

func (c *cluster) addReplica(now time.Duration, ready bool) error {
	eng, err := enginesim.NewEngine(c.cfg.Engine)
	if err != nil {
		return err
	}
	r := &simReplica{id: fmt.Sprintf("r%03d", len(c.reps)), eng: eng, ready: ready}
	c.reps = append(c.reps, r)
	if !ready {
		r.readyAt = now + c.cfg.StartupTime
		c.push(r.readyAt, evReady, len(c.reps)-1)
	}
	return nil
}

func (c *cluster) syncRouter() {
	var reps []gateway.Replica
	for _, r := range c.reps {
		if r.ready && !r.drain && !r.stopped {
			reps = append(reps, gateway.Replica{ID: r.id, Capacity: c.cap})
		}
	}
	c.router.SetReplicas(reps)
}

func (c *cluster) repIndex(id string) int {
	for i, r := range c.reps {
		if r.id == id {
			return i
		}
	}
	return -1
}

// arrive routes arrival i, or holds it; it reports whether the request
// was turned away (and so is finished).
func (c *cluster) arrive(i int) (rejected bool) {
	if len(c.queued) > 0 {
		// Others wait already: join them, first come first served.
		if c.enqueue(i) {
			return true
		}
		return c.admitQueued() > 0 && c.out[i].Rejected
	}
	switch c.dispatch(i) {
	case gateway.ErrSaturated:
		return c.enqueue(i)
	}
	return false
}

func (c *cluster) enqueue(i int) (rejected bool) {
	if len(c.queued) >= c.cfg.Admission.MaxQueued {
		c.reject(i)
		return true
	}
	c.queued = append(c.queued, i)
	return false
}

func (c *cluster) reject(i int) {
	o := &c.out[i]
	o.Dropped, o.Rejected, o.Held = true, true, c.now-o.Arrival
}

// admitQueued turns away the requests held past the timeout, then
// admits held requests, oldest first, while a replica has room. It
// returns how many it turned away.
func (c *cluster) admitQueued() (rejected int) {
	adm := c.cfg.Admission
	kept := c.queued[:0]
	for _, i := range c.queued {
		if c.now-c.arrivals[i].At > adm.Timeout {
			c.reject(i)
			rejected++
			continue
		}
		kept = append(kept, i)
	}
	c.queued = kept
	for len(c.queued) > 0 {
		i := c.queued[0]
		if c.dispatch(i) == gateway.ErrSaturated {
			break
		}
		c.out[i].Held = c.now - c.arrivals[i].At
		c.queued = c.queued[1:]
	}
	return rejected
}

// dispatch routes arrival i to a replica now; ErrSaturated means the
// admission queue should hold it, and a missing replica holds it in held.
func (c *cluster) dispatch(i int) error {
	a := &c.arrivals[i]
	prompt := a.prompt()
	hashes := openai.AppendBlockHashes(append(make([]uint64, 0, len(prompt)/gateway.BlockSize), a.PrefixHashes...), prompt, gateway.BlockSize)
	req := &gateway.Request{Hashes: hashes, PromptTokens: len(prompt), MaxTokens: a.MaxTokens}
	t, err := c.router.Pick(epoch.Add(c.now), req, nil)
	if err == gateway.ErrSaturated {
		return err
	}
	if err != nil {
		c.held = append(c.held, i)
		return nil
	}
	ri := c.repIndex(t.Replica)
	r := c.reps[ri]
	er := &enginesim.Request{Prompt: prompt, PromptHashes: hashes, MaxTokens: a.MaxTokens, Seed: a.Seed, Tag: &simReq{idx: i, ticket: t, rep: ri}}
	if err := r.eng.Add(er, c.now); err != nil {
		t.Done(epoch.Add(c.now), gateway.Failure)
		c.out[i].Dropped = true
		return nil
	}
	c.out[i].Replica = ri
	c.out[i].HitBlocks = t.HitBlocks
	c.out[i].RouteBlock = len(hashes)
	if !r.busy {
		c.step(ri)
	}
	return nil
}

// releaseHeld routes the requests held for lack of a replica; it
// returns how many the admission queue turned away.
func (c *cluster) releaseHeld() (rejected int) {
	held := c.held
	c.held = nil
	for _, i := range held {
		if c.dispatch(i) == gateway.ErrSaturated && c.enqueue(i) {
			rejected++
		}
	}
	return rejected
}

// step starts a step on replica ri at c.now.
func (c *cluster) step(ri int) {
	r := c.reps[ri]
	res := r.eng.Step(c.now)
	if res.Duration == 0 {
		r.busy = false
		if r.drain && !r.eng.HasWork() {
			r.stopped = true
		}
		return
	}
	r.busy = true
	r.events = r.events[:0]
	for _, ev := range res.Events {
		if ev.First || ev.Finished {
			r.events = append(r.events, stepEvent{ev.Req, ev.First, ev.Finished})
		}
	}
	c.push(c.now+res.Duration, evStepDone, ri)
}

// stepDone delivers a step's tokens and starts the next; it returns how
// many requests finished and whether any reached its first token or its
// end (which frees router capacity).
func (c *cluster) stepDone(ri int) (done int, freed bool) {
	r := c.reps[ri]
	at := epoch.Add(c.now)
	for _, ev := range r.events {
		sr := ev.req.Tag.(*simReq)
		o := &c.out[sr.idx]
		if ev.first {
			sr.ticket.FirstToken(at)
			o.TTFT = c.now - o.Arrival
			o.Cached = ev.req.CachedPromptTokens()
		}
		if ev.finished {
			sr.ticket.Done(at, gateway.Success)
			o.E2E = c.now - o.Arrival
			o.Output = len(ev.req.Output())
			o.Preempted = ev.req.Preemptions()
			done++
		}
	}
	c.step(ri)
	return done, len(r.events) > 0
}

// scale asks the scaler for a count and adds or drains replicas; it
// returns how many held requests the admission queue turned away.
func (c *cluster) scale() (rejected int) {
	snap := map[string]gateway.Candidate{}
	for _, cd := range c.router.Snapshot(epoch.Add(c.now)) {
		snap[cd.ID] = cd
	}
	smp := autoscale.Sample{Held: len(c.held) + len(c.queued)}
	for _, i := range append(c.held[:len(c.held):len(c.held)], c.queued...) {
		a := &c.arrivals[i]
		smp.HeldTokens += int64(len(a.Prefix) + len(a.Body) + a.MaxTokens)
	}
	have := 0
	for _, r := range c.reps {
		if r.stopped || r.drain {
			continue
		}
		have++
		l := r.eng.Load()
		cd := snap[r.id]
		smp.Replicas = append(smp.Replicas, autoscale.Replica{
			Ready: r.ready, Running: l.Running, Waiting: l.Waiting, KVUsage: l.KVUsage,
			InFlightTokens: cd.InFlightTokens, PendingPrefillSeconds: cd.PendingPrefill,
			CapacityTokens: c.cap.KVTokens,
		})
	}
	want := c.cfg.Scaler.Desired(epoch.Add(c.now), smp, have)
	c.peak = max(c.peak, want)
	for ; have < want; have++ {
		c.addReplica(c.now, c.cfg.StartupTime == 0)
	}
	// Scale down: drain the newest replicas, starting ones first.
	for i := len(c.reps) - 1; i >= 0 && have > want; i-- {
		r := c.reps[i]
		if r.stopped || r.drain {
			continue
		}
		r.drain = true
		if !r.ready || (!r.busy && !r.eng.HasWork()) {
			r.stopped = true
		}
		have--
	}
	c.syncRouter()
	return c.releaseHeld()
}
