package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/gangway/gangway/internal/api"
	"github.com/gangway/gangway/internal/base/fastjson"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Job arrays. An array is one job per index under consecutive IDs: up to
// api.MaxArrayTasks of them, far more than one transaction holds within
// etcd's default limits (128 operations, 1.5 MiB), and yet a server that
// crashes part-way must leave the array whole or not at all (it used to
// leave thousands of a 10,000-task array's tasks and no answer).
//
// So an array is committed first, by one small transaction: its intent,
// which holds the spec once and the indices (10,000 indices are some
// 60 KB), with its submission's idempotency key. The tasks are then
// written from the intent, a chunk per transaction, each chunk with the
// count of tasks written so far; the last chunk deletes the intent. Before
// the commit nothing of the array exists; after it every task will, once:
// a crash between chunks is finished by FinishArrays, which the leader
// runs at its start and every minute, from the count, which every chunk's
// transaction compares (so two finishers never write one chunk twice, and
// a task that finished and was deleted meanwhile is not written again).
//
// The other ways there cost more. Tasks written in chunks under a pending
// marker that is committed last need every reader of jobs (the cache and
// so the controller, lists, reads by ID) to hide the tasks of arrays not
// committed yet, and a sweep that tells a submitter that crashed from a
// slow one. One transaction for the whole array needs etcd started with
// limits far past its defaults (10,000 tasks of a 1 KB spec are 10 MB in
// one raft entry). This way's price: between the commit and the last
// chunk some tasks exist and some do not yet. The submitter's answer waits
// for the last chunk; another reader may see part of an array for that
// long (milliseconds), or, after a crash, until the next leader finishes
// it (seconds).
const arraysPrefix = Root + "arrays/"

func intentKey(array string) string  { return arraysPrefix + array + "/intent" }
func writtenKey(array string) string { return arraysPrefix + array + "/written" }

// arrayIntent is a committed array whose tasks are not all written yet.
type arrayIntent struct {
	Spec        api.JobSpec `json:"spec"`
	Indices     []int       `json:"indices"`
	Limit       int         `json:"limit,omitempty"`
	SubmittedAt time.Time   `json:"submittedAt"`
}

// tasks are the array's jobs, the first with ID first.
func (in *arrayIntent) tasks(first int64) []*api.Job {
	id := strconv.FormatInt(first, 10)
	jobs := make([]*api.Job, len(in.Indices))
	for i, idx := range in.Indices {
		jobs[i] = &api.Job{
			ID:          strconv.FormatInt(first+int64(i), 10),
			Spec:        in.Spec,
			SubmittedAt: in.SubmittedAt,
			Array:       &api.ArrayTask{ID: id, Index: idx, Count: len(in.Indices), Limit: in.Limit},
			Status:      api.JobStatus{Phase: api.JobPending, Reason: api.ReasonNew},
		}
	}
	return jobs
}

// ErrUnfinished: an array was committed, but writing its tasks stopped
// part-way; FinishArray or FinishArrays writes the rest. Its IDs are
// final: the submission succeeded.
var ErrUnfinished = errors.New("store: array committed, tasks not all written yet")

