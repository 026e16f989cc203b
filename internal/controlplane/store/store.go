// Package store is gangway's typed persistence on etcd: jobs, nodes,
// assignments, rank statuses, checkpoints and progress, and events, with
// multi-key changes in single transactions and a watch-fed cache for the
// controllers, which hands on what it applies to a Tap (cachetap.go) and
// keeps the events in an EventLog (eventlog.go).
//
// It imports the standard library, internal/api, internal/base/fastjson,
// internal/base/pki (the embedded etcd's own CA) and etcd's client and
// server packages.
package store

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"

	"github.com/gangway/gangway/internal/api"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Sentinel errors.
var (
	ErrNotFound = errors.New("store: not found")
	// ErrConflict: the object changed since it was read; re-read and retry.
	ErrConflict = errors.New("store: conflict")
	// ErrTooLarge: etcd refused a transaction for its number of keys or its
	// size; an external etcd needs --max-txn-ops and --max-request-bytes
	// at least MaxTxnOps and MaxRequestBytes.
	ErrTooLarge = errors.New("store: transaction over etcd's limits (start etcd with --max-txn-ops 16384 --max-request-bytes 33554432)")
)

// Key layout. Everything lives under one prefix so a cache can watch it all.
const (
	Root         = "/gangway/"
	jobsPrefix   = Root + "jobs/"
	nodesPrefix  = Root + "nodes/"
	assignPrefix = Root + "assign/"
	ranksPrefix  = Root + "ranks/"
	ckptPrefix   = Root + "ckpt/"
	progPrefix   = Root + "progress/"
	seqJobs      = Root + "seq/jobs"
)

// Store is typed access to gangway's state. Safe for concurrent use.
type Store struct {
	c  *clientv3.Client // watches, and the cache's list
	kv clientv3.KV      // every other request: c's, bounded (bounded.go)

	idMu   sync.Mutex // guards idNext and idEnd
	idNext int64      // next job ID of the reserved block
	idEnd  int64      // first ID past the block

	// keyLeases are idempotency keys' leases, one an hour; eventLeases
	// events' (events.go).
	keyLeases, eventLeases *spanLeases

	// failArrayChunk, if set (tests), is called before each chunk of an
	// array's tasks is written, with how many are written already; an
	// error stops the write there, as a crash would.
	failArrayChunk func(written int) error
}

// idBlock is how many job IDs one sequence update reserves.
const idBlock = 128

// jobIDs reserves n consecutive IDs and returns the first, from a block
// reserved with one compare-and-swap on the sequence key, so concurrent
// submissions do not collide on it. An array that
// does not fit what is left of the current block gets a block of its own
// (the rest of the old one is skipped: IDs may have gaps, never repeats).
func (s *Store) jobIDs(ctx context.Context, n int64) (int64, error) {
	s.idMu.Lock()
	defer s.idMu.Unlock()
	for s.idEnd-s.idNext < n {
		resp, err := s.kv.Get(ctx, seqJobs)
		if err != nil {
			return 0, fmt.Errorf("store: read job sequence: %w", err)
		}
		var cur int64
		cmp := clientv3.Compare(clientv3.CreateRevision(seqJobs), "=", 0)
		if len(resp.Kvs) > 0 {
			if cur, err = strconv.ParseInt(string(resp.Kvs[0].Value), 10, 64); err != nil {
				return 0, fmt.Errorf("store: corrupt job sequence %q: %w", resp.Kvs[0].Value, err)
			}
			cmp = clientv3.Compare(clientv3.ModRevision(seqJobs), "=", resp.Kvs[0].ModRevision)
		}
		size := max(n, idBlock)
		tr, err := s.kv.Txn(ctx).If(cmp).Then(clientv3.OpPut(seqJobs, strconv.FormatInt(cur+size, 10))).Commit()
		if err != nil {
			return 0, fmt.Errorf("store: reserve job IDs: %w", err)
		}
		if tr.Succeeded {
			s.idNext, s.idEnd = cur+1, cur+size+1
		}
	}
	id := s.idNext
	s.idNext += n
	return id, nil
}

// New wraps an etcd client with the default Options. The caller keeps
// ownership of c.
func New(c *clientv3.Client) *Store { return NewWith(c, Options{}) }

// NewWith wraps an etcd client. The caller keeps ownership of c.
func NewWith(c *clientv3.Client, o Options) *Store {
	if o.CallTimeout <= 0 {
		o.CallTimeout = DefaultCallTimeout
	}
	if o.EventTTL <= 0 {
		o.EventTTL = DefaultEventTTL
	}
	return &Store{c: c, kv: boundedKV{KV: c.KV, d: o.CallTimeout, onTxn: o.OnTxn},
		keyLeases:   &spanLeases{ttl: KeyTTL, span: keyLeaseSpan, records: keyLeasesPrefix, what: "idempotency keys"},
		eventLeases: &spanLeases{ttl: o.EventTTL, span: eventLeaseSpan(o.EventTTL), records: eventLeasesPrefix, what: "events"}}
}

// Client exposes the underlying client (leader election uses it).
func (s *Store) Client() *clientv3.Client { return s.c }

// Prefixes callers may watch for blocking queries; and the events' and
// their leases' records, which the leader writes on its own.
const (
	JobsPrefix        = jobsPrefix
	NodesPrefix       = nodesPrefix
	EventsPrefix      = eventsPrefix
	EventLeasesPrefix = eventLeasesPrefix
)

func jobKey(id string) string   { return jobsPrefix + id }
func nodeKey(n string) string   { return nodesPrefix + n }
func rankKey(k string) string   { return ranksPrefix + k }
func progKey(job string) string { return progPrefix + job }
func ckptKey(job string, step int64) string {
	return fmt.Sprintf("%s%s/%020d", ckptPrefix, job, step)
}
func assignKey(a *api.Assignment) string {
	return assignPrefix + a.Node + "/" + a.TaskKey()
}
func assignNodePrefix(node string) string { return assignPrefix + node + "/" }

// tooLarge reports etcd's refusal of a transaction for its size.
func tooLarge(err error) bool {
	return errors.Is(err, rpctypes.ErrTooManyOps) || errors.Is(err, rpctypes.ErrRequestTooLarge) ||
		errors.Is(err, rpctypes.ErrGRPCTooManyOps) || errors.Is(err, rpctypes.ErrGRPCRequestTooLarge)
}

func opsBytes(ops []clientv3.Op) int {
	n := 0
	for _, op := range ops {
		n += len(op.KeyBytes()) + len(op.ValueBytes())
	}
	return n
}
