package store

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/gangway/gangway/internal/api"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Events. The leader derives them from the changes its cache applies and
// writes them under eventsPrefix, a batch to a transaction, each keyed by
// the revision of the change it tells of and its place among that
// change's events: keys sort oldest first, and a second leader deriving
// the same change writes the same key, not a second event. They expire
// with leases, as idempotency keys do (spanLeases): one per span of
// time, living the event TTL beyond it; and the leader trims the oldest
// beyond a count (TrimEvents), so that a storm cannot fill etcd. Every
// replica's cache keeps the newest in an EventLog.
const (
	eventsPrefix      = Root + "events/"
	eventLeasesPrefix = Root + "event-leases/"
	// DefaultEventTTL is how long events are kept by default, as
	// Kubernetes keeps its own for an hour: long enough for the morning
	// after a night's failures.
	DefaultEventTTL = 24 * time.Hour
)

// eventChunk is how many events one transaction carries: well inside
// etcd's default 128 operations and 1.5 MiB.
const eventChunk = 100

// eventLeaseSpan is the span one lease of events serves: a 24th of their
// TTL, between a second and an hour.
func eventLeaseSpan(ttl time.Duration) time.Duration {
	return min(max(ttl/24, time.Second), time.Hour)
}

// EventWrite is an event to store, with what keys it: the revision of
// the change it tells of and its place among that change's events.
type EventWrite struct {
	Source int64
	Seq    int
	Event  api.Event
}

func (w *EventWrite) key() string { return fmt.Sprintf("%s%020d/%04d", eventsPrefix, w.Source, w.Seq) }

// PutEvents stores events, eventChunk to a transaction, each kept for the
// store's event TTL from now. On an error the chunks before are stored.
func (s *Store) PutEvents(ctx context.Context, ws []EventWrite, now time.Time) error {
	for len(ws) > 0 {
		n := min(len(ws), eventChunk)
		lease, err := s.eventLeases.get(ctx, s, now)
		if err != nil {
			return err
		}
		ops := make([]clientv3.Op, n)
		for i := range ws[:n] {
			w := &ws[i]
			w.Event.Index = 0 // the revision it is written at
			b, err := json.Marshal(&w.Event)
			if err != nil {
				return fmt.Errorf("store: encode event: %w", err)
			}
			ops[i] = clientv3.OpPut(w.key(), string(b), clientv3.WithLease(lease))
		}
		if _, err := s.kv.Txn(ctx).Then(ops...).Commit(); err != nil {
			s.eventLeases.gone(lease, err)
			return fmt.Errorf("store: put %d events: %w", n, err)
		}
		ws = ws[n:]
	}
	return nil
}

// TrimEvents deletes the oldest events beyond the newest keep, and
// returns how many it deleted.
func (s *Store) TrimEvents(ctx context.Context, keep int) (int, error) {
	resp, err := s.kv.Get(ctx, eventsPrefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return 0, fmt.Errorf("store: count events: %w", err)
	}
	over := resp.Count - int64(keep)
	if over <= 0 {
		return 0, nil
	}
	// The oldest keys (they sort oldest first), and their range deleted.
	resp, err = s.kv.Get(ctx, eventsPrefix, clientv3.WithPrefix(), clientv3.WithKeysOnly(), clientv3.WithLimit(over),
		clientv3.WithSort(clientv3.SortByKey, clientv3.SortAscend))
	if err != nil || len(resp.Kvs) == 0 {
		return 0, err
	}
	last := string(resp.Kvs[len(resp.Kvs)-1].Key)
	del, err := s.kv.Delete(ctx, eventsPrefix, clientv3.WithRange(last+"\x00"))
	if err != nil {
		return 0, fmt.Errorf("store: delete the oldest events: %w", err)
	}
	return int(del.Deleted), nil
}

// ExpireEvents revokes the leases of events granted longer ago than
// events live (which a new etcd leader renewed), and with them their
// events. It returns how many leases it revoked.
func (s *Store) ExpireEvents(ctx context.Context, now time.Time) (int, error) {
	return s.eventLeases.expire(ctx, s, now)
}
