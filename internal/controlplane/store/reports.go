package store

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"time"

	"github.com/gangway/gangway/internal/api"
	"github.com/gangway/gangway/internal/base/fastjson"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

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
		if _, err := s.kv.Txn(ctx).Then(ops[:n]...).Commit(); err != nil {
			return fmt.Errorf("store: put rank statuses: %w", err)
		}
		ops = ops[n:]
	}
	return nil
}

// RankStatuses lists the statuses of a job's ranks, all attempts, in
// attempt then rank order.
func (s *Store) RankStatuses(ctx context.Context, job string) ([]api.RankStatus, error) {
	resp, err := s.kv.Get(ctx, ranksPrefix+job+"/", clientv3.WithPrefix())
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
	if _, err := s.kv.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(k), "=", 0)).Then(clientv3.OpPut(k, string(b))).Commit(); err != nil {
		return fmt.Errorf("store: put checkpoint of %s: %w", job, err)
	}
	return nil
}

// Checkpoints lists a job's committed checkpoints, oldest step first.
func (s *Store) Checkpoints(ctx context.Context, job string) ([]api.Checkpoint, error) {
	resp, err := s.kv.Get(ctx, ckptPrefix+job+"/", clientv3.WithPrefix())
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
	resp, err := s.kv.Get(ctx, ckptPrefix+job+"/", clientv3.WithPrefix(),
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
		resp, err := s.kv.Get(ctx, k)
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
		tr, err := s.kv.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(k), "=", rev)).Then(clientv3.OpPut(k, string(b))).Commit()
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
	resp, err := s.kv.Get(ctx, progKey(job))
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
	resp, err := s.kv.Get(ctx, seqJobs)
	if err != nil {
		return 0, fmt.Errorf("store: read revision: %w", err)
	}
	return resp.Header.Revision, nil
}

// WaitChange blocks until a key under prefix changes after revision
// after, ctx ends, or wait passes. It returns the revision of the change, or
// after if none happened. A compacted revision is reported as a change.
func (s *Store) WaitChange(ctx context.Context, prefix string, after int64, wait time.Duration) (int64, error) {
	return s.waitAny(ctx, after, wait, watched{prefix, true})
}
