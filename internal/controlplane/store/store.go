// Package store is gangway's typed persistence on etcd: jobs, nodes,
// assignments, rank statuses, checkpoints and progress, with multi-key
// changes in single transactions and a watch-fed cache for the controllers.
//
// It imports internal/api and etcd's client and server packages only.
package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/gangway/gangway/internal/api"
	"github.com/gangway/gangway/internal/base/fastjson"
	"go.etcd.io/etcd/api/v3/mvccpb"
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
	c *clientv3.Client

	idMu   sync.Mutex // guards idNext and idEnd
	idNext int64      // next job ID of the reserved block
	idEnd  int64      // first ID past the block
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
		resp, err := s.c.Get(ctx, seqJobs)
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
		tr, err := s.c.Txn(ctx).If(cmp).Then(clientv3.OpPut(seqJobs, strconv.FormatInt(cur+size, 10))).Commit()
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

// New wraps an etcd client. The caller keeps ownership of c.
func New(c *clientv3.Client) *Store { return &Store{c: c} }

// Client exposes the underlying client (leader election uses it).
func (s *Store) Client() *clientv3.Client { return s.c }

// Prefixes callers may watch for blocking queries.
const (
	JobsPrefix  = jobsPrefix
	NodesPrefix = nodesPrefix
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

// CreateJob stores a new job with the next sequential ID, in Pending.
func (s *Store) CreateJob(ctx context.Context, spec api.JobSpec, now time.Time) (*api.Job, error) {
	for {
		j, err := s.NewJob(ctx, spec, now)
		if err != nil {
			return nil, err
		}
		switch err := s.CreateJobAs(ctx, j); {
		case err == nil:
			return j, nil
		case !errors.Is(err, ErrConflict):
			return nil, err
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
	}
}

// NewJob reserves a job ID and returns the job as CreateJob would store
// it, not stored yet (ModRevision 0). A write of a job at ModRevision 0
// (CreateJobAs, or any JobWrite through Commit) succeeds only while no
// job with its ID exists: it creates the job.
func (s *Store) NewJob(ctx context.Context, spec api.JobSpec, now time.Time) (*api.Job, error) {
	next, err := s.jobIDs(ctx, 1)
	if err != nil {
		return nil, err
	}
	return &api.Job{
		ID:          strconv.FormatInt(next, 10),
		Spec:        spec,
		SubmittedAt: now.UTC(),
		Status:      api.JobStatus{Phase: api.JobPending, Reason: "waiting for the scheduler"},
	}, nil
}

// CreateJobAs stores j, made by NewJob, unless a job with its ID exists
// (ErrConflict). On success j.ModRevision is set.
func (s *Store) CreateJobAs(ctx context.Context, j *api.Job) error {
	b, err := json.Marshal(j)
	if err != nil {
		return fmt.Errorf("store: encode job: %w", err)
	}
	tr, err := s.c.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(jobKey(j.ID)), "=", 0)).
		Then(clientv3.OpPut(jobKey(j.ID), string(b))).Commit()
	if err != nil {
		return fmt.Errorf("store: create job: %w", err)
	}
	if !tr.Succeeded {
		return fmt.Errorf("store: create job %s: %w", j.ID, ErrConflict)
	}
	j.ModRevision = tr.Header.Revision
	return nil
}

