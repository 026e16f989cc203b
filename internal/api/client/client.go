// Package client is the one Go client of gangway's /v1 API: the CLI, the
// node agent, the benchmarks and tests call the server through it. What
// every caller needs it does in one place: one connection pool per Client,
// a timeout per request, retries of idempotent requests with a backoff that
// ends with the caller's context, the User-Agent gangway/<version>, and
// every answer that is not a success as an *APIError. A submission is made
// idempotent with a random Idempotency-Key (jobs.go), and so is retried too,
// with the same key, when it got no answer.
//
// Credentials and TLS come in through Config: a bearer token (people and
// scripts), a CA to trust and, for agents, a client certificate (TLS);
// every request is made by newRequest, the one place the token is set.
// config.go reads and writes the client configuration file (contexts, as
// kubeconfig) the CLI resolves a Config from.
//
// It imports internal/api, internal/base/pki, internal/base/version and
// the standard library; it links no etcd (TestLinksNoServer holds it to
// that).
package client

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gangway/gangway/internal/api"
	"github.com/gangway/gangway/internal/base/pki"
	"github.com/gangway/gangway/internal/base/version"
)

// Defaults for Config's zero values.
const (
	DefaultTimeout      = 30 * time.Second
	DefaultRetries      = 2
	DefaultRetryBackoff = 100 * time.Millisecond
	// maxBackoff caps the wait between two tries.
	maxBackoff = 2 * time.Second
	// maxAnswerBytes bounds an answer held in memory (not a log stream).
	maxAnswerBytes = 64 << 20
)

// Config says how to reach a server. Only Server is required.
type Config struct {
	// Server is the base URL, such as "https://127.0.0.1:7070", or several
	// replicas' separated by commas: a request that cannot reach one is
	// retried (if it may be) on the next, and later requests go there.
	Server string
	// Transport carries every request; nil: a clone of
	// http.DefaultTransport keeping MaxIdleConnsPerHost idle connections.
	// A caller that wants its own connections (one pool per emulated
	// node), or TLS before Config has a field for it, passes its own.
	Transport http.RoundTripper
	// MaxIdleConnsPerHost sizes the default transport's pool: at least the
	// number of requests the caller makes at once. 0: net/http's default
	// (2). Ignored with Transport.
	MaxIdleConnsPerHost int
	// Timeout bounds one try of a request, from sending it to reading its
	// whole answer; a long poll gets its wait on top. 0: DefaultTimeout;
	// negative: none (the context alone bounds it). A context that ends
	// sooner wins, at no cost.
	Timeout time.Duration
	// Retries is how many more tries a GET or a submission (which carries
	// an idempotency key) gets when it could not reach the server, its
	// connection broke, or the server answered 502, 503 or 504; a
	// submission also when a try timed out. Other requests are never
	// retried: they may have taken effect. 0: DefaultRetries; negative:
	// none.
	Retries int
	// RetryBackoff is the wait before the first retry, doubled for each
	// next one (at most 2s) and jittered. 0: DefaultRetryBackoff.
	RetryBackoff time.Duration
	// UserAgent names the caller; "" sends "gangway/<version>".
	UserAgent string
	// Token is a bearer token sent with every request; "" sends none.
	Token string
	// TLS configures the default transport's TLS (trusted roots, an
	// agent's client certificate); nil: the system's roots. Ignored with
	// Transport.
	TLS *tls.Config
	// CAFile, if set, is the PEM file of the CA the server's certificate
	// must chain to; it replaces TLS's roots, and a server that does not
	// chain to it is refused with an error that names it.
	CAFile string
}

// Client calls one server's /v1 API, or several replicas' in turn: it
// moves to the next when one cannot be reached. It is safe for concurrent
// use; make one per cluster and keep it, so that connections are reused.
type Client struct {
	servers []string     // base URLs
	turn    atomic.Int64 // servers[turn % len] is the current one
	hc      *http.Client // Timeout 0: each request's context bounds it
	timeout time.Duration
	retries int
	backoff time.Duration
	// ua is the User-Agent header's value, shared by every request so that
	// setting it allocates nothing.
	ua []string
	// auth is the Authorization header's value, nil for none.
	auth []string
	// caFile names the CA the client trusts, for errors.
	caFile string
}

