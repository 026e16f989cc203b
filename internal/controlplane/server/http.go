package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gangway/gangway/internal/api"
	"github.com/gangway/gangway/internal/controlplane/audit"
	"github.com/gangway/gangway/internal/controlplane/openapi"
	"github.com/gangway/gangway/internal/controlplane/store"
	"github.com/gangway/gangway/internal/controlplane/ui"
)

// maxBody bounds request bodies: well below the store's limit on one
// transaction (store.MaxRequestBytes), which a spec must fit with its
// job's status.
const maxBody = 4 << 20

// Handler returns the HTTP API: every route behind authentication and
// its access rule (guard), every mutating request but an agent's routine
// ones (heartbeats, renewals) in the audit log.
func (s *Server) Handler() http.Handler {
	mux := s.routes()
	inner := s.metrics.instrument(mux, s.guard(mux))
	audited := audit.Middleware(s.audit, nil, inner)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v1/agent/heartbeat", "/v1/agent/renew":
			inner.ServeHTTP(w, r)
		default:
			audited.ServeHTTP(w, r)
		}
	})
}

// routes is the API's mux, without guard.
func (s *Server) routes() *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		leader := s.leader
		s.mu.Unlock()
		writeJSON(w, r, http.StatusOK, api.Health{OK: true, Leader: leader})
	})
	s.jobRoutes(mux)
	s.nodeRoutes(mux)
	s.agentRoutes(mux)
	s.queueRoutes(mux)
	s.deploymentRoutes(mux)
	s.tokenRoutes(mux)
	s.reportRoutes(mux)
	s.eventRoutes(mux)
	s.topRoutes(mux)
	s.gatewayRoutes(mux)
	s.simulateRoutes(mux)
	// The API's description (internal/controlplane/openapi), public as
	// health is: it tells nothing of the cluster.
	mux.HandleFunc("GET /openapi.json", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(openapi.Document())
	})
	// The dashboard's pages are public; the data they show comes from
	// /v1 with the user's token. A browser at the root is sent to them.
	dashboard := ui.Handler("/ui/")
	mux.HandleFunc("GET /ui/", dashboard.ServeHTTP)
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/ui/", http.StatusFound)
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, fmt.Errorf("no such endpoint: %s %s", r.Method, r.URL.Path))
	})
	return mux
}

// writeJSON writes v compact, or indented for a person: ?pretty, or a
// curl or wget client (as the Kubernetes API server does). Indenting every
// answer cost the CLI and agents, which parse it, a second encoding pass.
// r may be nil (compact).
func writeJSON(w http.ResponseWriter, r *http.Request, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	if r != nil && pretty(r) {
		enc.SetIndent("", "  ")
	}
	_ = enc.Encode(v)
}

func pretty(r *http.Request) bool {
	if v, ok := r.URL.Query()["pretty"]; ok && (len(v) == 0 || v[0] != "0" && v[0] != "false") {
		return true
	}
	ua := r.UserAgent()
	return strings.HasPrefix(ua, "curl/") || strings.HasPrefix(ua, "Wget/")
}

func writeError(w http.ResponseWriter, code int, err error) {
	body := api.ErrorBody{Error: err.Error()}
	var ve *api.ValidationError
	if errors.As(err, &ve) {
		body.Fields = ve.Fields
	}
	writeJSON(w, nil, code, body)
}

