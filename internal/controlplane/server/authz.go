package server

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/gangway/gangway/internal/api"
	"github.com/gangway/gangway/internal/controlplane/audit"
	"github.com/gangway/gangway/internal/controlplane/store"
)

// Authorization: what a caller may do. Every route has an access level in
// routeAccess, checked before its handler runs; a route without one is
// refused to everyone (TestEveryRouteHasAccess keeps the table whole).
// Ownership (a user's own jobs and deployments) and queue permissions need
// the object, so the handlers check them with mayAct and mayUseQueue.

// access is what a route needs.
type access int

const (
	// public: anyone, even anonymous (health; the join checks its own
	// token).
	public access = iota
	// agent: a node's certificate; the handler checks the node it names.
	agent
	// read: any user role (viewer and up) or a server.
	read
	// act: a user or admin; the handler checks ownership.
	act
	// admin: admins alone.
	admin
	// authenticated: anyone authenticated (whoami).
	authenticated
)

// routeAccess maps each route pattern (as registered on the mux) to what
// it needs.
var routeAccess = map[string]access{
	"GET /healthz":                      public,
	"GET /openapi.json":                 public,
	"POST /v1/agent/join":               public,
	"POST /v1/agent/register":           agent,
	"POST /v1/agent/heartbeat":          agent,
	"GET /v1/agent/assignments":         agent,
	"POST /v1/agent/renew":              agent,
	"GET /v1/whoami":                    authenticated,
	"POST /v1/jobs":                     act,
	"GET /v1/jobs":                      read,
	"GET /v1/jobs/{id}":                 read,
	"POST /v1/jobs/{id}/cancel":         act,
	"GET /v1/jobs/{id}/logs":            act,
	"POST /v1/jobs/{id}/priority":       act,
	"POST /v1/jobs/{id}/hold":           act,
	"POST /v1/jobs/{id}/release":        act,
	"POST /v1/jobs/{id}/requeue":        act,
	"POST /v1/jobs/{id}/signal":         act,
	"POST /v1/deployments":              act,
	"GET /v1/deployments":               read,
	"GET /v1/deployments/{name}":        read,
	"POST /v1/deployments/{name}/scale": act,
	"DELETE /v1/deployments/{name}":     act,
	"GET /v1/nodes":                     read,
	"GET /v1/nodes/{name}":              read,
	"POST /v1/nodes/{name}/{action}":    admin,
	"POST /v1/queues":                   admin,
	"GET /v1/queues":                    read,
	"DELETE /v1/queues/{name}":          admin,
	"POST /v1/tokens":                   admin,
	"GET /v1/tokens":                    admin,
	"DELETE /v1/tokens/{id}":            admin,
	"GET /v1/audit":                     admin,
	"GET /v1/reports/usage":             read,
	"GET /v1/gateway/stats":             read,
	// A simulation changes nothing but spends the replica's CPU: users
	// and admins may run one, viewers only see what may be run.
	"GET /v1/simulate/traces": read,
	"POST /v1/simulate":       act,
	"GET /ui/":                public,
	"GET /{$}":                public,
	"GET /v1/top/jobs":        read,
	"GET /v1/events":          read,
	"/":                       authenticated,
}

var (
	errForbidden = errors.New("forbidden")
)

// guard authenticates every request and lets it through to mux only if its
// route's access allows the caller: 401 when it is not authenticated (or
// its credentials do not hold), 403 when it is but may not.
func (s *Server) guard(mux *http.ServeMux) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, pattern := mux.Handler(r)
		need, ok := routeAccess[pattern]
		if !ok {
			writeError(w, http.StatusForbidden, fmt.Errorf("%s %s: no access rule for this route; refused", r.Method, r.URL.Path))
			return
		}
		if need == public {
			// Health, and the join, which checks its own token.
			mux.ServeHTTP(w, r)
			return
		}
		wh, err := s.authenticate(r)
		if errors.Is(err, store.ErrUnavailable) {
			// The credentials could not be checked, not found wrong.
			writeError(w, http.StatusServiceUnavailable, fmt.Errorf("authenticate: %w", err))
			return
		}
		if err != nil {
			s.refusedAuth.Add(1)
			w.Header().Set("WWW-Authenticate", `Bearer realm="gangway"`)
			writeError(w, http.StatusUnauthorized, fmt.Errorf("unauthenticated: %w", err))
			return
		}
		if wh != nil {
			r = r.WithContext(context.WithValue(r.Context(), whoKey{}, wh))
			audit.Annotate(r.Context(), wh.Name, wh.Kind, wh.Role)
		}
		if ok, retry := s.allowRate(r, wh); !ok {
			w.Header().Set("Retry-After", strconv.Itoa(int(max(1, math.Ceil(retry.Seconds())))))
			writeError(w, http.StatusTooManyRequests, fmt.Errorf("too many requests from %s: at most %g a second; retry after %s", describeWho(wh), s.cfg.APIRate, retry.Round(time.Millisecond)))
			return
		}
		if err := allowed(need, wh); err != nil {
			code := http.StatusForbidden
			if wh == nil {
				code = http.StatusUnauthorized
				w.Header().Set("WWW-Authenticate", `Bearer realm="gangway"`)
			}
			writeError(w, code, err)
			return
		}
		mux.ServeHTTP(w, r)
	})
}

