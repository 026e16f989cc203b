package gateway

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/gangway/gangway/internal/inference/autoscale"
)

// Admission: when every replica of a model is saturated (Overflows, the
// router's capacity model), or the model has no ready replica at all (a
// deployment scaled to zero or still starting), the gateway holds the
// request instead of piling it onto a full engine's queue or answering
// 404. Held requests are served first come, first served as capacity
// frees or replicas become ready; at most Config.MaxQueued wait per
// model (then 429) and each for at most Config.QueueTimeout (then 503),
// both with Retry-After. The autoscaler sees them through Held.

// ErrQueueFull and ErrQueueTimeout are why a request was not admitted.
var (
	ErrQueueFull    = errors.New("gateway: admission queue full")
	ErrQueueTimeout = errors.New("gateway: held past the queue timeout")
)

// ModelSource is implemented by Sources that also know models with no
// ready replica (a deployment scaled to zero or starting): the gateway
// holds their requests until a replica is listed, rather than answering
// 404, and reports them through Held.
type ModelSource interface {
	Models(ctx context.Context) ([]string, error)
}

// queue is one model's admission queue. Only its head tries the router;
// the others wait for their turn.
type queue struct {
	gate *autoscale.Gate // open while the model has a ready replica

	mu      sync.Mutex // guards waiting and tokens
	waiting []*waiter  // first come first; waiting[0] is the head
	tokens  int64      // KV tokens the waiting requests would allocate
}

type waiter struct {
	turn   chan struct{} // closed when it becomes the head
	tokens int64
}

func newQueue() *queue { return &queue{gate: autoscale.NewGate()} }

// join adds a waiter, or fails when max are waiting.
func (q *queue) join(max int, tokens int64) (*waiter, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.waiting) >= max {
		return nil, ErrQueueFull
	}
	w := &waiter{turn: make(chan struct{}), tokens: tokens}
	q.waiting = append(q.waiting, w)
	q.tokens += tokens
	if len(q.waiting) == 1 {
		close(w.turn)
	}
	return w, nil
}

// leave removes w and, if it was the head, hands the turn on.
func (q *queue) leave(w *waiter) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for i, x := range q.waiting {
		if x != w {
			continue
		}
		q.waiting = append(q.waiting[:i], q.waiting[i+1:]...)
		q.tokens -= w.tokens
		if i == 0 && len(q.waiting) > 0 {
			close(q.waiting[0].turn)
		}
		return
	}
}

func (q *queue) len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.waiting)
}

// queueFor returns model's queue, creating it.
func (g *Gateway) queueFor(model string) *queue {
	g.qmu.Lock()
	defer g.qmu.Unlock()
	q := g.queues[model]
	if q == nil {
		q = newQueue()
		g.queues[model] = q
	}
	return q
}

// Held reports the requests held for model, waiting for capacity or for
// a first replica, and the KV tokens they would allocate: what the
// autoscaler adds to the load it sees (autoscale.Sample).
func (g *Gateway) Held(model string) (requests int, tokens int64) {
	g.qmu.Lock()
	q := g.queues[model]
	g.qmu.Unlock()
	if q == nil {
		return 0, 0
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.waiting) + q.gate.Held(), q.tokens
}

// heldTokens is what a request counts for in Held.
func heldTokens(req *Request) int64 { return int64(req.PromptTokens + req.MaxTokens) }

// pick routes req for model: at once when nobody is held and a replica
// has room, else in turn once one does. It blocks until then, until
// QueueTimeout (ErrQueueTimeout) or until ctx ends (ctx's error); with
// holding off it is the router's Pick. queued says req was held.
func (g *Gateway) pick(ctx context.Context, model string, rt *Router, req *Request, tried []string) (t *Ticket, queued bool, err error) {
	if g.cfg.MaxQueued < 0 {
		t, err = rt.Pick(time.Now(), req, tried)
		return t, false, err
	}
	q := g.queueFor(model)
	if q.len() == 0 {
		if t, err := rt.Pick(time.Now(), req, tried); !errors.Is(err, ErrSaturated) {
			return t, false, err
		}
	}
	t, err = g.pickHeld(ctx, q, model, rt, req, tried)
	return t, true, err
}

// pickHeld is pick once req must wait its turn in q.
func (g *Gateway) pickHeld(ctx context.Context, q *queue, model string, rt *Router, req *Request, tried []string) (*Ticket, error) {
	w, err := q.join(g.cfg.MaxQueued, heldTokens(req))
	if err != nil {
		return nil, err
	}
	defer q.leave(w)
	ctx, cancel := context.WithTimeoutCause(ctx, g.cfg.QueueTimeout, ErrQueueTimeout)
	defer cancel()
	select {
	case <-w.turn:
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	}
	// A replica that recovers from ejection frees capacity without an
	// event; the refresh interval bounds how long that goes unnoticed.
	tick := time.NewTicker(g.cfg.RefreshInterval)
	defer tick.Stop()
	for {
		freed := rt.Freed()
		t, err := rt.Pick(time.Now(), req, tried)
		if !errors.Is(err, ErrSaturated) {
			return t, err
		}
		select {
		case <-freed:
		case <-tick.C:
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		}
		if cur := g.pool(model); cur != rt {
			if cur == nil {
				return nil, ErrNoReplica
			}
			rt = cur
		}
	}
}

// awaitReplica holds a request for a model the source knows but no
// replica serves yet, until one is ready (the router it returns), until
// QueueTimeout or until ctx ends. The gate counts it in Held meanwhile,
// which is what makes the autoscaler start a replica.
func (g *Gateway) awaitReplica(ctx context.Context, model string) (*Router, error) {
	q := g.queueFor(model)
	ctx, cancel := context.WithTimeoutCause(ctx, g.cfg.QueueTimeout, ErrQueueTimeout)
	defer cancel()
	for {
		if err := q.gate.Wait(ctx); err != nil {
			return nil, context.Cause(ctx)
		}
		if rt := g.pool(model); rt != nil {
			return rt, nil
		}
		// Opened and shut again before we looked: wait for the next.
	}
}

// syncGatesLocked opens the gate of every model with a router and shuts
// the others'.
func (g *Gateway) syncGatesLocked() {
	g.qmu.Lock()
	defer g.qmu.Unlock()
	for model := range g.known {
		if g.queues[model] == nil {
			g.queues[model] = newQueue()
		}
	}
	for model, q := range g.queues {
		if _, ok := g.pools[model]; ok {
			q.gate.Open()
		} else {
			q.gate.Shut()
		}
		if _, known := g.known[model]; !known && g.pools[model] == nil && q.len() == 0 && q.gate.Held() == 0 {
			delete(g.queues, model)
		}
	}
}
