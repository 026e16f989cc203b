package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/gangway/gangway/internal/api"
)

// The simulator on the server: POST /v1/simulate replays a trace, named
// from Config.TraceDir or uploaded, through Config.Simulator, for the
// dashboard's Simulate page. The simulator (internal/sim) is no part of
// this tier; the cli tier hands one in (simcli.Service). A run is CPU
// work on the replica that received it, so one runs at a time on each
// replica, for at most maxSimulateTime, and ends when its caller goes.

// Simulator replays traces. Its methods may be called from any goroutine.
type Simulator interface {
	// Policies are the names Simulate takes in req.Policies; the first
	// is the default.
	Policies() []string
	// Simulate reads a trace (name is for messages) and replays it with
	// req's options, blocking until every run has ended or ctx is done.
	// Bad options are an *api.ValidationError naming the field (a
	// malformed trace names "trace" or "traceData"); other errors are
	// the simulator's.
	Simulate(ctx context.Context, name string, trace io.Reader, req api.SimulateRequest) (*api.SimulateResult, error)
}

// maxSimulateTime bounds one run, whoever waits for it.
const maxSimulateTime = 10 * time.Minute

// simSlot lets one simulation run at a time.
type simSlot struct {
	mu    sync.Mutex // guards who and since
	who   string     // the running simulation's caller; "" when none runs
	since time.Time
}

// take claims the slot for who; when another holds it, it answers false
// and a sentence saying whose run it is and for how long it has run.
func (sl *simSlot) take(who string, now time.Time) (bool, string) {
	sl.mu.Lock()
	defer sl.mu.Unlock()
	if sl.who != "" {
		return false, fmt.Sprintf("another simulation is running on this server (%s's, for %s); one runs at a time: try again when it ends",
			sl.who, now.Sub(sl.since).Round(time.Second))
	}
	sl.who, sl.since = who, now
	return true, ""
}

func (sl *simSlot) release() {
	sl.mu.Lock()
	sl.who = ""
	sl.mu.Unlock()
}

func (s *Server) simulateRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /v1/simulate/traces", s.simulateTraces)
	mux.HandleFunc("POST /v1/simulate", s.simulate)
}

// errNoSimulator answers both routes on a server built without one.
var errNoSimulator = errors.New("this server has no simulator (a server built without internal/sim); run `gangway simulate` instead")

// simulatorReady answers a request the simulate routes cannot take (no
// simulator, query parameters) and reports whether it may go on.
func (s *Server) simulatorReady(w http.ResponseWriter, r *http.Request) bool {
	if s.cfg.Simulator == nil {
		writeError(w, http.StatusNotImplemented, errNoSimulator)
		return false
	}
	if err := onlyParams(r); err != nil {
		writeError(w, http.StatusBadRequest, err)
		return false
	}
	return true
}

func (s *Server) simulateTraces(w http.ResponseWriter, r *http.Request) {
	if !s.simulatorReady(w, r) {
		return
	}
	pols := s.cfg.Simulator.Policies()
	out := api.SimulateTraces{TraceDir: s.cfg.TraceDir != "", Traces: []api.SimTrace{}, Policies: pols, MaxTraceBytes: api.MaxTraceBytes}
	if len(pols) > 0 {
		out.DefaultPolicy = pols[0]
	}
	if s.cfg.TraceDir != "" {
		ents, err := os.ReadDir(s.cfg.TraceDir)
		if err != nil {
			writeError(w, http.StatusInternalServerError, fmt.Errorf("list the trace directory: %w", err))
			return
		}
		for _, e := range ents {
			if !api.PlainFileName(e.Name()) {
				continue
			}
			// Stat follows a link: the operator's links to traces
			// elsewhere are traces.
			fi, err := os.Stat(filepath.Join(s.cfg.TraceDir, e.Name()))
			if err != nil || !fi.Mode().IsRegular() {
				continue
			}
			out.Traces = append(out.Traces, api.SimTrace{Name: e.Name(), Bytes: fi.Size()})
		}
	}
	writeJSON(w, r, http.StatusOK, out)
}

