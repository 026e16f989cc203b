package store

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/gangway/gangway/internal/api"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// JobWrite is one job's conditional write: the job, if it is still at the
// revision it was read at, with the keys that must change with it. Make
// one with UpdateJobWrite, StartAttemptWrite or StopAttemptWrite and
// commit it, alone or with others, with Commit.
type JobWrite struct {
	job   *api.Job
	ops   []clientv3.Op
	claim *Claim // taken with the job, nil for none
	err   error  // from building it
}

// Job is the job the write is for.
func (w JobWrite) Job() *api.Job { return w.job }

// UpdateJobWrite writes j alone.
func (s *Store) UpdateJobWrite(j *api.Job) JobWrite { return JobWrite{job: j} }

// StartAttemptWrite writes j (whose newest attempt is the new one) with
// the attempt's assignments.
func (s *Store) StartAttemptWrite(j *api.Job, asg []api.Assignment) JobWrite {
	w := JobWrite{job: j, ops: make([]clientv3.Op, 0, len(asg))}
	for i := range asg {
		b, err := json.Marshal(&asg[i])
		if err != nil {
			w.err = fmt.Errorf("store: encode assignment: %w", err)
			return w
		}
		w.ops = append(w.ops, clientv3.OpPut(assignKey(&asg[i]), string(b)))
	}
	return w
}

// StopAttemptWrite writes j and removes every assignment of the given
// attempt on the given nodes. The revision it commits at is the stop
// revision: agents that acknowledge it have killed the attempt's ranks.
func (s *Store) StopAttemptWrite(j *api.Job, attempt int, nodes []string) JobWrite {
	w := JobWrite{job: j, ops: make([]clientv3.Op, 0, len(nodes))}
	for _, n := range nodes {
		p := assignNodePrefix(n) + j.ID + "/" + strconv.Itoa(attempt) + "/"
		w.ops = append(w.ops, clientv3.OpDelete(p, clientv3.WithPrefix()))
	}
	return w
}

// WithRankStatuses adds rank statuses to the write, stored in its
// transaction: a pass that acts on reports it was handed (an attempt's
// last exit) stores them with what it decided.
func (w JobWrite) WithRankStatuses(rs []api.RankStatus) JobWrite {
	ops := make([]clientv3.Op, len(w.ops), len(w.ops)+len(rs))
	copy(ops, w.ops)
	for i := range rs {
		b, err := json.Marshal(&rs[i])
		if err != nil {
			w.err = fmt.Errorf("store: encode rank status: %w", err)
			return w
		}
		ops = append(ops, clientv3.OpPut(rankKey(api.TaskKey(rs[i].JobID, rs[i].Attempt, rs[i].Rank)), string(b)))
	}
	w.ops = ops
	return w
}

// WithClaim makes the write, which creates its job, also take an
// idempotency key (ClaimKey) for it: in the same transaction, and only if
// no submission took the key first (else ErrKeyTaken, and nothing is
// written).
func (w JobWrite) WithClaim(c *Claim) JobWrite {
	w.claim = c
	return w
}

// Batch limits: what one shared transaction may hold. 128 operations is
// also an external etcd's default limit; a single write bigger than this
// goes alone.
const (
	batchOps   = 128
	batchBytes = 1 << 20
)

