package controller

import (
	"sync"
	"time"
)

// Liveness is the server's memory of agent heartbeats. Heartbeats are
// frequent and only their recency matters, so they are never written to the
// store; a new leader gives every node a full timeout from its own start.
type Liveness struct {
	mu    sync.Mutex // guards seen
	seen  map[string]beat
	start time.Time
}

type beat struct {
	at  time.Time
	ack int64
}

// NewLiveness starts an empty table; nodes not yet heard from count as seen
// at start.
func NewLiveness(start time.Time) *Liveness {
	return &Liveness{seen: map[string]beat{}, start: start}
}

// Beat records a heartbeat from node, carrying the assignments revision
// the agent has fully carried out.
func (l *Liveness) Beat(node string, ack int64, at time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.seen[node]
	b.at = at
	if ack > b.ack {
		b.ack = ack
	}
	l.seen[node] = b
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
