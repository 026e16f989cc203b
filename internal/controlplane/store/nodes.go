package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/gangway/gangway/internal/api"
	"github.com/gangway/gangway/internal/base/fastjson"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Node reads one node.
func (s *Store) Node(ctx context.Context, name string) (*api.Node, error) {
	resp, err := s.kv.Get(ctx, nodeKey(name))
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
	resp, err := s.kv.Get(ctx, nodesPrefix, clientv3.WithPrefix())
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
	return s.putNode(ctx, n)
}

func (s *Store) putNode(ctx context.Context, n *api.Node, also ...clientv3.Op) error {
	b, err := json.Marshal(n)
	if err != nil {
		return fmt.Errorf("store: encode node: %w", err)
	}
	k := nodeKey(n.Name)
	tr, err := s.kv.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(k), "=", n.ModRevision)).
		Then(append([]clientv3.Op{clientv3.OpPut(k, string(b))}, also...)...).Commit()
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
