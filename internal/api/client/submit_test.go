package client

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gangway/gangway/internal/api"
)

// keys records the Idempotency-Key of every request a test server got.
type keys struct {
	mu  sync.Mutex
	got []string
}

func (k *keys) add(r *http.Request) int {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.got = append(k.got, r.Header.Get(api.IdempotencyKeyHeader))
	return len(k.got)
}

func (k *keys) list() []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	return append([]string(nil), k.got...)
}

// sameKey checks that every try carried one valid key.
func sameKey(t *testing.T, got []string, tries int) {
	t.Helper()
	if len(got) != tries {
		t.Fatalf("%d tries; want %d", len(got), tries)
	}
	if _, err := api.ParseIdempotencyKey(got[0]); err != nil {
		t.Fatalf("key %q: %v", got[0], err)
	}
	for _, k := range got {
		if k != got[0] {
			t.Fatalf("tries carried keys %q; want one key", got)
		}
	}
}

// TestSubmitRetriesWithTheSameKey: a submission carries a new random key,
// and every retry (after a 503, a connection closed before the answer, a
// try that timed out) carries that same key.
func TestSubmitRetriesWithTheSameKey(t *testing.T) {
	answer := func(w http.ResponseWriter) { writeJSON(w, http.StatusCreated, api.Job{ID: "7"}) }
	for _, tc := range []struct {
		name  string
		cfg   Config
		first func(w http.ResponseWriter)
	}{
		{"503", Config{}, func(w http.ResponseWriter) {
			writeJSON(w, http.StatusServiceUnavailable, api.ErrorBody{Error: "no leader"})
		}},
		{"connection closed before the answer", Config{}, func(w http.ResponseWriter) {
			c, _, err := http.NewResponseController(w).Hijack()
			if err == nil {
				c.Close()
			}
		}},
		{"answer cut short", Config{}, func(w http.ResponseWriter) {
			w.Header().Set("Content-Length", "100")
			w.WriteHeader(http.StatusCreated)
			_, _ = w.Write([]byte(`{"id":`))
			c, _, err := http.NewResponseController(w).Hijack()
			if err == nil {
				c.Close()
			}
		}},
		{"timeout", Config{Timeout: 100 * time.Millisecond}, func(w http.ResponseWriter) {
			time.Sleep(400 * time.Millisecond)
			answer(w)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var k keys
			tc.cfg.RetryBackoff = time.Millisecond
			c := serve(t, tc.cfg, func(w http.ResponseWriter, r *http.Request) {
				if k.add(r) == 1 {
					tc.first(w)
					return
				}
				answer(w)
			})
			j, err := c.Submit(context.Background(), []byte(`{"ranks": 1, "command": ["true"]}`))
			if err != nil || j.ID != "7" {
				t.Fatalf("Submit = %+v, %v; want job 7 after a retry", j, err)
			}
			sameKey(t, k.list(), 2)
		})
	}
}

// TestSubmitKeys: each submission has a key of its own, or the caller's;
// a refusal is not retried; retries end with the caller's context.
func TestSubmitKeys(t *testing.T) {
	var k keys
	var refuse atomic.Bool
	c := serve(t, Config{RetryBackoff: time.Millisecond}, func(w http.ResponseWriter, r *http.Request) {
		k.add(r)
		if refuse.Load() {
			writeJSON(w, http.StatusUnprocessableEntity, api.ErrorBody{Error: "Idempotency-Key: sent before with another request body"})
			return
		}
		writeJSON(w, http.StatusCreated, api.Job{ID: "1"})
	})
	ctx := context.Background()
	if _, err := c.SubmitID(ctx, []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.SubmitAny(ctx, []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.SubmitKeyed(ctx, []byte(`{}`), "mine"); err != nil {
		t.Fatal(err)
	}
	got := k.list()
	if len(got) != 3 || got[0] == got[1] || got[0] == "" || got[1] == "" || got[2] != "mine" {
		t.Fatalf("keys %q; want two distinct random ones and the caller's", got)
	}
	refuse.Store(true)
	if _, err := c.Submit(ctx, []byte(`{}`)); statusOf(err) != http.StatusUnprocessableEntity {
		t.Fatalf("Submit refused: %v; want the 422", err)
	}
	if n := len(k.list()); n != 4 {
		t.Errorf("a refused submission was sent %d times; want once", n-3)
	}
}

func TestSubmitRetriesEndWithTheContext(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	var hits atomic.Int32
	c := serve(t, Config{RetryBackoff: time.Millisecond, Retries: 1000}, func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		writeJSON(w, http.StatusServiceUnavailable, api.ErrorBody{Error: "no leader"})
	})
	start := time.Now()
	_, err := c.Submit(ctx, []byte(`{}`))
	if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 5*time.Second {
		t.Fatalf("Submit = %v after %s; want the context's end", err, time.Since(start))
	}
	if n := hits.Load(); n < 2 {
		t.Errorf("%d tries; want retries until the context ended", n)
	}
}

func statusOf(err error) int {
	var ae *APIError
	if errors.As(err, &ae) {
		return ae.Status
	}
	return 0
}