// CreateJobs stores one job per index of the array a, all with spec,
// under consecutive IDs, the first naming the array, and takes claim's
// idempotency key (nil: none) with it: whole, or nothing
// when it fails before its commit (ErrKeyTaken: another submission took
// the key; ErrConflict: an ID is taken). Once committed, its tasks are
// written even if ctx ends; an error wrapping ErrUnfinished comes with the
// jobs, some not stored yet.
func (s *Store) CreateJobs(ctx context.Context, spec api.JobSpec, a api.ArraySpec, now time.Time, claim *Claim) ([]*api.Job, error) {
	n := len(a.Indices)
	if n == 0 {
		return nil, errors.New("store: an array of no tasks")
	}
	first, err := s.jobIDs(ctx, int64(n))
	if err != nil {
		return nil, err
	}
	id := strconv.FormatInt(first, 10)
	if err := s.idsFree(ctx, first, n); err != nil {
		return nil, fmt.Errorf("store: create array %s: %w", id, err)
	}
	in := &arrayIntent{Spec: spec, Indices: a.Indices, Limit: a.Limit, SubmittedAt: now.UTC()}
	b, err := json.Marshal(in)
	if err != nil {
		return nil, fmt.Errorf("store: encode array %s: %w", id, err)
	}
	cmps := []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(intentKey(id)), "=", 0)}
	ops := []clientv3.Op{clientv3.OpPut(intentKey(id), string(b)), clientv3.OpPut(writtenKey(id), "0")}
	var orElse []clientv3.Op
	if claim != nil {
		put, err := claim.forArray(id, n)
		if err != nil {
			return nil, err
		}
		cmps, ops, orElse = append(cmps, claim.cmp()), append(ops, put), []clientv3.Op{claim.taken()}
	}
	tr, err := s.kv.Txn(ctx).If(cmps...).Then(ops...).Else(orElse...).Commit()
	switch {
	case err != nil:
		s.leaseGone(claim, err)
		if tooLarge(err) {
			return nil, fmt.Errorf("store: create array %s: %w (%v)", id, ErrTooLarge, err)
		}
		return nil, fmt.Errorf("store: create array %s: %w", id, err)
	case keyTaken(claim, tr):
		return nil, fmt.Errorf("store: create array %s: %w", id, ErrKeyTaken)
	case !tr.Succeeded:
		return nil, fmt.Errorf("store: create array %s: %w", id, ErrConflict)
	}
	// Committed: the rest is the array's, not the caller's, to stop.
	jobs := in.tasks(first)
	if err := s.writeTasks(context.WithoutCancel(ctx), id, jobs, 0, tr.Header.Revision); err != nil {
		return jobs, fmt.Errorf("store: array %s: %w: %w", id, ErrUnfinished, err)
	}
	return jobs, nil
}

// idsFree checks that no job holds an ID of first..first+n-1, which the
// sequence has just handed out: a store whose jobs are ahead of its
// sequence gets ErrConflict, not jobs overwritten. One ranged read of the
// keys per number of digits.
func (s *Store) idsFree(ctx context.Context, first int64, n int) error {
	last := first + int64(n) - 1
	for lo := first; lo <= last; {
		from := jobKey(strconv.FormatInt(lo, 10))
		hi := last
		if top, err := strconv.ParseInt(strings.Repeat("9", len(from)-len(jobsPrefix)), 10, 64); err == nil {
			hi = min(hi, top)
		}
		resp, err := s.kv.Get(ctx, from, clientv3.WithRange(jobKey(strconv.FormatInt(hi, 10))+"\x00"), clientv3.WithKeysOnly())
		if err != nil {
			return fmt.Errorf("read job IDs %d..%d: %w", lo, hi, err)
		}
		for _, kv := range resp.Kvs {
			if len(kv.Key) == len(from) { // not a longer ID that sorts in between
				return fmt.Errorf("job ID %s already taken: %w", kv.Key[len(jobsPrefix):], ErrConflict)
			}
		}
		lo = hi + 1
	}
	return nil
}

// writeTasks writes the tasks of a committed array from jobs[done], where
// its count of written tasks was at revision rev, to the end, and then
// deletes its intent. Where another finisher got ahead, it goes on from
// that one's count. The jobs it writes get their ModRevision.
func (s *Store) writeTasks(ctx context.Context, array string, jobs []*api.Job, done int, rev int64) error {
	n := len(jobs)
	for done < n {
		if s.failArrayChunk != nil {
			if err := s.failArrayChunk(done); err != nil {
				return err
			}
		}
		// A chunk: as many tasks as the batch limits allow, with the new
		// count, or the intent's deletion for the last.
		ops := make([]clientv3.Op, 0, min(n-done, batchOps-2)+2)
		hi, size := done, 0
		for hi < n && len(ops) < batchOps-2 {
			b, err := json.Marshal(jobs[hi])
			if err != nil {
				return fmt.Errorf("encode job %s: %w", jobs[hi].ID, err)
			}
			if len(ops) > 0 && size+len(b) > batchBytes {
				break
			}
			ops = append(ops, clientv3.OpPut(jobKey(jobs[hi].ID), string(b)))
			size += len(b)
			hi++
		}
		if hi == n {
			ops = append(ops, clientv3.OpDelete(intentKey(array)), clientv3.OpDelete(writtenKey(array)))
		} else {
			ops = append(ops, clientv3.OpPut(writtenKey(array), strconv.Itoa(hi)))
		}
		tr, err := s.kv.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(writtenKey(array)), "=", rev)).
			Then(ops...).Else(clientv3.OpGet(writtenKey(array))).Commit()
		if err != nil {
			return fmt.Errorf("write tasks %s..%s: %w", jobs[done].ID, jobs[hi-1].ID, err)
		}
		if tr.Succeeded {
			for _, j := range jobs[done:hi] {
				j.ModRevision = tr.Header.Revision
			}
			done, rev = hi, tr.Header.Revision
			continue
		}
		// Another finisher wrote it: on from its count, if any is left.
		kvs := tr.Responses[0].GetResponseRange().Kvs
		if len(kvs) == 0 {
			return nil
		}
		if done, err = strconv.Atoi(string(kvs[0].Value)); err != nil || done < 0 || done > n {
			return fmt.Errorf("array %s: corrupt count of written tasks %q", array, kvs[0].Value)
		}
		rev = kvs[0].ModRevision
	}
	return nil
}