// New checks cfg and returns a client. It starts nothing: the transport
// dials when the first request is sent.
func New(cfg Config) (*Client, error) {
	var servers []string
	for _, srv := range strings.Split(cfg.Server, ",") {
		srv = strings.TrimSpace(srv)
		u, err := url.Parse(srv)
		if err != nil {
			return nil, fmt.Errorf("client: server %q: %w", srv, err)
		}
		if u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
			return nil, fmt.Errorf("client: server %q: want https://host:port (or several, separated by commas)", srv)
		}
		servers = append(servers, strings.TrimRight(srv, "/"))
	}
	tr := cfg.Transport
	if tr == nil {
		t := http.DefaultTransport.(*http.Transport).Clone()
		if cfg.MaxIdleConnsPerHost > 0 {
			t.MaxIdleConnsPerHost = cfg.MaxIdleConnsPerHost
		}
		tc, err := TLSConfig(cfg)
		if err != nil {
			return nil, err
		}
		t.TLSClientConfig = tc
		tr = t
	}
	c := &Client{
		servers: servers,
		hc:      &http.Client{Transport: tr},
		timeout: cfg.Timeout,
		retries: cfg.Retries,
		backoff: cfg.RetryBackoff,
		ua:      []string{cfg.UserAgent},
	}
	switch {
	case c.timeout == 0:
		c.timeout = DefaultTimeout
	case c.timeout < 0:
		c.timeout = 0
	}
	switch {
	case c.retries == 0:
		c.retries = DefaultRetries
	case c.retries < 0:
		c.retries = 0
	}
	if c.backoff <= 0 {
		c.backoff = DefaultRetryBackoff
	}
	if cfg.UserAgent == "" {
		c.ua[0] = "gangway/" + version.Version
	}
	if cfg.Token != "" {
		c.auth = []string{"Bearer " + cfg.Token}
	}
	c.caFile = cfg.CAFile
	return c, nil
}

// TLSConfig is the TLS a client of cfg uses on its default transport:
// cfg.TLS with cfg.CAFile's CA as the roots.
func TLSConfig(cfg Config) (*tls.Config, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if cfg.TLS != nil {
		tc = cfg.TLS.Clone()
	}
	if cfg.CAFile != "" {
		b, err := os.ReadFile(cfg.CAFile)
		if err != nil {
			return nil, fmt.Errorf("client: CA file: %w", err)
		}
		pool, err := pki.PoolFromPEM(b)
		if err != nil {
			return nil, fmt.Errorf("client: CA file %s: %w", cfg.CAFile, err)
		}
		tc.RootCAs = pool
	}
	return tc, nil
}

// Server is the base URL the client calls now (of several, the one it has
// moved to).
func (c *Client) Server() string {
	_, base := c.current()
	return base
}

// current is the server the client calls now, and its turn (for moveOn).
func (c *Client) current() (int64, string) {
	turn := c.turn.Load()
	return turn, c.servers[turn%int64(len(c.servers))]
}

// moveOn makes the next server of several the current one, unless another
// request already moved on from turn.
func (c *Client) moveOn(turn int64) {
	if len(c.servers) > 1 {
		c.turn.CompareAndSwap(turn, turn+1)
	}
}

// Health says whether the server answers, and whether it leads.
func (c *Client) Health(ctx context.Context) (api.Health, error) {
	var h api.Health
	return h, c.Get(ctx, "/healthz", &h)
}

// CloseIdleConnections closes the connections no request is using, and
// with them their goroutines.
func (c *Client) CloseIdleConnections() { c.hc.CloseIdleConnections() }

// ErrUnreachable is wrapped by the error of a request that got no answer
// from the server: it could not connect, or the connection broke.
var ErrUnreachable = errors.New("cannot reach the gangway server")

// APIError is an answer that is not a success (not 2xx). Callers look for
// it with errors.As.
type APIError struct {
	// Status is the HTTP status code.
	Status int
	// Message is the server's message, or the answer's text when it was
	// not gangway's JSON error body.
	Message string
	// Field is the first wrong field the server names ("spec.ranks"), or
	// "" when it names none; Fields lists every one.
	Field  string
	Fields []*api.FieldError
}

func (e *APIError) Error() string {
	if e.Message != "" {
		return e.Message
	}
	return fmt.Sprintf("HTTP %d", e.Status)
}

// newAPIError reads a failed answer's body b.
func newAPIError(status int, b []byte) *APIError {
	e := &APIError{Status: status}
	if status == http.StatusBadRequest && bytes.Contains(b, []byte("HTTP request to an HTTPS server")) {
		e.Message = "the server speaks HTTPS: use an https:// URL (--server, $GANGWAY_SERVER or the client config)"
		return e
	}
	var body api.ErrorBody
	if json.Unmarshal(b, &body) == nil && body.Error != "" {
		e.Message, e.Fields = body.Error, body.Fields
	} else {
		e.Message = string(bytes.TrimSpace(b))
	}
	for _, f := range e.Fields {
		if f.Field != "" {
			e.Field = f.Field
			break
		}
	}
	return e
}

