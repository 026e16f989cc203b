package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"time"

	"github.com/gangway/gangway/internal/base/fastjson"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Idempotency keys. A submission that carries one (the Idempotency-Key
// header of POST /v1/jobs) takes it in the very transaction that creates
// its job (JobWrite.WithClaim, CreateJobAs) or commits its array
// (CreateJobs), on the condition that nobody took it before: a crash
// leaves the job and the key's record together or neither, and of two
// submissions with one key only the first to commit creates anything; the
// other gets ErrKeyTaken and answers what the record says (Claimed).
//
// Records expire with etcd leases, not with a sweep. A sweep would read
// every record to find the old ones (their age is in their value; a
// second, time-ordered key per record would double the writes), where a
// lease deletes its keys inside etcd and reads nothing. One lease serves
// every key taken in an hour (keyLeaseSpan) and lives KeyTTL beyond it, so
// a key is kept from KeyTTL to KeyTTL+keyLeaseSpan, at one LeaseGrant an
// hour rather than one per submission. But etcd gives every lease its
// full TTL again whenever a member becomes leader (unless the alpha lease
// checkpoints are on), so a control plane restarted daily would never see
// one expire: each lease has a record of when it was granted, attached to
// it under keyLeasesPrefix, and ExpireKeys, which the leader runs now and
// then, revokes every lease whose record is older than its TTL.
const (
	// KeyTTL is how long a key is remembered at least.
	KeyTTL       = 24 * time.Hour
	keyLeaseSpan = time.Hour
	keysPrefix   = Root + "idem/"
	// keyLeasesPrefix + the lease's ID in hex: when it was granted.
	keyLeasesPrefix = Root + "idem-leases/"
)

// ErrKeyTaken: the submission's idempotency key was taken by another one
// (a retry of the same request, or a client's mistake); Claimed says what
// that one created.
var ErrKeyTaken = errors.New("store: idempotency key already taken")

// KeyRecord is what a submission stored with its key.
type KeyRecord struct {
	// Hash identifies the request (its body, hashed by the server): the
	// same key with another request is a client's mistake, not a retry.
	Hash string `json:"hash"`
	// Status is the HTTP status the submission answered.
	Status int `json:"status"`
	// Job is the job it created, or Array the first of Count array tasks.
	Job   string `json:"job,omitempty"`
	Array string `json:"array,omitempty"`
	Count int    `json:"count,omitempty"`
	// At is when it was taken.
	At time.Time `json:"at"`
}

// Claim is an idempotency key a submission is about to take, made by
// ClaimKey; the write that creates the submission's job or array takes it.
type Claim struct {
	key   string
	lease clientv3.LeaseID
	rec   KeyRecord
}

// keyPath is where owner's key is kept: both escaped, so that any
// printable key is one path segment.
func keyPath(owner, key string) string {
	return keysPrefix + url.PathEscape(owner) + "/" + url.PathEscape(key)
}

// ClaimKey prepares owner's key for the submission's write, which takes
// it: hash identifies the request, status is what the submission answers.
// It writes nothing but, once an hour, the lease keys are kept under.
func (s *Store) ClaimKey(ctx context.Context, owner, key, hash string, status int, now time.Time) (*Claim, error) {
	lease, err := s.keyLeases.get(ctx, s, now)
	if err != nil {
		return nil, err
	}
	return &Claim{key: keyPath(owner, key), lease: lease, rec: KeyRecord{Hash: hash, Status: status, At: now.UTC()}}, nil
}

// leaseGone drops the claim's lease if err says etcd no longer has it
// (revoked), so that the next claim gets a new one.
func (s *Store) leaseGone(c *Claim, err error) {
	if c != nil {
		s.keyLeases.gone(c.lease, err)
	}
}

// cmp is the condition that nobody took the key yet.
func (c *Claim) cmp() clientv3.Cmp { return clientv3.Compare(clientv3.CreateRevision(c.key), "=", 0) }

// taken is read by a transaction that failed its conditions: whether the
// key was one of them.
func (c *Claim) taken() clientv3.Op { return clientv3.OpGet(c.key, clientv3.WithCountOnly()) }

// put stores the record of what the submission created.
func (c *Claim) put(rec KeyRecord) (clientv3.Op, error) {
	b, err := json.Marshal(rec)
	if err != nil {
		return clientv3.Op{}, fmt.Errorf("store: encode idempotency record: %w", err)
	}
	return clientv3.OpPut(c.key, string(b), clientv3.WithLease(c.lease)), nil
}

func (c *Claim) forJob(id string) (clientv3.Op, error) {
	r := c.rec
	r.Job = id
	return c.put(r)
}

func (c *Claim) forArray(id string, n int) (clientv3.Op, error) {
	r := c.rec
	r.Array, r.Count = id, n
	return c.put(r)
}

// keyTaken reads, from the answer of a transaction that failed and read
// c.taken() first in its else branch, whether the key was taken.
func keyTaken(c *Claim, tr *clientv3.TxnResponse) bool {
	if c == nil || tr.Succeeded || len(tr.Responses) == 0 {
		return false
	}
	r := tr.Responses[0].GetResponseRange()
	return r != nil && r.Count > 0
}

// Claimed is the record owner's key holds: ErrNotFound when none holds it
// (never taken, or expired).
func (s *Store) Claimed(ctx context.Context, owner, key string) (*KeyRecord, error) {
	p := keyPath(owner, key)
	resp, err := s.kv.Get(ctx, p)
	if err != nil {
		return nil, fmt.Errorf("store: read idempotency key: %w", err)
	}
	if len(resp.Kvs) == 0 {
		return nil, fmt.Errorf("idempotency key %q: %w", key, ErrNotFound)
	}
	var r KeyRecord
	if err := fastjson.Unmarshal(resp.Kvs[0].Value, &r); err != nil {
		return nil, fmt.Errorf("store: decode %s: %w", p, err)
	}
	return &r, nil
}

// ExpireKeys revokes the leases of idempotency keys granted longer ago
// than they may live (keys etcd kept past their time because a new leader
// renewed their lease), and with them their keys. It returns how many it
// revoked.
func (s *Store) ExpireKeys(ctx context.Context, now time.Time) (int, error) {
	return s.keyLeases.expire(ctx, s, now)
}
