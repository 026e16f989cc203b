package store

import (
	"context"
	"fmt"
	"sort"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// FinishedJob is what the cache keeps of a finished job: enough to age it
// out without reading it again.
type FinishedJob struct {
	ID          string
	FinishedAt  time.Time
	ModRevision int64
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
				}, nil)
		}
		resp, err := s.c.Txn(ctx).Then(ops...).Commit()
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
// choice is the same on every replica.
func Expired(finished []FinishedJob, cutoff time.Time, keep int) []FinishedJob {
	fs := append([]FinishedJob(nil), finished...)
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
