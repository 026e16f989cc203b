package ratelimit

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// clock is a hand-moved clock for a Limiter.
type clock struct{ t time.Time }

func (c *clock) now() time.Time           { return c.t }
func (c *clock) add(d time.Duration)      { c.t = c.t.Add(d) }
func newAt(c Config, clk *clock) *Limiter { l := New(c); l.now = clk.now; return l }

// TestBurstThenRefusal: a client gets its burst, is then refused with the
// time until its next token, and gets that token once the time passes.
func TestBurstThenRefusal(t *testing.T) {
	clk := &clock{t: time.Unix(1e9, 0)}
	l := newAt(Config{PerSecond: 2, Burst: 3}, clk)
	for i := range 3 {
		if ok, _ := l.Allow("ann"); !ok {
			t.Fatalf("request %d of the burst refused", i+1)
		}
	}
	ok, after := l.Allow("ann")
	if ok || after != 500*time.Millisecond {
		t.Fatalf("after the burst: Allow = %v, %v; want a refusal for 500ms", ok, after)
	}
	clk.add(499 * time.Millisecond)
	if ok, after := l.Allow("ann"); ok || after != time.Millisecond {
		t.Fatalf("1ms early: Allow = %v, %v; want a refusal for 1ms", ok, after)
	}
	clk.add(time.Millisecond)
	if ok, _ := l.Allow("ann"); !ok {
		t.Fatal("refused once a token came back")
	}
}

// TestKeysIndependent: one client's exhaustion does not touch another's.
func TestKeysIndependent(t *testing.T) {
	clk := &clock{t: time.Unix(1e9, 0)}
	l := newAt(Config{PerSecond: 1, Burst: 1}, clk)
	if ok, _ := l.Allow("ann"); !ok {
		t.Fatal("ann's first refused")
	}
	if ok, _ := l.Allow("ann"); ok {
		t.Fatal("ann's second allowed")
	}
	if ok, _ := l.Allow("bob"); !ok {
		t.Fatal("bob refused because of ann")
	}
}

// TestBounded: 100k distinct keys leave at most MaxClients remembered,
// the least recently seen forgotten first; idle clients are forgotten.
func TestBounded(t *testing.T) {
	clk := &clock{t: time.Unix(1e9, 0)}
	l := newAt(Config{PerSecond: 1, Burst: 1, MaxClients: 1000, Idle: time.Minute}, clk)
	l.Allow("ann") // ann's bucket is now empty
	for i := range 100000 {
		l.Allow(fmt.Sprint("flood-", i))
		if i%1000 == 0 {
			l.Allow("ann") // ann stays recent, so stays remembered and limited
		}
		if n := l.Len(); n > 1000 {
			t.Fatalf("%d clients remembered after %d keys; want at most 1000", n, i+1)
		}
	}
	if ok, _ := l.Allow("ann"); ok {
		t.Error("ann, seen recently, was forgotten and given a new burst")
	}
	if _, ok := l.byKey["flood-0"]; ok {
		t.Error("the oldest flood key is still remembered")
	}
	clk.add(time.Minute)
	l.Allow("bob")
	if n := l.Len(); n != 1 {
		t.Errorf("after a minute idle, %d clients remembered; want bob alone", n)
	}
}

// TestUnlimited: a zero rate limits nothing and remembers nobody.
func TestUnlimited(t *testing.T) {
	l := New(Config{})
	for range 100 {
		if ok, _ := l.Allow("ann"); !ok {
			t.Fatal("refused without a limit")
		}
	}
	if l.Len() != 0 {
		t.Errorf("Len = %d; want 0", l.Len())
	}
}

// TestMiddleware: a refused request gets 429, Retry-After in whole
// seconds (at least 1) and a JSON error naming the client; the key
// function decides the client, the remote IP when it has none.
func TestMiddleware(t *testing.T) {
	clk := &clock{t: time.Unix(1e9, 0)}
	l := newAt(Config{PerSecond: 0.5, Burst: 1}, clk)
	var served int
	h := Middleware(l, func(r *http.Request) string { return r.Header.Get("X-User") }, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { served++ }))
	do := func(user, remote string) *httptest.ResponseRecorder {
		r := httptest.NewRequest("POST", "/v1/jobs", nil)
		r.Header.Set("X-User", user)
		r.RemoteAddr = remote
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	for _, tc := range []struct {
		name, user, remote string
		code               int
		retry, err         string
	}{
		{"ann's first", "ann", "10.0.0.1:1", 200, "", ""},
		{"ann's second", "ann", "10.0.0.2:2", 429, "2", "too many requests from ann: at most 0.5 per second; retry after 2s"},
		{"anonymous by IP", "", "10.0.0.1:1", 200, "", ""},
		{"same IP, other port", "", "10.0.0.1:9", 429, "2", "too many requests from 10.0.0.1: at most 0.5 per second; retry after 2s"},
	} {
		w := do(tc.user, tc.remote)
		if w.Code != tc.code || w.Header().Get("Retry-After") != tc.retry {
			t.Errorf("%s: %d, Retry-After %q; want %d, %q", tc.name, w.Code, w.Header().Get("Retry-After"), tc.code, tc.retry)
		}
		if tc.err != "" {
			var body struct{ Error string }
			if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil || body.Error != tc.err {
				t.Errorf("%s: body %q (%v); want error %q", tc.name, w.Body, err, tc.err)
			}
		}
	}
	if served != 2 {
		t.Errorf("served %d; want 2", served)
	}
	clk.add(1900 * time.Millisecond) // 100ms left: still Retry-After 1
	if w := do("ann", ""); w.Code != 429 || w.Header().Get("Retry-After") != "1" {
		t.Errorf("100ms before a token: %d, Retry-After %q; want 429, 1", w.Code, w.Header().Get("Retry-After"))
	}
}

// TestConcurrent: Allow from many goroutines (run with -race) hands out
// no more than the burst.
func TestConcurrent(t *testing.T) {
	l := New(Config{PerSecond: 1e-3, Burst: 50})
	var mu sync.Mutex
	allowed := 0
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 100 {
				if ok, _ := l.Allow("ann"); ok {
					mu.Lock()
					allowed++
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	if allowed != 50 {
		t.Errorf("allowed %d; want the burst, 50", allowed)
	}
}

// BenchmarkAllow: one client, as a busy user; and many, as a cluster of
// agents (each allowed).
func BenchmarkAllow(b *testing.B) {
	b.Run("one key", func(b *testing.B) {
		l := New(Config{PerSecond: 1e9, Burst: 1e9})
		b.ReportAllocs()
		for b.Loop() {
			l.Allow("ann")
		}
	})
	b.Run("10k keys parallel", func(b *testing.B) {
		l := New(Config{PerSecond: 1e9, Burst: 1e9})
		keys := make([]string, 10000)
		for i := range keys {
			keys[i] = fmt.Sprint("node-", i)
		}
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			i := 0
			for pb.Next() {
				l.Allow(keys[i%len(keys)])
				i++
			}
		})
	})
	b.Run("new keys (flood)", func(b *testing.B) {
		l := New(Config{PerSecond: 10, MaxClients: 10000})
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			l.Allow(strconv.Itoa(i))
			i++
		}
	})
}
