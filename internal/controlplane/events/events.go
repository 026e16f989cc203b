// Package events tells what happens in the cluster as events (Kubernetes'
// events, in gangway's words): a job submitted, placed, started, its
// checkpoints, its attempts lost to a node, a GPU fault or a hang, its
// restarts and its end; a node registered, lost, cordoned, faulted; a
// deployment scaled; a queue changed.
//
// Events are derived, not reported: Derive compares the version of an
// object before a change with the version after, as the store's cache
// applies the change (store.Tap), so that neither the controllers nor the
// API handlers do anything for them and nothing on a request's path waits
// for them. A Recorder hears every change on every replica but keeps them
// only while its replica leads (Run): it derives their events in a
// goroutine of its own and writes them in batches, gathered for a quarter
// of a second, one transaction each, trims the oldest beyond a count and
// expires those older than the event TTL. A new leader starts from the changes after it took over, so it
// tells nothing of the state it found: no storm of events at a failover.
//
// It imports api and controlplane/store.
package events

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/gangway/gangway/internal/api"
	"github.com/gangway/gangway/internal/controlplane/store"
)

// Derive tells what one change did, in the order it happened, each event
// at at; none when it did nothing worth telling.
func Derive(ch *store.Change, at time.Time) []api.Event {
	switch ch.Kind {
	case store.ChangeJob:
		return job(ch.OldJob, ch.Job, at)
	case store.ChangeNode:
		return node(ch.Name, ch.OldNode, ch.Node, at)
	case store.ChangeDeployment:
		return deployment(ch.Name, ch.OldDeployment, ch.Deployment, at)
	case store.ChangeQueue:
		return queue(ch.Name, ch.OldQueue, ch.Queue, at)
	case store.ChangeCheckpoint:
		return checkpoint(ch.Name, ch.OldCheckpoint, ch.Checkpoint, at)
	case store.ChangeStraggler:
		return straggler(ch.Straggler, at)
	}
	return nil
}

// Store is what a Recorder writes events with (store.Store).
type Store interface {
	PutEvents(ctx context.Context, ws []store.EventWrite, now time.Time) error
	TrimEvents(ctx context.Context, keep int) (int, error)
	ExpireEvents(ctx context.Context, now time.Time) (int, error)
}

// Config tunes a Recorder.
type Config struct {
	// MaxEvents: the store keeps at most this many events, the oldest
	// trimmed first. Default store.DefaultMaxEvents.
	MaxEvents int
	// Tick is how often the leader trims and expires. Default a minute.
	Tick time.Duration
	// Linger is how long changes are gathered into one write: events are
	// not worth an etcd transaction per change. Default DefaultLinger.
	Linger time.Duration
	// Now is the clock; default time.Now.
	Now func() time.Time
}

// DefaultLinger is Config.Linger's default: a quarter of a second late,
// events of a busy leader take a transaction or a few a second, not one
// per controller pass.
const DefaultLinger = 250 * time.Millisecond

// maxQueued bounds the changes heard and not yet derived: past it, while
// etcd refuses the writes, the newest are dropped (and counted).
const maxQueued = 100000

// Recorder turns the changes a cache applies into stored events while
// its replica leads. Create with New and give it to the cache
// (store.Cache.SetTap); Run while leading.
type Recorder struct {
	st  Store
	cfg Config
	log *slog.Logger

	mu      sync.Mutex // guards the fields below
	active  bool       // Run runs: changes are kept
	lastRev int64      // the cache's revision at the last Changed
	queue   []heard
	dropped int
	poke    chan struct{} // a value when queue grows
}

// heard is a change, and when it was heard.
type heard struct {
	ch store.Change
	at time.Time
}

var _ store.Tap = (*Recorder)(nil)

