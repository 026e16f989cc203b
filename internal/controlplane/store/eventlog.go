package store

import (
	"context"
	"encoding/json"
	"sort"
	"sync"
	"time"

	"github.com/gangway/gangway/internal/api"
)

// DefaultMaxEvents is how many events an EventLog keeps by default.
const DefaultMaxEvents = 20000

// EventLog is the newest events the store holds, in memory and in index
// order, at most its max: a cache fills it from its list and watch
// (cache.SetEvents), so that every replica answers GET /v1/events, and
// blocking queries wait on it. Safe for concurrent use.
type EventLog struct {
	max int

	mu     sync.Mutex    // guards the fields below
	evs    []loggedEvent // by Index, then key; some dead
	byKey  map[string]int64
	dead   int
	newest int64 // the newest Index ever put
	// settled is the revision up to which every event is in the log: a
	// watch answer's events come one by one, and a reader that saw some
	// events of a revision and answered it as its next index would never
	// see the others (a node's and its job's events share a batch's
	// revision). Only events up to settled are answered.
	settled int64
	wake    chan struct{} // closed when settled moves; nil: nobody waits
}

type loggedEvent struct {
	key  string
	dead bool
	ev   api.Event
}

// NewEventLog returns an empty log of at most max events (0:
// DefaultMaxEvents).
func NewEventLog(max int) *EventLog {
	if max <= 0 {
		max = DefaultMaxEvents
	}
	return &EventLog{max: max, byKey: map[string]int64{}}
}

// staging returns an empty log of l's size for a list to fill, which
// then replaces l's events (replace): until then l serves what it had.
func (l *EventLog) staging() *EventLog {
	if l == nil {
		return nil
	}
	return NewEventLog(l.max)
}

// replace takes the events of s, a list's (staging), and wakes the
// waiters if it brought newer ones.
func (l *EventLog) replace(s *EventLog) {
	if l == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.evs, l.byKey, l.dead = s.evs, s.byKey, s.dead
	if s.newest > l.newest {
		l.newest = s.newest
	}
	if top := max(s.newest, s.settled); top > l.settled {
		l.settled = top // a list is whole
		if l.wake != nil {
			close(l.wake)
			l.wake = nil
		}
	}
}

// apply puts or deletes the event stored at key, and settles its
// revision (see settled).
func (l *EventLog) apply(key string, val []byte, rev int64, del bool) {
	l.applyPending(key, val, rev, del)
	l.settle(rev)
}

// settle says every event up to rev is in the log, and wakes the waiters.
func (l *EventLog) settle(rev int64) {
	if l == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if rev > l.settled {
		l.settled = rev
		if l.wake != nil {
			close(l.wake)
			l.wake = nil
		}
	}
}

// applyPending puts or deletes the event stored at key (the cache's
// watch or list), not yet answered until its revision is settled; a value
// that does not decode is left out.
func (l *EventLog) applyPending(key string, val []byte, rev int64, del bool) {
	if l == nil {
		return
	}
	var ev api.Event
	if !del && json.Unmarshal(val, &ev) != nil {
		return
	}
	ev.Index = rev
	l.mu.Lock()
	defer l.mu.Unlock()
	l.removeLocked(key)
	if del {
		l.compactLocked()
		return
	}
	i := len(l.evs)
	for i > 0 && l.evs[i-1].ev.Index > rev { // a list's keys come nearly in index order
		i--
	}
	l.evs = append(l.evs, loggedEvent{})
	copy(l.evs[i+1:], l.evs[i:])
	l.evs[i] = loggedEvent{key: key, ev: ev}
	l.byKey[key] = rev
	for len(l.evs)-l.dead > l.max {
		l.removeLocked(l.oldestLocked())
	}
	l.compactLocked()
	if rev > l.newest {
		l.newest = rev
	}
}

func (l *EventLog) oldestLocked() string {
	for _, e := range l.evs {
		if !e.dead {
			return e.key
		}
	}
	return ""
}

// removeLocked marks key's event dead, if the log has it.
func (l *EventLog) removeLocked(key string) {
	rev, ok := l.byKey[key]
	if !ok {
		return
	}
	delete(l.byKey, key)
	for i := sort.Search(len(l.evs), func(i int) bool { return l.evs[i].ev.Index >= rev }); i < len(l.evs) && l.evs[i].ev.Index == rev; i++ {
		if e := &l.evs[i]; e.key == key && !e.dead {
			e.dead, e.ev = true, api.Event{}
			l.dead++
			return
		}
	}
}

// compactLocked drops the dead once they are a quarter of the log.
func (l *EventLog) compactLocked() {
	if l.dead == 0 || l.dead < len(l.evs)/4 {
		return
	}
	live := l.evs[:0]
	for _, e := range l.evs {
		if !e.dead {
			live = append(live, e)
		}
	}
	clear(l.evs[len(live):])
	l.evs, l.dead = live, 0
}

// Len is how many events the log holds.
func (l *EventLog) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.evs) - l.dead
}

// Events returns the events past index after that f keeps, oldest first,
// only the newest limit of them when limit > 0, and the index to ask with
// next: the newest the log has put, or after if that is newer. With
// after > 0 it waits for at least one such event until wait passes or ctx
// ends (then it answers none); with after 0 it answers at once.
func (l *EventLog) Events(ctx context.Context, after int64, f *api.EventFilter, limit int, wait time.Duration) ([]api.Event, int64) {
	var timeout <-chan time.Time
	if after > 0 {
		t := time.NewTimer(wait)
		defer t.Stop()
		timeout = t.C
	}
	for {
		l.mu.Lock()
		out, idx := l.matchLocked(after, f, limit)
		if len(out) > 0 || after == 0 {
			l.mu.Unlock()
			return out, idx
		}
		if l.wake == nil {
			l.wake = make(chan struct{})
		}
		wake := l.wake
		l.mu.Unlock()
		// Nothing f keeps yet: look again from what has been seen.
		after = idx
		select {
		case <-wake:
		case <-timeout:
			return nil, after
		case <-ctx.Done():
			return nil, after
		}
	}
}

func (l *EventLog) matchLocked(after int64, f *api.EventFilter, limit int) ([]api.Event, int64) {
	i := sort.Search(len(l.evs), func(i int) bool { return l.evs[i].ev.Index > after })
	var out []api.Event
	for _, e := range l.evs[i:] {
		if e.ev.Index > l.settled {
			break // its revision's other events may not be in yet
		}
		if !e.dead && f.Match(&e.ev) {
			out = append(out, e.ev)
		}
	}
	if limit > 0 && len(out) > limit {
		out = out[len(out)-limit:]
	}
	return out, max(after, l.settled)
}