// Commit writes ws in as few transactions as the batch limits allow, each
// all-or-nothing over its writes' compares. When one of a transaction's
// jobs changed since read, the transaction fails as a whole and its writes
// are retried one by one, so that only the stale ones fail (ErrConflict).
// revs[i] is the revision write i committed at (its job's ModRevision is
// set to it); errs[i] is why it did not.
func (s *Store) Commit(ctx context.Context, ws []JobWrite) (revs []int64, errs []error) {
	revs, errs = make([]int64, len(ws)), make([]error, len(ws))
	puts := make([]clientv3.Op, len(ws))
	var claimPuts []clientv3.Op // by write, for those with a claim
	for i, w := range ws {
		if w.err != nil {
			errs[i] = w.err
			continue
		}
		b, err := json.Marshal(w.job)
		if err != nil {
			errs[i] = fmt.Errorf("store: encode job %s: %w", w.job.ID, err)
			continue
		}
		puts[i] = clientv3.OpPut(jobKey(w.job.ID), string(b))
		if w.claim != nil {
			if claimPuts == nil {
				claimPuts = make([]clientv3.Op, len(ws))
			}
			if claimPuts[i], err = w.claim.forJob(w.job.ID); err != nil {
				errs[i] = err
			}
		}
	}
	ops := func(i int) []clientv3.Op { // write i's operations
		out := make([]clientv3.Op, 0, 2+len(ws[i].ops))
		out = append(out, puts[i])
		if ws[i].claim != nil {
			out = append(out, claimPuts[i])
		}
		return append(out, ws[i].ops...)
	}
	// group: the indices of the writes in the transaction being built;
	// inGroup: their jobs' IDs and their claims' keys.
	var group []int
	inGroup := map[string]bool{}
	nops, nbytes := 0, 0
	flush := func() {
		switch len(group) {
		case 0:
		case 1:
			i := group[0]
			revs[i], errs[i] = s.commitEncoded(ctx, ws[i], ops(i))
		default:
			s.commitGroup(ctx, ws, ops, group, revs, errs)
		}
		group, nops, nbytes = group[:0], 0, 0
		clear(inGroup)
	}
	for i, w := range ws {
		if errs[i] != nil {
			continue
		}
		n, b := 1+len(w.ops), len(puts[i].ValueBytes())+opsBytes(w.ops)
		// A job or a key twice in one transaction would be a duplicate
		// key (two submissions with one idempotency key in one pass).
		dup := inGroup[w.job.ID]
		if w.claim != nil {
			n, b = n+1, b+len(claimPuts[i].ValueBytes())
			dup = dup || inGroup[w.claim.key]
		}
		if len(group) > 0 && (nops+n > batchOps || nbytes+b > batchBytes || dup) {
			flush()
		}
		group = append(group, i)
		inGroup[w.job.ID] = true
		if w.claim != nil {
			inGroup[w.claim.key] = true
		}
		nops, nbytes = nops+n, nbytes+b
	}
	flush()
	return revs, errs
}

// commitGroup commits several writes in one transaction, falling back to
// one transaction each when any compare fails or etcd refuses the size.
func (s *Store) commitGroup(ctx context.Context, ws []JobWrite, opsOf func(int) []clientv3.Op, group []int, revs []int64, errs []error) {
	cmps := make([]clientv3.Cmp, 0, len(group))
	var ops []clientv3.Op
	for _, i := range group {
		cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(jobKey(ws[i].job.ID)), "=", ws[i].job.ModRevision))
		if c := ws[i].claim; c != nil {
			cmps = append(cmps, c.cmp())
		}
		ops = append(ops, opsOf(i)...)
	}
	tr, err := s.kv.Txn(ctx).If(cmps...).Then(ops...).Commit()
	if err == nil && tr.Succeeded {
		for _, i := range group {
			ws[i].job.ModRevision = tr.Header.Revision
			revs[i] = tr.Header.Revision
		}
		return
	}
	if err != nil && !tooLarge(err) {
		for _, i := range group {
			s.leaseGone(ws[i].claim, err)
			errs[i] = fmt.Errorf("store: update job %s: %w", ws[i].job.ID, err)
		}
		return
	}
	for _, i := range group {
		revs[i], errs[i] = s.commitEncoded(ctx, ws[i], opsOf(i))
	}
}

// commitOne commits one write in its own transaction.
func (s *Store) commitOne(ctx context.Context, w JobWrite) (int64, error) {
	revs, errs := s.Commit(ctx, []JobWrite{w})
	return revs[0], errs[0]
}

// commitEncoded commits one write, whose operations are ops, in its own
// transaction.
func (s *Store) commitEncoded(ctx context.Context, w JobWrite, ops []clientv3.Op) (int64, error) {
	j := w.job
	cmps := []clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(jobKey(j.ID)), "=", j.ModRevision)}
	var orElse []clientv3.Op
	if c := w.claim; c != nil {
		cmps, orElse = append(cmps, c.cmp()), []clientv3.Op{c.taken()}
	}
	tr, err := s.kv.Txn(ctx).If(cmps...).Then(ops...).Else(orElse...).Commit()
	if err != nil {
		s.leaseGone(w.claim, err)
		if tooLarge(err) {
			return 0, fmt.Errorf("store: update job %s: %d keys, %d bytes in one transaction: %w (%v)", j.ID, len(ops), opsBytes(ops), ErrTooLarge, err)
		}
		return 0, fmt.Errorf("store: update job %s: %w", j.ID, err)
	}
	if keyTaken(w.claim, tr) {
		return 0, fmt.Errorf("job %s: %w", j.ID, ErrKeyTaken)
	}
	if !tr.Succeeded {
		return 0, fmt.Errorf("job %s: %w", j.ID, ErrConflict)
	}
	j.ModRevision = tr.Header.Revision
	return tr.Header.Revision, nil
}
