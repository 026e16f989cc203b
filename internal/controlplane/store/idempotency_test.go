package store

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestClaimTakesTheKeyWithTheJob: a key is taken by the write that
// creates its job, through CreateJobAs or a pass's Commit, and only once
// per owner: the second write with it is refused (ErrKeyTaken) and stores
// nothing, also within one shared transaction; another owner's same key
// is another key.
func TestClaimTakesTheKeyWithTheJob(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	claim := func(owner, key, hash string) *Claim {
		t.Helper()
		c, err := s.ClaimKey(ctx, owner, key, hash, 201, now)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	j1, _ := s.NewJob(ctx, spec(1), now)
	if err := s.CreateJobAs(ctx, j1, claim("user:alice", "a/key 1", "h1")); err != nil {
		t.Fatal(err)
	}
	j2, _ := s.NewJob(ctx, spec(1), now)
	if err := s.CreateJobAs(ctx, j2, claim("user:alice", "a/key 1", "h1")); !errors.Is(err, ErrKeyTaken) {
		t.Fatalf("second create with the key: %v; want ErrKeyTaken", err)
	}
	if _, err := s.Job(ctx, j2.ID); !errors.Is(err, ErrNotFound) {
		t.Errorf("the refused job was stored: %v", err)
	}
	rec, err := s.Claimed(ctx, "user:alice", "a/key 1")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(&KeyRecord{Hash: "h1", Status: 201, Job: j1.ID, At: now}, rec); diff != "" {
		t.Errorf("record (-want +got):\n%s", diff)
	}
	if _, err := s.Claimed(ctx, "user:bob", "a/key 1"); !errors.Is(err, ErrNotFound) {
		t.Errorf("bob's key before he used it: %v; want ErrNotFound", err)
	}

	// Through Commit: bob's same key is his own; two of carol's writes
	// with one key in one call (one pass) store one job.
	b1, _ := s.NewJob(ctx, spec(1), now)
	c1, _ := s.NewJob(ctx, spec(1), now)
	c2, _ := s.NewJob(ctx, spec(1), now)
	cc := claim("user:carol", "k", "hc")
	_, errs := s.Commit(ctx, []JobWrite{
		s.UpdateJobWrite(b1).WithClaim(claim("user:bob", "a/key 1", "hb")),
		s.UpdateJobWrite(c1).WithClaim(cc),
		s.UpdateJobWrite(c2).WithClaim(cc),
	})
	if errs[0] != nil || errs[1] != nil || !errors.Is(errs[2], ErrKeyTaken) {
		t.Fatalf("Commit errors %v; want nil, nil, ErrKeyTaken", errs)
	}
	if _, err := s.Job(ctx, c2.ID); !errors.Is(err, ErrNotFound) {
		t.Errorf("carol's second job was stored: %v", err)
	}
	for owner, want := range map[string]string{"user:bob": b1.ID, "user:carol": c1.ID} {
		key := "k"
		if owner == "user:bob" {
			key = "a/key 1"
		}
		if r, err := s.Claimed(ctx, owner, key); err != nil || r.Job != want {
			t.Errorf("%s's key: %+v, %v; want job %s", owner, r, err, want)
		}
	}
}

// TestExpireKeysRevokesLeasesPastTheirTime: keys whose lease was granted
// longer ago than a key lives are deleted by ExpireKeys (etcd renews
// leases on a leader change), newer ones are kept.
func TestExpireKeysRevokesLeasesPastTheirTime(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	now := time.Now()
	old := now.Add(-KeyTTL - keyLeaseSpan - time.Minute)
	for _, at := range []time.Time{old, now} {
		c, err := s.ClaimKey(ctx, "user:alice", at.Format(time.RFC3339), "h", 201, at)
		if err != nil {
			t.Fatal(err)
		}
		j, _ := s.NewJob(ctx, spec(1), at)
		if err := s.CreateJobAs(ctx, j, c); err != nil {
			t.Fatal(err)
		}
	}
	n, err := s.ExpireKeys(ctx, now)
	if n != 1 || err != nil {
		t.Fatalf("ExpireKeys = %d, %v; want the old lease revoked", n, err)
	}
	if _, err := s.Claimed(ctx, "user:alice", old.Format(time.RFC3339)); !errors.Is(err, ErrNotFound) {
		t.Errorf("old key: %v; want ErrNotFound", err)
	}
	if _, err := s.Claimed(ctx, "user:alice", now.Format(time.RFC3339)); err != nil {
		t.Errorf("new key: %v; want kept", err)
	}
	// A lease revoked under a claim fails its write, and the next claim
	// gets a new one.
	c, err := s.ClaimKey(ctx, "user:alice", "after", "h", 201, now)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.c.Revoke(ctx, c.lease); err != nil {
		t.Fatal(err)
	}
	j, _ := s.NewJob(ctx, spec(1), now)
	if err := s.CreateJobAs(ctx, j, c); err == nil {
		t.Fatal("a write with a revoked lease succeeded")
	}
	if c, err = s.ClaimKey(ctx, "user:alice", "after", "h", 201, now); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateJobAs(ctx, j, c); err != nil {
		t.Fatalf("with a new lease: %v", err)
	}
}