// New returns a recorder writing to st.
func New(st Store, cfg Config, log *slog.Logger) *Recorder {
	if cfg.MaxEvents <= 0 {
		cfg.MaxEvents = store.DefaultMaxEvents
	}
	if cfg.Tick <= 0 {
		cfg.Tick = time.Minute
	}
	if cfg.Linger <= 0 {
		cfg.Linger = DefaultLinger
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Recorder{st: st, cfg: cfg, log: log, poke: make(chan struct{}, 1)}
}

// Changed keeps the changes while Run runs (store.Tap). After a list it
// keeps only what changed since the revision it heard last: the rest the
// cache had, or (a finished job) is older than this leadership.
func (r *Recorder) Changed(chs []store.Change, rev int64, full bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	since := r.lastRev
	r.lastRev = rev
	if !r.active || full && since == 0 {
		return // the store as the cache first loaded it: nothing happened
	}
	at := r.cfg.Now()
	n := len(r.queue)
	for _, ch := range chs {
		if full && ch.Rev <= since {
			continue
		}
		if len(r.queue) >= maxQueued {
			r.dropped++
			continue
		}
		r.queue = append(r.queue, heard{ch: ch, at: at})
	}
	if len(r.queue) > n {
		select {
		case r.poke <- struct{}{}:
		default:
		}
	}
}

// Run keeps and writes events until ctx ends (the replica stops leading);
// what it derived and could not write by then it tries once more, for
// at most a second. It returns nil.
func (r *Recorder) Run(ctx context.Context) error {
	r.mu.Lock()
	r.active, r.queue, r.dropped = true, nil, 0
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		r.active, r.queue = false, nil
		r.mu.Unlock()
	}()
	tick := time.NewTicker(r.cfg.Tick)
	defer tick.Stop()
	// next fires when to write; it is armed by the first change after a
	// write (Linger later, so that what comes meanwhile goes in the same
	// transaction) or by a failed write (its backoff later).
	next := time.NewTimer(time.Hour)
	next.Stop()
	defer next.Stop()
	armed := false
	arm := func(d time.Duration) {
		if !armed {
			armed = true
			next.Reset(d)
		}
	}
	var backlog []store.EventWrite // derived, not yet written
	written := 0                   // since the last trim
	backoff := time.Duration(0)
	for {
		select {
		case <-ctx.Done():
			r.flush(backlog)
			return nil
		case <-r.poke:
			arm(r.cfg.Linger)
			continue
		case <-tick.C:
			r.maintain(ctx)
			written = 0
			continue
		case <-next.C:
			armed = false
		}
		backlog = append(backlog, r.derive()...)
		if len(backlog) == 0 {
			continue
		}
		if err := r.st.PutEvents(ctx, backlog, r.cfg.Now()); err != nil {
			if ctx.Err() == nil {
				r.log.Warn("writing events failed; retrying", "events", len(backlog), "err", err)
			}
			if len(backlog) > maxQueued {
				backlog = backlog[len(backlog)-maxQueued:]
			}
			backoff = min(max(2*backoff, 100*time.Millisecond), 5*time.Second)
			arm(backoff)
			continue
		}
		written += len(backlog)
		backlog, backoff = nil, 0
		if written > r.cfg.MaxEvents/10 {
			r.maintain(ctx)
			written = 0
		}
	}
}

// derive takes the changes kept and tells their events, numbered within
// each change's revision.
func (r *Recorder) derive() []store.EventWrite {
	r.mu.Lock()
	q, dropped := r.queue, r.dropped
	r.queue, r.dropped = nil, 0
	r.mu.Unlock()
	if dropped > 0 {
		r.log.Warn("changes dropped untold: events could not be written fast enough", "changes", dropped)
	}
	var out []store.EventWrite
	seq, at := 0, int64(-1)
	for i := range q {
		h := &q[i]
		if h.ch.Rev != at {
			seq, at = 0, h.ch.Rev
		}
		for _, e := range Derive(&h.ch, h.at) {
			out = append(out, store.EventWrite{Source: h.ch.Rev, Seq: seq, Event: e})
			seq++
		}
	}
	return out
}

// flush tries once more to write ws, at most a second, after leadership
// ended.
func (r *Recorder) flush(ws []store.EventWrite) {
	ws = append(ws, r.derive()...)
	if len(ws) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := r.st.PutEvents(ctx, ws, r.cfg.Now()); err != nil {
		r.log.Warn("events lost as leadership ended", "events", len(ws), "err", err)
	}
}

// maintain trims the events beyond MaxEvents and expires the old.
func (r *Recorder) maintain(ctx context.Context) {
	if n, err := r.st.TrimEvents(ctx, r.cfg.MaxEvents); err != nil && ctx.Err() == nil {
		r.log.Warn("trimming events failed", "err", err)
	} else if n > 0 {
		r.log.Info("trimmed the oldest events", "events", n, "max_events", r.cfg.MaxEvents)
	}
	if _, err := r.st.ExpireEvents(ctx, r.cfg.Now()); err != nil && ctx.Err() == nil {
		r.log.Warn("expiring events failed", "err", err)
	}
}