// allowRate spends one of the caller's requests: users by name, the
// unauthenticated by address; admins, servers and nodes are not limited
// (operators, and agents whose rate the protocol bounds).
func (s *Server) allowRate(r *http.Request, wh *api.Who) (bool, time.Duration) {
	if s.limiter == nil {
		return true, 0
	}
	key := ""
	switch {
	case wh == nil:
		host, _, _ := net.SplitHostPort(r.RemoteAddr)
		key = "ip:" + host
	case wh.Kind == kindNode || isAdmin(wh):
		return true, 0
	default:
		key = "user:" + wh.Name
	}
	return s.limiter.Allow(key)
}

// allowed checks a route's access against the caller.
func allowed(need access, wh *api.Who) error {
	if need == public {
		return nil
	}
	if wh == nil {
		return errNoCredentials
	}
	switch need {
	case authenticated:
		return nil
	case agent:
		if wh.Kind != kindNode {
			return fmt.Errorf("%w: only agents call this, with their node certificate (you are %s)", errForbidden, describeWho(wh))
		}
		return nil
	}
	if wh.Kind == kindNode {
		return fmt.Errorf("%w: a node's certificate only speaks for the node's agent", errForbidden)
	}
	role := wh.Role
	if wh.Kind == kindServer {
		role = api.RoleAdmin
	}
	switch {
	case need == read:
		return nil
	case need == act && role == api.RoleViewer:
		return fmt.Errorf("%w: %s may only read", errForbidden, describeWho(wh))
	case need == act:
		return nil
	case need == admin && role != api.RoleAdmin:
		return fmt.Errorf("%w: only admins may do this (you are %s)", errForbidden, describeWho(wh))
	}
	return nil
}

// isAdmin reports whether the caller has the admin role.
func isAdmin(wh *api.Who) bool {
	return wh != nil && (wh.Role == api.RoleAdmin || wh.Kind == kindServer)
}

// owns reports whether the caller may act on what user owns: its owner,
// or an admin.
func owns(wh *api.Who, user string) bool {
	return isAdmin(wh) || wh != nil && wh.Kind == kindUser && wh.Role == api.RoleUser && wh.Name == user
}

// mayAct refuses a caller acting on another user's object (what names it,
// e.g. "job 7"), in words.
func mayAct(wh *api.Who, what, owner string) error {
	if owns(wh, owner) {
		return nil
	}
	if owner == "" {
		return fmt.Errorf("%w: %s belongs to no user; only admins may change it", errForbidden, what)
	}
	return fmt.Errorf("%w: %s belongs to %s; only its owner or an admin may do this", errForbidden, what, owner)
}

// mayUseQueue refuses a user submitting to a queue that does not admit it.
func mayUseQueue(wh *api.Who, q *api.QueueSpec) error {
	if isAdmin(wh) || q == nil || q.Admits(wh.Name, wh.Groups) {
		return nil
	}
	return fmt.Errorf("%w: queue %s admits only its users and groups; %s is not one (an admin adds you: gangway queue set %s --users ...)", errForbidden, q.Name, wh.Name, q.Name)
}

// seesSecrets reports whether the caller may see what user's objects hold
// in their environment: the owner and admins.
func seesSecrets(wh *api.Who, user string) bool { return owns(wh, user) }

// redactJobs is jobs with the environment of those the caller may not
// see redacted (copies; the cache's are shared).
func redactJobs(wh *api.Who, jobs []*api.Job) []*api.Job {
	var out []*api.Job
	for i, j := range jobs {
		if len(j.Spec.Env) == 0 || seesSecrets(wh, j.Spec.User) {
			if out != nil {
				out = append(out, j)
			}
			continue
		}
		if out == nil {
			out = append(make([]*api.Job, 0, len(jobs)), jobs[:i]...)
		}
		out = append(out, redactJob(j))
	}
	if out == nil {
		return jobs
	}
	return out
}

// redactJob is a copy of j with its environment's values hidden.
func redactJob(j *api.Job) *api.Job {
	c := *j
	c.Spec.Env = redactEnv(j.Spec.Env)
	return &c
}

// redactEnv replaces every env value of a job the caller may not see.
func redactEnv(env map[string]string) map[string]string {
	if len(env) == 0 {
		return env
	}
	out := make(map[string]string, len(env))
	for k := range env {
		out[k] = "(redacted)"
	}
	return out
}
