package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"

	"github.com/gangway/gangway/internal/api"
	clientv3 "go.etcd.io/etcd/client/v3"
)

const deployPrefix = Root + "deployments/"

// DeploymentsPrefix is watched by blocking queries on deployments.
const DeploymentsPrefix = deployPrefix

func deployKey(name string) string { return deployPrefix + name }

// ErrExists: a create found the name taken.
var ErrExists = errors.New("store: already exists")

// CreateDeployment stores a new deployment; ErrExists if the name is taken.
func (s *Store) CreateDeployment(ctx context.Context, d *api.Deployment) error {
	b, err := json.Marshal(d)
	if err != nil {
		return fmt.Errorf("store: encode deployment: %w", err)
	}
	k := deployKey(d.Spec.Name)
	tr, err := s.kv.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(k), "=", 0)).Then(clientv3.OpPut(k, string(b))).Commit()
	if err != nil {
		return fmt.Errorf("store: create deployment %s: %w", d.Spec.Name, err)
	}
	if !tr.Succeeded {
		return fmt.Errorf("deployment %s: %w", d.Spec.Name, ErrExists)
	}
	d.ModRevision = tr.Header.Revision
	return nil
}

// Deployment reads one deployment.
func (s *Store) Deployment(ctx context.Context, name string) (*api.Deployment, error) {
	resp, err := s.kv.Get(ctx, deployKey(name))
	if err != nil {
		return nil, fmt.Errorf("store: get deployment %s: %w", name, err)
	}
	if len(resp.Kvs) == 0 {
		return nil, fmt.Errorf("deployment %s: %w", name, ErrNotFound)
	}
	var d api.Deployment
	if err := json.Unmarshal(resp.Kvs[0].Value, &d); err != nil {
		return nil, fmt.Errorf("store: decode deployment %s: %w", name, err)
	}
	d.ModRevision = resp.Kvs[0].ModRevision
	return &d, nil
}

// Deployments lists deployments by name.
func (s *Store) Deployments(ctx context.Context) ([]*api.Deployment, int64, error) {
	resp, err := s.kv.Get(ctx, deployPrefix, clientv3.WithPrefix())
	if err != nil {
		return nil, 0, fmt.Errorf("store: list deployments: %w", err)
	}
	out := make([]*api.Deployment, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		var d api.Deployment
		if err := json.Unmarshal(kv.Value, &d); err != nil {
			return nil, 0, fmt.Errorf("store: decode %s: %w", kv.Key, err)
		}
		d.ModRevision = kv.ModRevision
		out = append(out, &d)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Spec.Name < out[j].Spec.Name })
	return out, resp.Header.Revision, nil
}

// UpdateDeployment writes d if unchanged since d.ModRevision was read.
func (s *Store) UpdateDeployment(ctx context.Context, d *api.Deployment) error {
	b, err := json.Marshal(d)
	if err != nil {
		return fmt.Errorf("store: encode deployment: %w", err)
	}
	k := deployKey(d.Spec.Name)
	tr, err := s.kv.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(k), "=", d.ModRevision)).Then(clientv3.OpPut(k, string(b))).Commit()
	if err != nil {
		return fmt.Errorf("store: update deployment %s: %w", d.Spec.Name, err)
	}
	if !tr.Succeeded {
		return fmt.Errorf("deployment %s: %w", d.Spec.Name, ErrConflict)
	}
	d.ModRevision = tr.Header.Revision
	return nil
}

// ModifyDeployment applies fn to the newest copy and writes it, retrying
// on conflicts.
func (s *Store) ModifyDeployment(ctx context.Context, name string, fn func(*api.Deployment) error) (*api.Deployment, error) {
	for {
		d, err := s.Deployment(ctx, name)
		if err != nil {
			return nil, err
		}
		if err := fn(d); err != nil {
			return nil, err
		}
		err = s.UpdateDeployment(ctx, d)
		if err == nil {
			return d, nil
		}
		if !errors.Is(err, ErrConflict) {
			return nil, err
		}
	}
}

// DeleteDeployment removes d if unchanged since read.
func (s *Store) DeleteDeployment(ctx context.Context, d *api.Deployment) error {
	k := deployKey(d.Spec.Name)
	tr, err := s.kv.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(k), "=", d.ModRevision)).Then(clientv3.OpDelete(k)).Commit()
	if err != nil {
		return fmt.Errorf("store: delete deployment %s: %w", d.Spec.Name, err)
	}
	if !tr.Succeeded {
		return fmt.Errorf("deployment %s: %w", d.Spec.Name, ErrConflict)
	}
	return nil
}