// pendingArray is a committed array's intent and count as read.
type pendingArray struct {
	intent *arrayIntent
	done   int
	rev    int64 // of the count; 0 if it has none
	bad    bool  // the count does not decode: left alone
}

// FinishArray writes the tasks array (the ID of its first task) still
// lacks, if it is a committed array not all written; else it does nothing.
func (s *Store) FinishArray(ctx context.Context, array string) error {
	resp, err := s.kv.Get(ctx, arraysPrefix+array+"/", clientv3.WithPrefix())
	if err != nil {
		return fmt.Errorf("store: read array %s: %w", array, err)
	}
	pending, err := readPending(resp.Kvs)
	if err != nil {
		return err
	}
	if p := pending[array]; p != nil {
		return s.finish(ctx, array, p)
	}
	return nil
}

// FinishArrays writes the rest of every committed array submitted before
// before whose tasks are not all written (its submitter crashed, or is
// slow), and returns how many it finished.
func (s *Store) FinishArrays(ctx context.Context, before time.Time) (int, error) {
	resp, err := s.kv.Get(ctx, arraysPrefix, clientv3.WithPrefix())
	if err != nil {
		return 0, fmt.Errorf("store: list unfinished arrays: %w", err)
	}
	pending, err := readPending(resp.Kvs)
	n := 0
	var errs []error
	if err != nil {
		errs = append(errs, err)
	}
	for id, p := range pending {
		if !p.intent.SubmittedAt.Before(before) {
			continue
		}
		if err := s.finish(ctx, id, p); err != nil {
			errs = append(errs, err)
			continue
		}
		n++
	}
	return n, errors.Join(errs...)
}

func (s *Store) finish(ctx context.Context, array string, p *pendingArray) error {
	first, err := strconv.ParseInt(array, 10, 64)
	if err != nil {
		return fmt.Errorf("store: array id %q: %w", array, err)
	}
	if err := s.writeTasks(ctx, array, p.intent.tasks(first), p.done, p.rev); err != nil {
		return fmt.Errorf("store: finish array %s: %w", array, err)
	}
	return nil
}

// readPending decodes the intents and counts under arraysPrefix, by
// array; an intent that does not decode is an error, the rest are read.
func readPending(kvs []*mvccpb.KeyValue) (map[string]*pendingArray, error) {
	out := map[string]*pendingArray{}
	at := func(id string) *pendingArray {
		if out[id] == nil {
			out[id] = &pendingArray{}
		}
		return out[id]
	}
	var errs []error
	for _, kv := range kvs {
		id, what, ok := strings.Cut(string(kv.Key[len(arraysPrefix):]), "/")
		if !ok {
			continue
		}
		switch what {
		case "intent":
			var in arrayIntent
			if err := fastjson.Unmarshal(kv.Value, &in); err != nil {
				errs = append(errs, fmt.Errorf("store: decode %s: %w", kv.Key, err))
				continue
			}
			at(id).intent = &in
		case "written":
			p := at(id)
			p.rev = kv.ModRevision
			var err error
			if p.done, err = strconv.Atoi(string(kv.Value)); err != nil {
				p.bad = true
				errs = append(errs, fmt.Errorf("store: array %s: corrupt count of written tasks %q", id, kv.Value))
			}
		}
	}
	for id, p := range out {
		if p.intent == nil || p.bad || p.done < 0 || p.done > len(p.intent.Indices) {
			delete(out, id)
		}
	}
	return out, errors.Join(errs...)
}
