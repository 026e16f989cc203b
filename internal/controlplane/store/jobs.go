package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"time"

	"github.com/gangway/gangway/internal/api"
	"github.com/gangway/gangway/internal/base/fastjson"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// CreateJob stores a new job with the next sequential ID, in Pending.
func (s *Store) CreateJob(ctx context.Context, spec api.JobSpec, now time.Time) (*api.Job, error) {
	for {
		j, err := s.NewJob(ctx, spec, now)
		if err != nil {
			return nil, err
		}
		switch err := s.CreateJobAs(ctx, j, nil); {
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
		Status:      api.JobStatus{Phase: api.JobPending, Reason: api.ReasonNew},
	}, nil
}

// CreateJobAs stores j, made by NewJob, unless a job with its ID exists
// (ErrConflict), and takes claim's idempotency key with it (nil: none)
// unless another submission took the key (ErrKeyTaken). On success
// j.ModRevision is set.
func (s *Store) CreateJobAs(ctx context.Context, j *api.Job, claim *Claim) error {
	b, err := json.Marshal(j)
	if err != nil {
		return fmt.Errorf("store: encode job: %w", err)
	}
	cmps := []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(jobKey(j.ID)), "=", 0)}
	ops := []clientv3.Op{clientv3.OpPut(jobKey(j.ID), string(b))}
	var orElse []clientv3.Op
	if claim != nil {
		put, err := claim.forJob(j.ID)
		if err != nil {
			return err
		}
		cmps, ops, orElse = append(cmps, claim.cmp()), append(ops, put), []clientv3.Op{claim.taken()}
	}
	tr, err := s.kv.Txn(ctx).If(cmps...).Then(ops...).Else(orElse...).Commit()
	if err != nil {
		s.leaseGone(claim, err)
		return fmt.Errorf("store: create job: %w", err)
	}
	if keyTaken(claim, tr) {
		return fmt.Errorf("store: create job %s: %w", j.ID, ErrKeyTaken)
	}
	if !tr.Succeeded {
		return fmt.Errorf("store: create job %s: %w", j.ID, ErrConflict)
	}
	j.ModRevision = tr.Header.Revision
	return nil
}

// Job reads one job.
func (s *Store) Job(ctx context.Context, id string) (*api.Job, error) {
	resp, err := s.kv.Get(ctx, jobKey(id))
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
	resp, err := s.kv.Get(ctx, jobsPrefix, clientv3.WithPrefix())
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
	resp, err := s.kv.Get(ctx, jobsPrefix, clientv3.WithPrefix(),
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
	resp, err := s.kv.Get(ctx, assignNodePrefix(node), clientv3.WithPrefix())
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