func (s *Server) simulate(w http.ResponseWriter, r *http.Request) {
	if !s.simulatorReady(w, r) {
		return
	}
	// The slot first, so that uploads waiting for it hold no memory.
	ok, busy := s.sim.take(callerName(who(r)), time.Now())
	if !ok {
		w.Header().Set("Retry-After", "5")
		writeError(w, http.StatusTooManyRequests, errors.New(busy))
		return
	}
	defer s.sim.release()
	req, err := readSimulateRequest(w, r)
	if err != nil {
		writeError(w, http.StatusBadRequest, err)
		return
	}
	name, trace, err := s.openTrace(req)
	if err != nil {
		writeError(w, statusFor(err), err)
		return
	}
	defer trace.Close()
	ctx, cancel := context.WithTimeout(r.Context(), maxSimulateTime)
	defer cancel()
	start := time.Now()
	res, err := s.cfg.Simulator.Simulate(ctx, name, trace, req)
	switch {
	case errors.Is(err, api.ErrInvalid):
		writeError(w, http.StatusBadRequest, err)
		return
	case errors.Is(ctx.Err(), context.DeadlineExceeded) && r.Context().Err() == nil:
		writeError(w, http.StatusServiceUnavailable, fmt.Errorf("simulate %s: it ran past %s, the server's bound; replay a shorter window (from, to) or fewer policies, or run `gangway simulate`", name, maxSimulateTime))
		return
	case err != nil:
		writeError(w, statusFor(err), fmt.Errorf("simulate %s: %w", name, err))
		return
	}
	res.Seconds = time.Since(start).Seconds()
	s.log.Info("simulated", "trace", name, "jobs", res.Jobs, "policies", len(res.Runs), "seconds", res.Seconds, "who", callerName(who(r)))
	writeJSON(w, r, http.StatusOK, res)
}

// readSimulateRequest decodes the body strictly (an unknown key is an
// error), reading at most an upload's bound and its JSON escaping.
func readSimulateRequest(w http.ResponseWriter, r *http.Request) (api.SimulateRequest, error) {
	var req api.SimulateRequest
	limit := int64(api.MaxTraceBytes + api.MaxTraceBytes/4 + 1<<20)
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, limit))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return req, api.ErrorForField("traceData", "the body is over %d bytes: an uploaded trace may have at most %d MiB (put bigger ones in the server's --trace-dir)", limit, api.MaxTraceBytes>>20)
		}
		var syn *json.SyntaxError
		var typ *json.UnmarshalTypeError
		switch {
		case errors.As(err, &typ):
			return req, api.ErrorForField(typ.Field, "want a %s, got %s", typ.Type, typ.Value)
		case errors.As(err, &syn), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
			return req, api.ErrorForField("", "the body is not a JSON object: %v", err)
		case strings.HasPrefix(err.Error(), "json: unknown field "):
			f := strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`)
			return req, api.ErrorForField(f, "unknown field (see POST /v1/simulate in /openapi.json)")
		}
		return req, api.ErrorForField("", "reading the body: %v", err)
	}
	if dec.More() {
		return req, api.ErrorForField("", "the body has more after its JSON object")
	}
	return req, req.Validate()
}

// openTrace opens the trace req names in the trace directory, or reads
// its upload.
func (s *Server) openTrace(req api.SimulateRequest) (string, io.ReadCloser, error) {
	if req.TraceData != "" {
		name := cmpOr(filepath.Base(req.TraceName), "upload")
		return name, io.NopCloser(strings.NewReader(req.TraceData)), nil
	}
	if s.cfg.TraceDir == "" {
		return "", nil, api.ErrorForField("trace", "this server has no trace directory (gangway server --trace-dir): upload the trace as traceData")
	}
	f, err := os.Open(filepath.Join(s.cfg.TraceDir, req.Trace))
	if errors.Is(err, os.ErrNotExist) {
		var names []string
		if ents, err := os.ReadDir(s.cfg.TraceDir); err == nil {
			for _, e := range ents {
				if api.PlainFileName(e.Name()) {
					names = append(names, e.Name())
				}
			}
		}
		slices.Sort(names)
		return "", nil, api.ErrorForField("trace", "no trace %q in the trace directory (it has %s)", req.Trace, orNone(names))
	}
	if err != nil {
		return "", nil, fmt.Errorf("open trace %s: %w", req.Trace, err)
	}
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		f.Close()
		return "", nil, api.ErrorForField("trace", "%q in the trace directory is not a file", req.Trace)
	}
	return req.Trace, f, nil
}

// callerName names a caller by name alone.
func callerName(wh *api.Who) string {
	if wh == nil {
		return "anonymous"
	}
	return wh.Name
}

func cmpOr(s, def string) string {
	if s == "" || s == "." || s == "/" {
		return def
	}
	return s
}

func orNone(names []string) string {
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}
