package server

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/gangway/gangway/internal/api"
)

func (s *Server) eventRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /v1/events", s.listEvents)
}

// eventParams are the parameters GET /v1/events takes: any other is
// refused, so that a misspelt filter does not quietly match everything.
var eventParams = []string{"job", "node", "deployment", "queue", "kind", "since", "limit", "index", "wait", "pretty"}

// listEvents answers GET /v1/events?job=&node=&deployment=&queue=&kind=&since=
// &limit=&index=&wait=: the events the filters keep, oldest first (with
// limit, the newest limit of them), from this replica's event log. With
// index=N it is a blocking query, as the lists': it answers once an event
// past N that the filters keep is there, or after wait (30s) with none.
func (s *Server) listEvents(w http.ResponseWriter, r *http.Request) {
	f, limit, err := eventQuery(r, time.Now())
	if err != nil {
		writeError(w, http.StatusBadRequest, err)
		return
	}
	idx, wait, err := blockingParams(r)
	if err != nil {
		writeError(w, http.StatusBadRequest, err)
		return
	}
	if idx == 0 {
		// Everything written before the request is in the log (a replica
		// just started has loaded the store; a write's answer came before).
		if _, err := s.cacheCaughtUp(r.Context()); err != nil {
			writeError(w, statusFor(err), err)
			return
		}
	}
	// A server shutting down ends a blocking query at once: the client
	// asks again, here once restarted or at another replica.
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	defer context.AfterFunc(s.closing, cancel)()
	// Every event up to the cache's revision is in the log now: the next
	// query may wait past it, even when there is no event yet.
	rev := s.cache.Revision()
	evs, next := s.evlog.Events(ctx, idx, &f, limit, wait)
	next = max(next, rev)
	if s.closing.Err() != nil {
		writeError(w, statusFor(errShuttingDown), errShuttingDown)
		return
	}
	if evs == nil {
		evs = []api.Event{}
	}
	w.Header().Set("X-Gangway-Index", strconv.FormatInt(next, 10))
	writeJSON(w, r, http.StatusOK, api.EventList{Index: next, Events: evs})
}

// eventQuery reads GET /v1/events's filters and limit; every parameter it
// does not know, and every value it cannot read, is a field of the error.
func eventQuery(r *http.Request, now time.Time) (api.EventFilter, int, error) {
	q := r.URL.Query()
	var fe api.FieldErrors
	names := make([]string, 0, len(q))
	for k := range q {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		if !slices.Contains(eventParams, k) {
			fe.Add(k, "unknown parameter: events are filtered by %s", strings.Join(eventParams[:7], ", "))
		}
	}
	f := api.EventFilter{Job: q.Get("job"), Node: q.Get("node"), Deployment: q.Get("deployment"), Queue: q.Get("queue")}
	if v := api.ObjectKind(q.Get("kind")); v != "" {
		if !slices.Contains(api.ObjectKinds, v) {
			fe.Add("kind", "%q: want job, node, deployment or queue", v)
		}
		f.Kind = v
	}
	if v := q.Get("since"); v != "" {
		t, err := api.ParseSince(v, now)
		if err != nil {
			fe.Add("since", "%s", fieldMsg(err))
		}
		f.Since = t
	}
	limit := 0
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			fe.Add("limit", "%q: want a positive integer", v)
		}
		limit = n
	}
	return f, limit, fe.Err()
}

// cacheCaughtUp waits, at most 5s, until the cache has applied the
// store's current revision, which it returns.
func (s *Server) cacheCaughtUp(ctx context.Context) (int64, error) {
	rev, err := s.st.Revision(ctx)
	if err != nil {
		return 0, err
	}
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := s.cache.WaitRevision(wctx, rev); err != nil {
		return 0, fmt.Errorf("server: the cache is behind the store: %w", err)
	}
	return rev, nil
}
