package controller

import (
	"sync"
	"time"
)

// Liveness is the server's memory of agent heartbeats. Heartbeats are
// frequent and only their recency matters, so they are never written to the
// store; a new leader gives every node a full timeout from its own start.
//
// It also keeps each node's run: since when its heartbeats have come with
// no gap longer than the streak gap. The lifecycle trusts a node as a
// witness (Fencing) only after a long enough run.
type Liveness struct {
	mu    sync.Mutex // guards seen
	seen  map[string]beat
	start time.Time
	gap   time.Duration
}

type beat struct {
	at  time.Time
	ack int64
	run time.Time // start of the current unbroken run
}

// NewLiveness starts an empty table; nodes not yet heard from count as seen
// at start. Runs break on gaps longer than twice a second (SetStreakGap
// changes it).
func NewLiveness(start time.Time) *Liveness {
	return &Liveness{seen: map[string]beat{}, start: start, gap: 2 * time.Second}
}

// SetStreakGap sets the longest gap between two heartbeats of one run; call
// before the first Beat.
func (l *Liveness) SetStreakGap(d time.Duration) *Liveness {
	l.gap = d
	return l
}

// Beat records a heartbeat from node, carrying the assignments revision
// the agent has fully carried out.
func (l *Liveness) Beat(node string, ack int64, at time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.seen[node]
	if b.at.IsZero() || at.Sub(b.at) > l.gap {
		b.run = at
	}
	b.at = at
	if ack > b.ack {
		b.ack = ack
	}
	l.seen[node] = b
}

// Break starts node's run again at at: its last heartbeat was answered so
// late that the agent may have counted it as failed.
func (l *Liveness) Break(node string, at time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if b, ok := l.seen[node]; ok {
		b.run = at
		l.seen[node] = b
	}
}

// Get returns when node was last heard from and its acknowledged revision.
func (l *Liveness) Get(node string) (at time.Time, ack int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	b, ok := l.seen[node]
	if !ok {
		return l.start, 0
	}
	return b.at, b.ack
}

// Run returns since when node's heartbeats have come unbroken and its last
// one; ok is false if this leader never heard from it.
func (l *Liveness) Run(node string) (since, last time.Time, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	b, ok := l.seen[node]
	return b.run, b.at, ok
}
