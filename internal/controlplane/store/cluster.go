package store

import (
	"context"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// ClusterIDKey holds the ID a cluster's store is given at its first start,
// which each server's data directory records too: a data directory and a
// store that name different clusters (or a store that names none) were
// not made for each other.
const ClusterIDKey = Root + "cluster-id"

// ClusterID reads the store's cluster ID; ErrNotFound when it has none (a
// store no server has started on yet, or another etcd).
func (s *Store) ClusterID(ctx context.Context) (string, error) {
	resp, err := s.kv.Get(ctx, ClusterIDKey)
	if err != nil {
		return "", fmt.Errorf("store: read the cluster ID: %w", err)
	}
	if len(resp.Kvs) == 0 {
		return "", fmt.Errorf("cluster ID: %w", ErrNotFound)
	}
	return string(resp.Kvs[0].Value), nil
}

// InitClusterID gives the store the cluster ID id unless it has one, and
// returns the one it has then: id, or that of a replica first to start.
func (s *Store) InitClusterID(ctx context.Context, id string) (string, error) {
	tr, err := s.kv.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(ClusterIDKey), "=", 0)).
		Then(clientv3.OpPut(ClusterIDKey, id)).Else(clientv3.OpGet(ClusterIDKey)).Commit()
	if err != nil {
		return "", fmt.Errorf("store: set the cluster ID: %w", err)
	}
	if tr.Succeeded {
		return id, nil
	}
	return string(tr.Responses[0].GetResponseRange().Kvs[0].Value), nil
}
