package store

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"time"

	"github.com/gangway/gangway/internal/api"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// FinishedJob is what the cache keeps of a finished job: enough to age it
// out without reading it again.
type FinishedJob struct {
	ID          string
	FinishedAt  time.Time
	ModRevision int64
	// Phase is how it ended and Started whether it ran an attempt, for
	// the jobs that depend on it.
	Phase   api.JobPhase
	Started bool
}

// deleteChunk is how many jobs one deletion transaction carries: each is
// one nested transaction of four operations, and etcd's default limit is
// 128 operations per level.
const deleteChunk = 64

// DeleteFinishedJobs deletes jobs with everything stored of theirs: rank
// statuses, checkpoint records and progress. A job written since the
// revision it was listed at is left alone. It returns how many it deleted;
// on an error the jobs of the chunks before it are gone.
func (s *Store) DeleteFinishedJobs(ctx context.Context, jobs []FinishedJob) (int, error) {
	deleted := 0
	for len(jobs) > 0 {
		n := min(len(jobs), deleteChunk)
		ops := make([]clientv3.Op, n)
		for i, j := range jobs[:n] {
			ops[i] = clientv3.OpTxn(
				[]clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(jobKey(j.ID)), "=", j.ModRevision)},
				[]clientv3.Op{
					clientv3.OpDelete(jobKey(j.ID)),
					clientv3.OpDelete(ranksPrefix+j.ID+"/", clientv3.WithPrefix()),
					clientv3.OpDelete(ckptPrefix+j.ID+"/", clientv3.WithPrefix()),
					clientv3.OpDelete(progKey(j.ID)),
					clientv3.OpDelete(stragPrefix+j.ID+"/", clientv3.WithPrefix()),
				}, nil)
		}
		resp, err := s.kv.Txn(ctx).Then(ops...).Commit()
		if err != nil {
			return deleted, fmt.Errorf("store: delete finished jobs: %w", err)
		}
		for _, r := range resp.Responses {
			if t := r.GetResponseTxn(); t != nil && t.Succeeded {
				deleted++
			}
		}
		jobs = jobs[n:]
	}
	return deleted, nil
}

// Expired picks, from finished jobs, those to delete: every one that
// finished before cutoff (none if cutoff is zero) and, beyond the newest
// keep (no limit if keep is 0), the oldest. Ties go by job ID, so the
// choice is the same on every replica. It sorts fs (oldest first) in
// place and returns a prefix of it.
func Expired(fs []FinishedJob, cutoff time.Time, keep int) []FinishedJob {
	sort.Slice(fs, func(a, b int) bool {
		if !fs[a].FinishedAt.Equal(fs[b].FinishedAt) {
			return fs[a].FinishedAt.Before(fs[b].FinishedAt)
		}
		return jobLess(fs[a].ID, fs[b].ID)
	})
	n := 0
	if !cutoff.IsZero() {
		n = sort.Search(len(fs), func(i int) bool { return !fs[i].FinishedAt.Before(cutoff) })
	}
	if keep > 0 && len(fs)-n > keep {
		n = len(fs) - keep
	}
	return fs[:n]
}

// Issued reports whether id is within the job IDs the sequence has handed
// out (blocks of 128 are reserved ahead), so that a job not found under it
// may have been deleted by retention.
func (s *Store) Issued(ctx context.Context, id string) bool {
	n, err := strconv.ParseInt(id, 10, 64)
	if err != nil || n < 1 {
		return false
	}
	resp, err := s.kv.Get(ctx, seqJobs)
	if err != nil || len(resp.Kvs) == 0 {
		return false
	}
	last, err := strconv.ParseInt(string(resp.Kvs[0].Value), 10, 64)
	return err == nil && n <= last
}

// detailChunk is how many jobs one read transaction carries: four reads
// each, within etcd's default 128 operations.
const detailChunk = 32

// JobDetails reads jobs whole, as `describe` shows them, each chunk of 32
// at one revision. Jobs not found are left out.
func (s *Store) JobDetails(ctx context.Context, ids []string) ([]api.JobDetail, error) {
	out := make([]api.JobDetail, 0, len(ids))
	for len(ids) > 0 {
		n := min(len(ids), detailChunk)
		ops := make([]clientv3.Op, 0, 4*n)
		for _, id := range ids[:n] {
			ops = append(ops, clientv3.OpGet(jobKey(id)), clientv3.OpGet(ranksPrefix+id+"/", clientv3.WithPrefix()),
				clientv3.OpGet(ckptPrefix+id+"/", clientv3.WithPrefix()), clientv3.OpGet(progKey(id)))
		}
		resp, err := s.kv.Txn(ctx).Then(ops...).Commit()
		if err != nil {
			return nil, fmt.Errorf("store: read jobs: %w", err)
		}
		for i, id := range ids[:n] {
			r := resp.Responses[4*i : 4*i+4]
			jk := r[0].GetResponseRange().Kvs
			if len(jk) == 0 {
				continue
			}
			var d api.JobDetail
			if err := json.Unmarshal(jk[0].Value, &d.Job); err != nil {
				return nil, fmt.Errorf("store: decode job %s: %w", id, err)
			}
			d.Job.ModRevision = jk[0].ModRevision
			if d.Ranks, err = decodeRanks(r[1].GetResponseRange().Kvs); err != nil {
				return nil, err
			}
			if d.Checkpoints, err = decodeCheckpoints(r[2].GetResponseRange().Kvs); err != nil {
				return nil, err
			}
			if d.Progress, err = decodeProgress(id, r[3].GetResponseRange().Kvs); err != nil {
				return nil, err
			}
			out = append(out, d)
		}
		ids = ids[n:]
	}
	return out, nil
}