// CreateJobs stores one job per index of the array a, all with spec,
// under consecutive IDs; the first is the array's ID. They go batchOps to
// a transaction; if one fails, the tasks already stored are deleted again
// and the error returned, so an array is stored whole or not at all
// (short of the store failing during the clean-up too).
func (s *Store) CreateJobs(ctx context.Context, spec api.JobSpec, a api.ArraySpec, now time.Time) ([]*api.Job, error) {
	n := len(a.Indices)
	if n == 0 {
		return nil, errors.New("store: an array of no tasks")
	}
	first, err := s.jobIDs(ctx, int64(n))
	if err != nil {
		return nil, err
	}
	arrayID := strconv.FormatInt(first, 10)
	jobs := make([]*api.Job, n)
	for i, idx := range a.Indices {
		jobs[i] = &api.Job{
			ID:          strconv.FormatInt(first+int64(i), 10),
			Spec:        spec,
			SubmittedAt: now.UTC(),
			Array:       &api.ArrayTask{ID: arrayID, Index: idx, Count: n, Limit: a.Limit},
			Status:      api.JobStatus{Phase: api.JobPending, Reason: "waiting for the scheduler"},
		}
	}
	var written []string
	undo := func(cause error) error {
		for _, id := range written {
			_, _ = s.c.Delete(context.WithoutCancel(ctx), jobKey(id))
		}
		return cause
	}
	for lo := 0; lo < n; lo += batchOps {
		hi := min(lo+batchOps, n)
		cmps := make([]clientv3.Cmp, 0, hi-lo)
		ops := make([]clientv3.Op, 0, hi-lo)
		for _, j := range jobs[lo:hi] {
			b, err := json.Marshal(j)
			if err != nil {
				return nil, undo(fmt.Errorf("store: encode job: %w", err))
			}
			cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(jobKey(j.ID)), "=", 0))
			ops = append(ops, clientv3.OpPut(jobKey(j.ID), string(b)))
		}
		tr, err := s.c.Txn(ctx).If(cmps...).Then(ops...).Commit()
		if err != nil {
			return nil, undo(fmt.Errorf("store: create array %s: %w", arrayID, err))
		}
		if !tr.Succeeded {
			return nil, undo(fmt.Errorf("store: create array %s: job IDs %s.. already taken: %w", arrayID, jobs[lo].ID, ErrConflict))
		}
		for _, j := range jobs[lo:hi] {
			j.ModRevision = tr.Header.Revision
			written = append(written, j.ID)
		}
	}
	return jobs, nil
}

// Job reads one job.
func (s *Store) Job(ctx context.Context, id string) (*api.Job, error) {
	resp, err := s.c.Get(ctx, jobKey(id))
	if err != nil {
		return nil, fmt.Errorf("store: get job %s: %w", id, err)
	}
	if len(resp.Kvs) == 0 {
		return nil, fmt.Errorf("job %s: %w", id, ErrNotFound)
	}
	var j api.Job
	if err := fastjson.Unmarshal(resp.Kvs[0].Value, &j); err != nil {
		return nil, fmt.Errorf("store: decode job %s: %w", id, err)
	}
	j.ModRevision = resp.Kvs[0].ModRevision
	return &j, nil
}

// Jobs lists every job, oldest first, and the store revision it read at.
func (s *Store) Jobs(ctx context.Context) ([]*api.Job, int64, error) {
	resp, err := s.c.Get(ctx, jobsPrefix, clientv3.WithPrefix())
	if err != nil {
		return nil, 0, fmt.Errorf("store: list jobs: %w", err)
	}
	out, err := decodeJobs(resp.Kvs)
	return out, resp.Header.Revision, err
}

// RecentJobs lists the n jobs created last, oldest first, and the store
// revision it read at: one ranged read of n keys, however many jobs the
// store keeps.
func (s *Store) RecentJobs(ctx context.Context, n int) ([]*api.Job, int64, error) {
	resp, err := s.c.Get(ctx, jobsPrefix, clientv3.WithPrefix(),
		clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortDescend), clientv3.WithLimit(int64(n)))
	if err != nil {
		return nil, 0, fmt.Errorf("store: list recent jobs: %w", err)
	}
	out, err := decodeJobs(resp.Kvs)
	return out, resp.Header.Revision, err
}

// decodeJobs decodes jobs into ID order.
func decodeJobs(kvs []*mvccpb.KeyValue) ([]*api.Job, error) {
	out := make([]*api.Job, 0, len(kvs))
	for _, kv := range kvs {
		var j api.Job
		if err := fastjson.Unmarshal(kv.Value, &j); err != nil {
			return nil, fmt.Errorf("store: decode %s: %w", kv.Key, err)
		}
		j.ModRevision = kv.ModRevision
		out = append(out, &j)
	}
	SortJobs(out)
	return out, nil
}

// SortJobs orders jobs by numeric ID (submission order).
func SortJobs(js []*api.Job) {
	sort.Slice(js, func(a, b int) bool { return jobLess(js[a].ID, js[b].ID) })
}

func jobLess(a, b string) bool {
	if len(a) != len(b) {
		return len(a) < len(b)
	}
	return a < b
}

// UpdateJob writes j if it is unchanged since j.ModRevision was read;
// otherwise ErrConflict. On success j.ModRevision is the new revision.
func (s *Store) UpdateJob(ctx context.Context, j *api.Job) error {
	_, err := s.commitOne(ctx, s.UpdateJobWrite(j))
	return err
}

