package store

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/gangway/gangway/internal/api"
)

// stragPrefix holds the stragglers declared in a job's attempts, one key
// per attempt and node (at most one is declared per node and attempt):
// written by whichever replica took the heartbeat, read by any.
const stragPrefix = Root + "stragglers/"

func stragKey(s api.Straggler) string {
	return stragPrefix + s.JobID + "/" + strconv.Itoa(s.Attempt) + "/" + s.Node
}

// PutStraggler records a declared straggler.
func (s *Store) PutStraggler(ctx context.Context, st api.Straggler) error {
	b, err := json.Marshal(&st)
	if err != nil {
		return fmt.Errorf("store: encode straggler: %w", err)
	}
	if _, err := s.kv.Put(ctx, stragKey(st), string(b)); err != nil {
		return fmt.Errorf("store: put straggler of job %s: %w", st.JobID, err)
	}
	return nil
}

// Stragglers lists the stragglers declared in job's attempts, oldest
// first.
func (s *Store) Stragglers(ctx context.Context, job string) ([]api.Straggler, error) {
	resp, err := s.kv.Get(ctx, stragPrefix+job+"/", clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("store: list stragglers of job %s: %w", job, err)
	}
	out := make([]api.Straggler, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		var st api.Straggler
		if err := json.Unmarshal(kv.Value, &st); err != nil {
			return nil, fmt.Errorf("store: decode %s: %w", kv.Key, err)
		}
		out = append(out, st)
	}
	sort.SliceStable(out, func(a, b int) bool { return out[a].At.Before(out[b].At) })
	return out, nil
}
