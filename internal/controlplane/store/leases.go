package store

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// spanLeases hands out etcd leases for keys that expire on their own: one
// lease serves every key written in a span of time and lives ttl beyond
// it, so a key is kept from ttl to ttl+span at one LeaseGrant a span,
// not one per write. Each lease has a record of when it was granted,
// attached to it under records, for expire: etcd gives every lease its
// full TTL again whenever a member becomes leader (unless the alpha lease
// checkpoints are on), so a control plane restarted daily would never see
// one expire by itself.
type spanLeases struct {
	ttl, span time.Duration
	records   string // prefix of the grant records: + the lease's ID in hex
	what      string // the keys, for errors: "idempotency keys"

	mu    sync.Mutex       // guards lease and at
	lease clientv3.LeaseID // the current span's (0: none yet)
	at    time.Time        // when it was granted
}

// get is the lease of keys written at now: the current span's, granted
// with its record on the first key of the span.
func (l *spanLeases) get(ctx context.Context, s *Store, now time.Time) (clientv3.LeaseID, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if age := now.Sub(l.at); l.lease != 0 && age >= 0 && age < l.span {
		return l.lease, nil
	}
	g, err := s.c.Grant(ctx, int64((l.ttl+l.span+time.Second-1)/time.Second))
	if err != nil {
		return 0, fmt.Errorf("store: lease for %s: %w", l.what, err)
	}
	at := now.UTC()
	if _, err := s.kv.Put(ctx, l.records+strconv.FormatInt(int64(g.ID), 16), at.Format(time.RFC3339Nano), clientv3.WithLease(g.ID)); err != nil {
		return 0, fmt.Errorf("store: record the lease for %s: %w", l.what, err)
	}
	l.lease, l.at = g.ID, at
	return g.ID, nil
}

// gone drops lease id if err says etcd no longer has it (revoked), so
// that the next get grants a new one.
func (l *spanLeases) gone(id clientv3.LeaseID, err error) {
	if !errors.Is(err, rpctypes.ErrLeaseNotFound) && !errors.Is(err, rpctypes.ErrGRPCLeaseNotFound) {
		return
	}
	l.mu.Lock()
	if l.lease == id {
		l.lease = 0
	}
	l.mu.Unlock()
}

// expire revokes the leases granted longer ago than their keys may live
// (kept past their time because a new etcd leader renewed them), and
// with them their keys. It returns how many it revoked.
func (l *spanLeases) expire(ctx context.Context, s *Store, now time.Time) (int, error) {
	resp, err := s.kv.Get(ctx, l.records, clientv3.WithPrefix())
	if err != nil {
		return 0, fmt.Errorf("store: list the leases of %s: %w", l.what, err)
	}
	n := 0
	for _, kv := range resp.Kvs {
		at, err := time.Parse(time.RFC3339Nano, string(kv.Value))
		if err != nil || now.Sub(at) <= l.ttl+l.span {
			continue
		}
		id := clientv3.LeaseID(kv.Lease)
		if id == 0 { // never attached: nothing to revoke
			_, _ = s.kv.Delete(ctx, string(kv.Key))
			continue
		}
		if _, err := s.c.Revoke(ctx, id); err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
			return n, fmt.Errorf("store: revoke a lease of %s (%x): %w", l.what, int64(id), err)
		}
		n++
	}
	return n, nil
}