// ModifyJob applies fn to the newest copy of a job and writes it,
// retrying on conflicts. fn may be called more than once.
func (s *Store) ModifyJob(ctx context.Context, id string, fn func(*api.Job) error) (*api.Job, error) {
	for {
		j, err := s.Job(ctx, id)
		if err != nil {
			return nil, err
		}
		if err := fn(j); err != nil {
			return nil, err
		}
		err = s.UpdateJob(ctx, j)
		if err == nil {
			return j, nil
		}
		if !errors.Is(err, ErrConflict) {
			return nil, err
		}
	}
}

// StartAttempt writes j (whose newest attempt is the new one) and its
// assignments in one transaction, if j is unchanged since read.
func (s *Store) StartAttempt(ctx context.Context, j *api.Job, asg []api.Assignment) (int64, error) {
	return s.commitOne(ctx, s.StartAttemptWrite(j, asg))
}

// StopAttempt writes j and removes every assignment of the given attempt
// on the given nodes, in one transaction. It returns the revision of that
// transaction: agents that acknowledge it have killed the attempt's ranks.
func (s *Store) StopAttempt(ctx context.Context, j *api.Job, attempt int, nodes []string) (int64, error) {
	return s.commitOne(ctx, s.StopAttemptWrite(j, attempt, nodes))
}

// Assignments lists what a node should run, at the revision read.
func (s *Store) Assignments(ctx context.Context, node string) (api.AssignmentList, error) {
	resp, err := s.c.Get(ctx, assignNodePrefix(node), clientv3.WithPrefix())
	if err != nil {
		return api.AssignmentList{}, fmt.Errorf("store: list assignments of %s: %w", node, err)
	}
	out := api.AssignmentList{Revision: resp.Header.Revision, Assignments: make([]api.Assignment, 0, len(resp.Kvs))}
	for _, kv := range resp.Kvs {
		var a api.Assignment
		// encoding/json: it decodes the env map faster.
		if err := json.Unmarshal(kv.Value, &a); err != nil {
			return api.AssignmentList{}, fmt.Errorf("store: decode %s: %w", kv.Key, err)
		}
		out.Assignments = append(out.Assignments, a)
	}
	return out, nil
}

// AssignmentsPrefix is the key prefix a node's assignments live under, for
// WaitChange.
func AssignmentsPrefix(node string) string { return assignNodePrefix(node) }

// Node reads one node.
func (s *Store) Node(ctx context.Context, name string) (*api.Node, error) {
	resp, err := s.c.Get(ctx, nodeKey(name))
	if err != nil {
		return nil, fmt.Errorf("store: get node %s: %w", name, err)
	}
	if len(resp.Kvs) == 0 {
		return nil, fmt.Errorf("node %s: %w", name, ErrNotFound)
	}
	var n api.Node
	if err := fastjson.Unmarshal(resp.Kvs[0].Value, &n); err != nil {
		return nil, fmt.Errorf("store: decode node %s: %w", name, err)
	}
	n.ModRevision = resp.Kvs[0].ModRevision
	return &n, nil
}

// Nodes lists every node by name.
func (s *Store) Nodes(ctx context.Context) ([]*api.Node, int64, error) {
	resp, err := s.c.Get(ctx, nodesPrefix, clientv3.WithPrefix())
	if err != nil {
		return nil, 0, fmt.Errorf("store: list nodes: %w", err)
	}
	out := make([]*api.Node, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		var n api.Node
		if err := fastjson.Unmarshal(kv.Value, &n); err != nil {
			return nil, 0, fmt.Errorf("store: decode %s: %w", kv.Key, err)
		}
		n.ModRevision = kv.ModRevision
		out = append(out, &n)
	}
	return out, resp.Header.Revision, nil
}

// PutNode writes n. With n.ModRevision > 0 the write is a compare-and-swap;
// with 0 it creates the node and fails with ErrConflict if it exists.
func (s *Store) PutNode(ctx context.Context, n *api.Node) error {
	b, err := json.Marshal(n)
	if err != nil {
		return fmt.Errorf("store: encode node: %w", err)
	}
	k := nodeKey(n.Name)
	tr, err := s.c.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(k), "=", n.ModRevision)).
		Then(clientv3.OpPut(k, string(b))).Commit()
	if err != nil {
		return fmt.Errorf("store: put node %s: %w", n.Name, err)
	}
	if !tr.Succeeded {
		return fmt.Errorf("node %s: %w", n.Name, ErrConflict)
	}
	n.ModRevision = tr.Header.Revision
	return nil
}