// Content types of request bodies.
const (
	contentJSON = "application/json"
	// contentSpec is a spec the user wrote, YAML or JSON: the server
	// decodes either.
	contentSpec = "application/yaml"
)

var (
	jsonHeader = []string{contentJSON}
	specHeader = []string{contentSpec}
)

// request is one call: what to send and how long it may take.
type request struct {
	method, path string
	body         []byte
	contentType  []string // with body: jsonHeader or specHeader
	// wait is how long the server may hold the answer (a long poll); it is
	// added to the timeout.
	wait time.Duration
	// key, if set, is sent as the Idempotency-Key: every try is the same
	// request to the server, which creates what it asks for once, so a
	// try that got no answer may be sent again.
	key []string
	// repeatable: the request may be sent again as it is (a heartbeat
	// reports state, not changes), so a try that did not reach the server
	// is retried on the next replica.
	repeatable bool
}

// retried says whether r is sent again after a try that failed as
// retryable says: a GET, a repeatable request, or one with an idempotency
// key.
func (r *request) retried() bool { return r.method == http.MethodGet || r.repeatable || r.key != nil }

// newRequest makes the http.Request for one try of r. It is the one place
// every request passes, where credentials will be set.
func (c *Client) newRequest(ctx context.Context, base string, r *request) (*http.Request, error) {
	var body io.Reader
	if r.body != nil {
		body = bytes.NewReader(r.body)
	}
	req, err := http.NewRequestWithContext(ctx, r.method, base+r.path, body)
	if err != nil {
		return nil, err
	}
	req.Header["User-Agent"] = c.ua
	if c.auth != nil {
		req.Header["Authorization"] = c.auth
	}
	if r.body != nil {
		req.Header["Content-Type"] = r.contentType
	}
	if r.key != nil {
		req.Header[api.IdempotencyKeyHeader] = r.key
	}
	return req, nil
}

// send makes r's request and sends it once; the caller closes the
// answer's body.
func (c *Client) send(ctx context.Context, r *request) (*http.Response, error) {
	turn, base := c.current()
	req, err := c.newRequest(ctx, base, r)
	if err != nil {
		return nil, err
	}
	resp, err := c.hc.Do(req)
	switch {
	case err == nil:
		return resp, nil
	case ctx.Err() != nil:
		return nil, err // the caller's end or the timeout, not the server's absence
	}
	var ua x509.UnknownAuthorityError
	var hn x509.HostnameError
	var ce *tls.CertificateVerificationError
	switch {
	case errors.As(err, &ua), errors.As(err, &ce) && errors.As(ce.Err, &ua):
		where := "pass the cluster's CA with --ca-file (the server's <data-dir>/pki/ca.crt) or put it in the client config"
		if c.caFile != "" {
			where = "the CA file " + c.caFile + " is not the one that signed it; use the server's <data-dir>/pki/ca.crt"
		}
		return nil, fmt.Errorf("%w at %s: its certificate is not signed by a CA this client trusts: %s", ErrUntrusted, base, where)
	case errors.As(err, &hn):
		return nil, fmt.Errorf("%w at %s: %v (give the server a certificate for this name: gangway server --tls-san)", ErrUntrusted, base, hn)
	case strings.Contains(err.Error(), "server gave HTTP response to HTTPS client"):
		return nil, fmt.Errorf("%w at %s: it speaks plain HTTP; use http:// or give the server TLS", ErrUnreachable, base)
	}
	// Not reached: the next of several servers gets the next try.
	c.moveOn(turn)
	return nil, fmt.Errorf("%w at %s: %w", ErrUnreachable, base, err)
}

// ErrUntrusted is wrapped by the error of a request to a server whose
// certificate the client does not trust.
var ErrUntrusted = errors.New("refusing the gangway server")

// do sends r, retrying a GET or a keyed request that may succeed on
// another try, and decodes a successful answer into out (nil: drop it).
// Once ctx has ended, it tries no more and its error wraps ctx's.
func (c *Client) do(ctx context.Context, r *request, out any) error {
	for try := 0; ; try++ {
		err := c.once(ctx, r, out)
		if err == nil || !r.retried() || try >= c.retries || !retryable(err, r.key != nil) {
			return err
		}
		if ctx.Err() != nil {
			return ended(ctx, r, try, err)
		}
		t := time.NewTimer(c.backoffFor(try))
		select {
		case <-ctx.Done():
			t.Stop()
			return ended(ctx, r, try, err)
		case <-t.C:
		}
	}
}

