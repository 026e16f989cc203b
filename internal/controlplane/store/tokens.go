package store

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/gangway/gangway/internal/api"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Tokens (their records: the secrets' hashes, never the secrets) and node
// revocations. Both are small, read on each authentication through the
// server's short cache, and written only by admins.
const (
	tokensPrefix  = Root + "tokens/"
	revokedPrefix = Root + "revoked/"
)

func tokenKey(id string) string { return tokensPrefix + id }

// CreateToken writes a new token record; ErrConflict if its id exists.
func (s *Store) CreateToken(ctx context.Context, t *api.Token) error {
	t.ModRevision = 0
	return s.PutToken(ctx, t)
}

// PutToken writes t: a compare-and-swap on t.ModRevision (0: create).
func (s *Store) PutToken(ctx context.Context, t *api.Token) error {
	b, err := json.Marshal(t)
	if err != nil {
		return fmt.Errorf("store: encode token: %w", err)
	}
	k := tokenKey(t.ID)
	tr, err := s.kv.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(k), "=", t.ModRevision)).
		Then(clientv3.OpPut(k, string(b))).Commit()
	if err != nil {
		return fmt.Errorf("store: put token %s: %w", t.ID, err)
	}
	if !tr.Succeeded {
		return fmt.Errorf("token %s: %w", t.ID, ErrConflict)
	}
	t.ModRevision = tr.Header.Revision
	return nil
}

// Token reads one token record.
func (s *Store) Token(ctx context.Context, id string) (*api.Token, error) {
	resp, err := s.kv.Get(ctx, tokenKey(id))
	if err != nil {
		return nil, fmt.Errorf("store: get token %s: %w", id, err)
	}
	if len(resp.Kvs) == 0 {
		return nil, fmt.Errorf("token %s: %w", id, ErrNotFound)
	}
	var t api.Token
	if err := json.Unmarshal(resp.Kvs[0].Value, &t); err != nil {
		return nil, fmt.Errorf("store: decode token %s: %w", id, err)
	}
	t.ModRevision = resp.Kvs[0].ModRevision
	return &t, nil
}

// Tokens lists every token record.
func (s *Store) Tokens(ctx context.Context) ([]*api.Token, error) {
	resp, err := s.kv.Get(ctx, tokensPrefix, clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("store: list tokens: %w", err)
	}
	out := make([]*api.Token, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		var t api.Token
		if err := json.Unmarshal(kv.Value, &t); err != nil {
			return nil, fmt.Errorf("store: decode %s: %w", kv.Key, err)
		}
		t.ModRevision = kv.ModRevision
		out = append(out, &t)
	}
	return out, nil
}

// DeleteToken removes a token record (expired ones are swept).
func (s *Store) DeleteToken(ctx context.Context, id string) error {
	if _, err := s.kv.Delete(ctx, tokenKey(id)); err != nil {
		return fmt.Errorf("store: delete token %s: %w", id, err)
	}
	return nil
}

// RevokeNode records that certificates of node issued before at no longer
// authenticate it.
func (s *Store) RevokeNode(ctx context.Context, node string, at time.Time) error {
	if _, err := s.kv.Put(ctx, revokedPrefix+node, at.UTC().Format(time.RFC3339Nano)); err != nil {
		return fmt.Errorf("store: revoke node %s: %w", node, err)
	}
	return nil
}

// Revocations maps each revoked node to the time before which its
// certificates are refused.
func (s *Store) Revocations(ctx context.Context) (map[string]time.Time, error) {
	resp, err := s.kv.Get(ctx, revokedPrefix, clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("store: list revocations: %w", err)
	}
	out := make(map[string]time.Time, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		at, err := time.Parse(time.RFC3339Nano, string(kv.Value))
		if err != nil {
			return nil, fmt.Errorf("store: decode %s: %w", kv.Key, err)
		}
		out[string(kv.Key[len(revokedPrefix):])] = at
	}
	return out, nil
}