// ModifyNode applies fn to the newest copy of a node and writes it,
// retrying on conflicts.
func (s *Store) ModifyNode(ctx context.Context, name string, fn func(*api.Node) error) (*api.Node, error) {
	for {
		n, err := s.Node(ctx, name)
		if err != nil {
			return nil, err
		}
		if err := fn(n); err != nil {
			return nil, err
		}
		err = s.PutNode(ctx, n)
		if err == nil {
			return n, nil
		}
		if !errors.Is(err, ErrConflict) {
			return nil, err
		}
	}
}

// PutRankStatuses writes rank statuses, batchOps to a transaction; of
// several for one rank the last wins.
func (s *Store) PutRankStatuses(ctx context.Context, rs []api.RankStatus) error {
	if len(rs) == 0 {
		return nil
	}
	idx := make(map[string]int, len(rs))
	ops := make([]clientv3.Op, 0, len(rs))
	for i := range rs {
		b, err := json.Marshal(&rs[i])
		if err != nil {
			return fmt.Errorf("store: encode rank status: %w", err)
		}
		k := rankKey(api.TaskKey(rs[i].JobID, rs[i].Attempt, rs[i].Rank))
		op := clientv3.OpPut(k, string(b))
		if j, ok := idx[k]; ok {
			ops[j] = op // a key twice in one transaction is refused
			continue
		}
		idx[k] = len(ops)
		ops = append(ops, op)
	}
	for len(ops) > 0 {
		n := min(len(ops), batchOps)
		if _, err := s.c.Txn(ctx).Then(ops[:n]...).Commit(); err != nil {
			return fmt.Errorf("store: put rank statuses: %w", err)
		}
		ops = ops[n:]
	}
	return nil
}

// RankStatuses lists the statuses of a job's ranks, all attempts, in
// attempt then rank order.
func (s *Store) RankStatuses(ctx context.Context, job string) ([]api.RankStatus, error) {
	resp, err := s.c.Get(ctx, ranksPrefix+job+"/", clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("store: list ranks of %s: %w", job, err)
	}
	return decodeRanks(resp.Kvs)
}

// decodeRanks decodes rank statuses into attempt then rank order.
func decodeRanks(kvs []*mvccpb.KeyValue) ([]api.RankStatus, error) {
	out := make([]api.RankStatus, 0, len(kvs))
	for _, kv := range kvs {
		var r api.RankStatus
		if err := fastjson.Unmarshal(kv.Value, &r); err != nil {
			return nil, fmt.Errorf("store: decode %s: %w", kv.Key, err)
		}
		out = append(out, r)
	}
	sort.Slice(out, func(a, b int) bool {
		if out[a].Attempt != out[b].Attempt {
			return out[a].Attempt < out[b].Attempt
		}
		return out[a].Rank < out[b].Rank
	})
	return out, nil
}

// PutCheckpoint records a committed checkpoint. The first report of a step
// wins: a later attempt's agent that rediscovers an old checkpoint does not
// rewrite who made it and when.
func (s *Store) PutCheckpoint(ctx context.Context, job string, c api.Checkpoint) error {
	b, err := json.Marshal(&c)
	if err != nil {
		return fmt.Errorf("store: encode checkpoint: %w", err)
	}
	k := ckptKey(job, c.Step)
	if _, err := s.c.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(k), "=", 0)).Then(clientv3.OpPut(k, string(b))).Commit(); err != nil {
		return fmt.Errorf("store: put checkpoint of %s: %w", job, err)
	}
	return nil
}

// Checkpoints lists a job's committed checkpoints, oldest step first.
func (s *Store) Checkpoints(ctx context.Context, job string) ([]api.Checkpoint, error) {
	resp, err := s.c.Get(ctx, ckptPrefix+job+"/", clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("store: list checkpoints of %s: %w", job, err)
	}
	return decodeCheckpoints(resp.Kvs)
}

// decodeCheckpoints decodes checkpoint records, in key (step) order.
func decodeCheckpoints(kvs []*mvccpb.KeyValue) ([]api.Checkpoint, error) {
	out := make([]api.Checkpoint, 0, len(kvs))
	for _, kv := range kvs {
		var c api.Checkpoint
		if err := fastjson.Unmarshal(kv.Value, &c); err != nil {
			return nil, fmt.Errorf("store: decode %s: %w", kv.Key, err)
		}
		out = append(out, c)
	}
	return out, nil
}