// ended is the error of a request whose retries ctx's end cut short, after
// try (0 the first) failed with err.
func ended(ctx context.Context, r *request, try int, err error) error {
	if errors.Is(err, ctx.Err()) {
		return err
	}
	return fmt.Errorf("%s %s: %w (after %d tries; the last: %v)", r.method, r.path, ctx.Err(), try+1, err)
}

// backoffFor is the wait after try (0 the first) failed: the backoff
// doubled per try, capped, and drawn from its upper half so that many
// clients do not retry in step.
func (c *Client) backoffFor(try int) time.Duration {
	d := c.backoff << min(try, 16)
	if d <= 0 || d > maxBackoff {
		d = maxBackoff
	}
	return d/2 + rand.N(d/2+1)
}

// retryable says whether another try of a request that failed with err
// could succeed: the server was not reached, the connection broke before
// the whole answer came, or the server was briefly unable to answer. A
// try that timed out is retried only with an idempotency key (keyed): the
// server may be slow rather than gone, and a GET's caller has spent the
// time it gave; a submission is worth another try, which cannot create
// it twice. (do checks that the caller's context is still alive.)
func retryable(err error, keyed bool) bool {
	var ae *APIError
	if errors.As(err, &ae) {
		switch ae.Status {
		case http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
			return true
		}
		return false
	}
	var ue *url.Error
	if errors.As(err, &ue) && ue.Timeout() || errors.Is(err, context.DeadlineExceeded) {
		return keyed
	}
	return errors.As(err, &ue) || errors.Is(err, errCutShort)
}

// errCutShort is wrapped by the error of a try whose answer broke off.
var errCutShort = errors.New("the connection broke before the whole answer came")

// once sends one try of r.
func (c *Client) once(ctx context.Context, r *request, out any) error {
	if c.timeout > 0 {
		limit := c.timeout + r.wait
		if dl, ok := ctx.Deadline(); !ok || time.Until(dl) > limit {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, limit)
			defer cancel()
		}
	}
	resp, err := c.send(ctx, r)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	buf := getBuf()
	defer putBuf(buf)
	b, err := readAll(resp.Body, (*buf)[:0], maxAnswerBytes)
	*buf = b
	if errors.Is(err, errTooLarge) {
		return fmt.Errorf("%s %s: read the answer: %w", r.method, r.path, err)
	}
	if err != nil {
		return fmt.Errorf("%s %s: read the answer: %w: %w", r.method, r.path, errCutShort, err)
	}
	if resp.StatusCode/100 != 2 {
		return newAPIError(resp.StatusCode, b)
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("%s %s: decode the answer: %w", r.method, r.path, err)
	}
	return nil
}

// bufs holds answer buffers: json.Unmarshal copies what it keeps, so a
// buffer is free again once the answer is decoded.
var bufs = sync.Pool{New: func() any { b := make([]byte, 0, 4<<10); return &b }}

func getBuf() *[]byte { return bufs.Get().(*[]byte) }

func putBuf(b *[]byte) {
	if cap(*b) <= 1<<20 { // let a rare big answer's buffer go
		bufs.Put(b)
	}
}

var errTooLarge = fmt.Errorf("answer larger than %d bytes", maxAnswerBytes)

// readAll appends r's bytes to b until EOF, as io.ReadAll does, and stops
// with errTooLarge past max bytes.
func readAll(r io.Reader, b []byte, max int) ([]byte, error) {
	for {
		if len(b) == cap(b) {
			if len(b) >= max {
				return b, errTooLarge
			}
			b = append(b, 0)[:len(b)]
		}
		n, err := r.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if err == io.EOF {
			return b, nil
		}
		if err != nil {
			return b, err
		}
	}
}

// Get decodes the answer to GET path (with its query) into out. It is for
// callers that want less of an answer than a typed method decodes, or a
// query no method makes; prefer the typed methods.
func (c *Client) Get(ctx context.Context, path string, out any) error {
	return c.do(ctx, &request{method: http.MethodGet, path: path}, out)
}

// post sends body (of content type ct) to path.
func (c *Client) post(ctx context.Context, path string, body []byte, ct []string, out any) error {
	return c.do(ctx, &request{method: http.MethodPost, path: path, body: body, contentType: ct}, out)
}

// postJSON encodes in as the body of a POST to path.
func (c *Client) postJSON(ctx context.Context, path string, in, out any) error {
	b, err := json.Marshal(in)
	if err != nil {
		return fmt.Errorf("POST %s: encode: %w", path, err)
	}
	return c.post(ctx, path, b, jsonHeader, out)
}

// esc escapes one path segment (a job ID, a node or deployment name).
func esc(s string) string { return url.PathEscape(s) }