func statusFor(err error) int {
	switch {
	case errors.Is(err, api.ErrInvalid):
		return http.StatusBadRequest
	case errors.Is(err, errForbidden):
		return http.StatusForbidden
	case errors.Is(err, store.ErrNotFound):
		return http.StatusNotFound
	case errors.Is(err, store.ErrConflict), errors.Is(err, errConflict), errors.Is(err, store.ErrKeyTaken):
		return http.StatusConflict
	case errors.Is(err, store.ErrUnavailable), errors.Is(err, store.ErrStale),
		errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}

var errConflict = errors.New("conflict")

// admitStatus is the status of a refused submission: 403 for a caller who
// may not, else 422.
func admitStatus(err error) int {
	if errors.Is(err, errForbidden) {
		return http.StatusForbidden
	}
	if errors.Is(err, api.ErrInvalid) {
		return http.StatusUnprocessableEntity
	}
	return statusFor(err)
}

// decodeBody reads the request body and decodes it with decode; on failure
// it has written the error response and ok is false.
func decodeBody[T any](w http.ResponseWriter, r *http.Request, decode func([]byte) (T, error)) (v T, ok bool) {
	b, err := readRaw(w, r) // the spec decoders run api.CheckShape first
	if err == nil {
		v, err = decode(b)
	}
	if err != nil {
		writeError(w, statusFor(err), err)
		return v, false
	}
	return v, true
}

// readRaw reads a request body of at most maxBody bytes.
func readRaw(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	var tooBig *http.MaxBytesError
	if errors.As(err, &tooBig) {
		return nil, api.ErrorForField("", "the body is over %d bytes", tooBig.Limit)
	}
	if err != nil {
		return nil, api.ErrorForField("", "reading body: %s", err)
	}
	return b, nil
}

// readBody is readRaw for the bodies decoded with encoding/json or
// fastjson (the agents'): it refuses one nested too deep for a decoder
// (api.CheckNesting) before any decoder sees it. Specs go through
// decodeBody, whose decoders run api.CheckShape, the same scan with a
// bound on values.
func readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	b, err := readRaw(w, r)
	if err != nil {
		return nil, err
	}
	if err := api.CheckNesting(b); err != nil {
		return nil, err
	}
	return b, nil
}

// onlyParams refuses the query parameters the endpoint does not take,
// naming each and what it takes, so that a typo (?sinse=7d) is not
// ignored into an answer to another question. pretty is taken everywhere.
func onlyParams(r *http.Request, takes ...string) error {
	var fe api.FieldErrors
	q := r.URL.Query()
	for _, k := range slices.Sorted(maps.Keys(q)) {
		if k != "pretty" && !slices.Contains(takes, k) {
			fe.Add(k, "unknown query parameter: %s %s takes %s", r.Method, r.URL.Path, strings.Join(takes, ", "))
		}
	}
	return fe.Err()
}

// blockingParams reads ?index=N&wait=D (index 0 when absent: answer at
// once; wait 30s by default, at most 5m).
func blockingParams(r *http.Request) (int64, time.Duration, error) {
	q := r.URL.Query()
	wait := 30 * time.Second
	if q.Get("index") == "" {
		return 0, wait, nil
	}
	idx, err := strconv.ParseInt(q.Get("index"), 10, 64)
	if err != nil || idx < 0 {
		return 0, 0, api.ErrorForField("index", "must be a non-negative integer")
	}
	if ws := q.Get("wait"); ws != "" {
		if wait, err = time.ParseDuration(ws); err != nil || wait < 0 {
			return 0, 0, api.ErrorForField("wait", "must be a duration such as 30s")
		}
		wait = min(wait, 5*time.Minute)
	}
	return idx, wait, nil
}

// blockingIndex implements ?index=N&wait=D: wait until something under
// prefix changed after N.
func (s *Server) blockingIndex(r *http.Request, prefix string) error {
	return s.block(r, func(ctx context.Context, after int64, wait time.Duration) (int64, error) {
		return s.st.WaitChange(ctx, prefix, after, wait)
	})
}

// blockedIndex implements ?index=N&wait=D for an answer read in several
// steps: it waits as block does, then returns the store's revision for
// the caller to answer as its index. Read before the answer, it makes
// anything that changes while the answer is read wake the next query.
func (s *Server) blockedIndex(r *http.Request, waitFor func(ctx context.Context, after int64, wait time.Duration) (int64, error)) (int64, error) {
	if err := s.block(r, waitFor); err != nil {
		return 0, err
	}
	return s.st.Revision(r.Context())
}

// block implements ?index=N&wait=D with waitFor, one of the store's waits
// for what the answer is made of to change after N (at most D).
func (s *Server) block(r *http.Request, waitFor func(ctx context.Context, after int64, wait time.Duration) (int64, error)) error {
	idx, wait, err := blockingParams(r)
	if err != nil || idx == 0 {
		return err
	}
	_, err = waitFor(r.Context(), idx, wait)
	return err
}

func jsonBytes(v any) ([]byte, error) { return json.Marshal(v) }
