package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// ErrUnavailable: etcd did not answer within the Store's call timeout, or
// answered that it cannot serve (no leader, quorum lost, stopped). A
// write that failed with it is either wholly applied or not at all (each
// is one transaction), and may still be applied later: re-read before
// retrying one that is not idempotent. Its text is worded for the API's
// 503 answer.
var ErrUnavailable = errors.New("the store (etcd) is unreachable")

// DefaultCallTimeout bounds each request the Store makes to etcd: a
// client connected to no member waits for one until its context ends,
// and a member without quorum answers only after its own request timeout
// (7s by default). Well above what one write of the largest transaction
// takes on a healthy cluster.
const DefaultCallTimeout = 5 * time.Second

// Options configures a Store.
type Options struct {
	// CallTimeout bounds each etcd request (reads, transactions); watches
	// are bounded by their caller. 0: DefaultCallTimeout.
	CallTimeout time.Duration
	// OnTxn, if set, hears how long each transaction's commit took and
	// how it ended (the server's metrics). It must not block.
	OnTxn func(took time.Duration, err error)
	// EventTTL is how long events are kept (PutEvents); 0:
	// DefaultEventTTL.
	EventTTL time.Duration
}

// boundedKV is etcd's KV with every call bounded by d, and its failures
// for want of a working etcd marked ErrUnavailable.
type boundedKV struct {
	clientv3.KV
	d     time.Duration
	onTxn func(time.Duration, error) // nil: none
}

var _ clientv3.KV = boundedKV{}

func (b boundedKV) Get(ctx context.Context, key string, opts ...clientv3.OpOption) (*clientv3.GetResponse, error) {
	cctx, cancel := context.WithTimeout(ctx, b.d)
	defer cancel()
	r, err := b.KV.Get(cctx, key, opts...)
	return r, b.check(ctx, err)
}

func (b boundedKV) Put(ctx context.Context, key, val string, opts ...clientv3.OpOption) (*clientv3.PutResponse, error) {
	cctx, cancel := context.WithTimeout(ctx, b.d)
	defer cancel()
	r, err := b.KV.Put(cctx, key, val, opts...)
	return r, b.check(ctx, err)
}

func (b boundedKV) Delete(ctx context.Context, key string, opts ...clientv3.OpOption) (*clientv3.DeleteResponse, error) {
	cctx, cancel := context.WithTimeout(ctx, b.d)
	defer cancel()
	r, err := b.KV.Delete(cctx, key, opts...)
	return r, b.check(ctx, err)
}

func (b boundedKV) Do(ctx context.Context, op clientv3.Op) (clientv3.OpResponse, error) {
	cctx, cancel := context.WithTimeout(ctx, b.d)
	defer cancel()
	r, err := b.KV.Do(cctx, op)
	return r, b.check(ctx, err)
}

// Txn's deadline starts when the transaction is made, which the store
// does right before committing it; Commit releases it.
func (b boundedKV) Txn(ctx context.Context) clientv3.Txn {
	cctx, cancel := context.WithTimeout(ctx, b.d)
	return &boundedTxn{Txn: b.KV.Txn(cctx), b: b, parent: ctx, cancel: cancel}
}

type boundedTxn struct {
	clientv3.Txn
	b      boundedKV
	parent context.Context
	cancel context.CancelFunc
}

func (t *boundedTxn) If(cs ...clientv3.Cmp) clientv3.Txn   { t.Txn = t.Txn.If(cs...); return t }
func (t *boundedTxn) Then(ops ...clientv3.Op) clientv3.Txn { t.Txn = t.Txn.Then(ops...); return t }
func (t *boundedTxn) Else(ops ...clientv3.Op) clientv3.Txn { t.Txn = t.Txn.Else(ops...); return t }

func (t *boundedTxn) Commit() (*clientv3.TxnResponse, error) {
	defer t.cancel()
	began := time.Now()
	r, err := t.Txn.Commit()
	err = t.b.check(t.parent, err)
	if t.b.onTxn != nil {
		t.b.onTxn(time.Since(began), err)
	}
	return r, err
}

// check marks err ErrUnavailable when etcd, not the caller, is why the
// call failed: the bound passed while the caller's ctx is still live, or
// etcd answered that it cannot serve.
func (b boundedKV) check(ctx context.Context, err error) error {
	switch {
	case err == nil || errors.Is(err, ctx.Err()):
		return err
	case ctx.Err() != nil:
		// The caller's deadline went to etcd with the request, and etcd
		// answers one that passes as its own "request timed out": say
		// whose deadline it was, so the caller sees its own.
		return fmt.Errorf("%w (%w)", ctx.Err(), err)
	case errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("%w: no answer in %s (%w)", ErrUnavailable, b.d, err)
	case unavailable(err):
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	return err
}

// notServing are etcd's answers that it cannot serve now, all of them
// gRPC's Unavailable.
var notServing = []error{
	rpctypes.ErrNoLeader, rpctypes.ErrLeaderChanged, rpctypes.ErrStopped, rpctypes.ErrUnhealthy,
	rpctypes.ErrTimeout, rpctypes.ErrTimeoutDueToLeaderFail, rpctypes.ErrTimeoutDueToConnectionLost,
	rpctypes.ErrTimeoutWaitAppliedIndex,
}

// raftStopped is the text of raft's ErrStopped, which a stopped embedded
// member's in-process client hands back as a gRPC status of code Unknown
// with only this text: nothing but the text tells it.
const raftStopped = "raft: stopped"

// unavailable reports an error of etcd's that says it cannot serve now
// (no leader, request timed out, stopped, unhealthy).
func unavailable(err error) bool {
	for _, e := range notServing {
		if errors.Is(err, e) {
			return true
		}
	}
	return rpctypes.ErrorDesc(err) == raftStopped
}
