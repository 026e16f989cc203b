package store

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"

	"github.com/gangway/gangway/internal/api"
	clientv3 "go.etcd.io/etcd/client/v3"
)

const queuesPrefix = Root + "queues/"

func queueKey(name string) string { return queuesPrefix + name }

// PutQueue creates or replaces a queue's spec, keeping its creation time.
func (s *Store) PutQueue(ctx context.Context, q *api.Queue) error {
	b, err := json.Marshal(q)
	if err != nil {
		return fmt.Errorf("store: encode queue: %w", err)
	}
	resp, err := s.kv.Put(ctx, queueKey(q.Spec.Name), string(b))
	if err != nil {
		return fmt.Errorf("store: put queue %s: %w", q.Spec.Name, err)
	}
	q.ModRevision = resp.Header.Revision
	return nil
}

// Queue reads one queue.
func (s *Store) Queue(ctx context.Context, name string) (*api.Queue, error) {
	resp, err := s.kv.Get(ctx, queueKey(name))
	if err != nil {
		return nil, fmt.Errorf("store: get queue %s: %w", name, err)
	}
	if len(resp.Kvs) == 0 {
		return nil, fmt.Errorf("queue %s: %w", name, ErrNotFound)
	}
	var q api.Queue
	if err := json.Unmarshal(resp.Kvs[0].Value, &q); err != nil {
		return nil, fmt.Errorf("store: decode queue %s: %w", name, err)
	}
	q.ModRevision = resp.Kvs[0].ModRevision
	return &q, nil
}

// Queues lists queues by name.
func (s *Store) Queues(ctx context.Context) ([]*api.Queue, error) {
	resp, err := s.kv.Get(ctx, queuesPrefix, clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("store: list queues: %w", err)
	}
	out := make([]*api.Queue, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		var q api.Queue
		if err := json.Unmarshal(kv.Value, &q); err != nil {
			return nil, fmt.Errorf("store: decode %s: %w", kv.Key, err)
		}
		q.ModRevision = kv.ModRevision
		out = append(out, &q)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Spec.Name < out[j].Spec.Name })
	return out, nil
}

// DeleteQueue removes a queue.
func (s *Store) DeleteQueue(ctx context.Context, name string) error {
	resp, err := s.kv.Delete(ctx, queueKey(name))
	if err != nil {
		return fmt.Errorf("store: delete queue %s: %w", name, err)
	}
	if resp.Deleted == 0 {
		return fmt.Errorf("queue %s: %w", name, ErrNotFound)
	}
	return nil
}