// LatestCheckpoint returns the checkpoint with the highest step, or nil.
func (s *Store) LatestCheckpoint(ctx context.Context, job string) (*api.Checkpoint, error) {
	resp, err := s.c.Get(ctx, ckptPrefix+job+"/", clientv3.WithPrefix(),
		clientv3.WithSort(clientv3.SortByKey, clientv3.SortDescend), clientv3.WithLimit(1))
	if err != nil {
		return nil, fmt.Errorf("store: newest checkpoint of %s: %w", job, err)
	}
	if len(resp.Kvs) == 0 {
		return nil, nil
	}
	var c api.Checkpoint
	if err := fastjson.Unmarshal(resp.Kvs[0].Value, &c); err != nil {
		return nil, fmt.Errorf("store: decode checkpoint: %w", err)
	}
	return &c, nil
}

// AppendProgress adds lines to a job's progress log, keeping the newest
// api.MaxRecentProgress.
func (s *Store) AppendProgress(ctx context.Context, job string, lines []api.Progress) error {
	if len(lines) == 0 {
		return nil
	}
	k := progKey(job)
	for {
		resp, err := s.c.Get(ctx, k)
		if err != nil {
			return fmt.Errorf("store: read progress of %s: %w", job, err)
		}
		var log api.ProgressLog
		var rev int64
		if len(resp.Kvs) > 0 {
			rev = resp.Kvs[0].ModRevision
			if err := fastjson.Unmarshal(resp.Kvs[0].Value, &log); err != nil {
				return fmt.Errorf("store: decode progress of %s: %w", job, err)
			}
		}
		log.Recent = append(log.Recent, lines...)
		if n := len(log.Recent) - api.MaxRecentProgress; n > 0 {
			log.Recent = append([]api.Progress(nil), log.Recent[n:]...)
		}
		log.Latest = lines[len(lines)-1]
		b, err := json.Marshal(&log)
		if err != nil {
			return fmt.Errorf("store: encode progress: %w", err)
		}
		tr, err := s.c.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(k), "=", rev)).Then(clientv3.OpPut(k, string(b))).Commit()
		if err != nil {
			return fmt.Errorf("store: write progress of %s: %w", job, err)
		}
		if tr.Succeeded {
			return nil
		}
	}
}

// Progress reads a job's progress log, or nil if it has none.
func (s *Store) Progress(ctx context.Context, job string) (*api.ProgressLog, error) {
	resp, err := s.c.Get(ctx, progKey(job))
	if err != nil {
		return nil, fmt.Errorf("store: read progress of %s: %w", job, err)
	}
	return decodeProgress(job, resp.Kvs)
}

// decodeProgress decodes a job's progress key, nil if there is none.
func decodeProgress(job string, kvs []*mvccpb.KeyValue) (*api.ProgressLog, error) {
	if len(kvs) == 0 {
		return nil, nil
	}
	var log api.ProgressLog
	if err := fastjson.Unmarshal(kvs[0].Value, &log); err != nil {
		return nil, fmt.Errorf("store: decode progress of %s: %w", job, err)
	}
	return &log, nil
}

// Revision returns the store's current revision.
func (s *Store) Revision(ctx context.Context) (int64, error) {
	resp, err := s.c.Get(ctx, seqJobs)
	if err != nil {
		return 0, fmt.Errorf("store: read revision: %w", err)
	}
	return resp.Header.Revision, nil
}

// WaitChange blocks until a key under prefix changes after revision
// after, ctx ends, or wait passes. It returns the revision of the change, or
// after if none happened. A compacted revision is reported as a change.
func (s *Store) WaitChange(ctx context.Context, prefix string, after int64, wait time.Duration) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	wc := s.c.Watch(clientv3.WithRequireLeader(ctx), prefix, clientv3.WithPrefix(), clientv3.WithRev(after+1))
	for {
		select {
		case <-ctx.Done():
			return after, nil
		case wr, ok := <-wc:
			if !ok {
				return after, nil
			}
			if wr.CompactRevision > 0 {
				return wr.CompactRevision, nil
			}
			if err := wr.Err(); err != nil {
				return after, fmt.Errorf("store: watch %s: %w", prefix, err)
			}
			if len(wr.Events) > 0 {
				return wr.Events[len(wr.Events)-1].Kv.ModRevision, nil
			}
		}
	}
}
