// Package ratelimit limits each API client's request rate: a token bucket
// (golang.org/x/time/rate) per client key, the user or node name the
// authentication layer found, or the remote IP of an unauthenticated
// request. At most MaxClients buckets are kept, the least recently used
// dropped first, so a flood of distinct keys cannot grow memory without
// bound.
//
// It imports the standard library and golang.org/x/time/rate.
package ratelimit

import (
	"container/list"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// Defaults of Config.
const (
	DefaultMaxClients = 10000
	DefaultIdle       = 10 * time.Minute
)

// Config says how fast each client may go.
type Config struct {
	// PerSecond is each client's sustained rate. 0: unlimited.
	PerSecond float64
	// Burst is how many requests a client may make at once. 0: PerSecond
	// rounded up, at least 1.
	Burst int
	// MaxClients bounds the clients remembered; beyond it the least
	// recently seen is forgotten (and starts again with a full burst).
	// 0: DefaultMaxClients.
	MaxClients int
	// Idle is how long a client is remembered after its last request.
	// It should be at least Burst/PerSecond, the time a bucket takes to
	// fill, or forgetting a client refills it early. 0: DefaultIdle.
	Idle time.Duration
}

// Validate reports a configuration no Limiter can have.
func (c Config) Validate() error {
	if c.PerSecond < 0 || math.IsNaN(c.PerSecond) || math.IsInf(c.PerSecond, 0) || c.Burst < 0 || c.MaxClients < 0 || c.Idle < 0 {
		return errors.New("ratelimit: PerSecond, Burst, MaxClients and Idle must be finite and not negative")
	}
	return nil
}

// Limiter keeps a token bucket per client key. Safe for concurrent use.
type Limiter struct {
	cfg Config
	now func() time.Time

	mu sync.Mutex // guards the fields below
	// lru orders the clients, most recently seen first; byKey finds them.
	lru   list.List // of *client
	byKey map[string]*list.Element
}

type client struct {
	key  string
	lim  *rate.Limiter
	seen time.Time
}

// New makes a limiter. It panics on a configuration Validate refuses.
func New(c Config) *Limiter {
	if err := c.Validate(); err != nil {
		panic(err)
	}
	if c.Burst == 0 {
		c.Burst = max(1, int(math.Ceil(c.PerSecond)))
	}
	if c.MaxClients == 0 {
		c.MaxClients = DefaultMaxClients
	}
	if c.Idle == 0 {
		c.Idle = DefaultIdle
	}
	return &Limiter{cfg: c, now: time.Now, byKey: map[string]*list.Element{}}
}

// Allow takes one request from key's bucket. When it is empty, ok is false
// and retryAfter is how long until it holds one again.
func (l *Limiter) Allow(key string) (ok bool, retryAfter time.Duration) {
	if l.cfg.PerSecond == 0 {
		return true, 0
	}
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	c := l.clientLocked(key, now)
	if c.lim.AllowN(now, 1) {
		return true, 0
	}
	// To the microsecond: finer is float noise.
	missing := 1 - c.lim.TokensAt(now)
	return false, max(time.Microsecond, time.Duration(math.Round(missing/l.cfg.PerSecond*1e6))*time.Microsecond)
}

// clientLocked finds or makes key's client, marks it seen at now and
// forgets clients idle too long or beyond MaxClients.
func (l *Limiter) clientLocked(key string, now time.Time) *client {
	// The back is the least recently seen: forget it while it is idle.
	for e := l.lru.Back(); e != nil; e = l.lru.Back() {
		c := e.Value.(*client)
		if now.Sub(c.seen) < l.cfg.Idle || c.key == key {
			break
		}
		l.removeLocked(e)
	}
	if e, ok := l.byKey[key]; ok {
		c := e.Value.(*client)
		c.seen = now
		l.lru.MoveToFront(e)
		return c
	}
	for l.lru.Len() >= l.cfg.MaxClients {
		l.removeLocked(l.lru.Back())
	}
	c := &client{key: key, lim: rate.NewLimiter(rate.Limit(l.cfg.PerSecond), l.cfg.Burst), seen: now}
	l.byKey[key] = l.lru.PushFront(c)
	return c
}

func (l *Limiter) removeLocked(e *list.Element) {
	delete(l.byKey, e.Value.(*client).key)
	l.lru.Remove(e)
}

// Len is how many clients the limiter remembers.
func (l *Limiter) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lru.Len()
}

// Middleware passes to next the requests l allows for their key, and
// answers the others 429 Too Many Requests with a Retry-After header (whole
// seconds, at least 1) and a JSON {"error": "..."} body. key names the
// request's client (the authentication layer's user or node name); when
// key is nil or returns "", the remote IP is the key.
func Middleware(l *Limiter, key func(*http.Request) string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		k := ""
		if key != nil {
			k = key(r)
		}
		if k == "" {
			k = remoteIP(r)
		}
		ok, after := l.Allow(k)
		if ok {
			next.ServeHTTP(w, r)
			return
		}
		secs := max(1, int64(math.Ceil(after.Seconds())))
		body, _ := json.Marshal(struct {
			Error string `json:"error"`
		}{fmt.Sprintf("too many requests from %s: at most %s per second; retry after %ds",
			k, strconv.FormatFloat(l.cfg.PerSecond, 'g', -1, 64), secs)})
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Retry-After", strconv.FormatInt(secs, 10))
		w.WriteHeader(http.StatusTooManyRequests)
		w.Write(append(body, '\n'))
	})
}

// remoteIP is the host of r.RemoteAddr, or all of it if it has no port.
func remoteIP(r *http.Request) string {
	if h, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		return h
	}
	return r.RemoteAddr
}
