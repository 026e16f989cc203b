package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gangway/gangway/internal/api"
	"github.com/gangway/gangway/internal/api/client"
	"github.com/gangway/gangway/internal/controlplane/audit"
	"github.com/gangway/gangway/internal/controlplane/store"
)

// Token lives, unless the request says otherwise.
const (
	defaultUserTokenTTL = 90 * 24 * time.Hour
	defaultJoinTokenTTL = time.Hour
	// BootstrapAdmin is the user of the admin token the server makes on
	// its first start.
	BootstrapAdmin = "admin"
)

func (s *Server) tokenRoutes(mux *http.ServeMux) {
	mux.HandleFunc("POST /v1/tokens", s.createToken)
	mux.HandleFunc("GET /v1/tokens", s.listTokens)
	mux.HandleFunc("DELETE /v1/tokens/{id}", s.revokeToken)
	mux.HandleFunc("GET /v1/whoami", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, r, http.StatusOK, who(r))
	})
	mux.HandleFunc("GET /v1/audit", s.auditRecords)
}

// auditRecords answers GET /v1/audit?who=&since=&limit=: the newest
// mutating requests this replica served, oldest first.
func (s *Server) auditRecords(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	var f audit.Filter
	var fe api.FieldErrors
	f.Who = q.Get("who")
	if v := q.Get("since"); v != "" {
		t, err := time.Parse(time.RFC3339Nano, v)
		if err != nil {
			fe.Add("since", "%q: want a time such as 2026-12-02T10:00:00Z", v)
		}
		f.Since = t
	}
	f.Limit = 100
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			fe.Add("limit", "%q: want a positive integer", v)
		}
		f.Limit = n
	}
	if err := fe.Err(); err != nil {
		writeError(w, http.StatusBadRequest, err)
		return
	}
	if s.audit == nil {
		writeJSON(w, r, http.StatusOK, []api.AuditRecord{})
		return
	}
	recs := s.audit.Recent(f)
	if recs == nil {
		recs = []api.AuditRecord{}
	}
	writeJSON(w, r, http.StatusOK, recs)
}

func (s *Server) createToken(w http.ResponseWriter, r *http.Request) {
	req, ok := decodeBody(w, r, func(b []byte) (api.TokenRequest, error) {
		var q api.TokenRequest
		if err := api.DecodeStrict(b, &q); err != nil {
			return q, err
		}
		return q, q.Validate()
	})
	if !ok {
		return
	}
	created, err := s.issueToken(r.Context(), req, describeWho(who(r)), time.Now())
	if err != nil {
		writeError(w, statusFor(err), err)
		return
	}
	writeJSON(w, r, http.StatusCreated, created)
}

// issueToken makes and stores a token for a validated request.
func (s *Server) issueToken(ctx context.Context, req api.TokenRequest, by string, now time.Time) (*api.TokenCreated, error) {
	t := api.Token{Kind: req.Kind, User: req.User, Role: req.Role, Groups: req.Groups,
		Description: req.Description, CreatedBy: by, CreatedAt: now.UTC()}
	ttl := req.TTL.D()
	prefix := userTokenPrefix
	if t.Kind == api.TokenJoin {
		prefix = joinTokenPrefix
		if ttl == 0 {
			ttl = defaultJoinTokenTTL
		}
		t.UsesLeft = max(req.Uses, 1)
	} else {
		t.Kind = api.TokenUser
		if ttl == 0 {
			ttl = defaultUserTokenTTL
		}
		runAs, err := runAsFor(req)
		if err != nil {
			return nil, err
		}
		t.RunAs = runAs
	}
	t.ExpiresAt = now.Add(ttl).UTC()
	text, id, hash := newToken(prefix)
	t.ID, t.Hash = id, hash
	if err := s.st.CreateToken(ctx, &t); err != nil {
		return nil, err
	}
	t.Hash = ""
	return &api.TokenCreated{Token: t, Secret: text}, nil
}

// runAsFor maps a user token's user to a Unix account: the request's uid
// and gid, else the account of that name on the server (as Slurm, gangway
// relies on the same accounts on every node). An admin without one runs
// jobs as the agents' own user; anyone else must have one.
func runAsFor(req api.TokenRequest) (*api.RunAs, error) {
	if req.UID != nil {
		gid := *req.UID
		if req.GID != nil {
			gid = *req.GID
		}
		return &api.RunAs{User: req.User, UID: *req.UID, GID: gid}, nil
	}
	if req.GID != nil {
		return nil, api.ErrorForField("gid", "give uid with it")
	}
	if u, err := user.Lookup(req.User); err == nil {
		uid, err1 := strconv.Atoi(u.Uid)
		gid, err2 := strconv.Atoi(u.Gid)
		if err1 == nil && err2 == nil {
			return &api.RunAs{User: req.User, UID: uid, GID: gid}, nil
		}
	}
	if req.Role == api.RoleUser {
		return nil, api.ErrorForField("uid", "user %s has no Unix account on the server to run jobs as; give its uid and gid (gangway token create --uid N --gid N)", req.User)
	}
	return nil, nil
}

func (s *Server) listTokens(w http.ResponseWriter, r *http.Request) {
	ts, err := s.st.Tokens(r.Context())
	if err != nil {
		writeError(w, statusFor(err), err)
		return
	}
	for _, t := range ts {
		t.Hash = ""
	}
	slices.SortFunc(ts, func(a, b *api.Token) int { return a.CreatedAt.Compare(b.CreatedAt) })
	writeJSON(w, r, http.StatusOK, ts)
}

// revokeToken marks a token revoked: it stays listed (so that a refused
// caller is told "revoked", not "unknown") until it would have expired.
func (s *Server) revokeToken(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	// Accept the whole token text as well as its id.
	if _, tid, _, ok := splitToken(id); ok {
		id = tid
	}
	ctx := r.Context()
	for {
		t, err := s.st.Token(ctx, id)
		if err != nil {
			writeError(w, statusFor(err), err)
			return
		}
		if t.RevokedAt.IsZero() {
			t.RevokedAt = time.Now().UTC()
		}
		err = s.st.PutToken(ctx, t)
		if errors.Is(err, store.ErrConflict) {
			continue
		}
		s.tokens.drop(id)
		if err != nil {
			writeError(w, statusFor(err), err)
			return
		}
		t.Hash = ""
		writeJSON(w, r, http.StatusOK, t)
		return
	}
}

// AdminConfigFile is where a server's first start leaves the admin's
// client configuration (token, CA, server URL), 0600, under --data-dir.
const AdminConfigFile = "admin.conf"

// bootstrap makes the first admin token when the store has no token at
// all, and writes it with the CA and the server's URL to
// DataDir/admin.conf, and to Config.ClientConfig when set. Later starts
// change nothing.
func (s *Server) bootstrap(ctx context.Context, serverURL string) error {
	ts, err := s.st.Tokens(ctx)
	if err != nil {
		return err
	}
	if len(ts) > 0 || s.cfg.DataDir == "" {
		return nil
	}
	t, err := s.issueToken(ctx, api.TokenRequest{Kind: api.TokenUser, User: BootstrapAdmin, Role: api.RoleAdmin,
		TTL: api.Duration(10 * 365 * 24 * time.Hour), Description: "made on the server's first start"}, "server", time.Now())
	if err != nil {
		return fmt.Errorf("server: bootstrap admin token: %w", err)
	}
	cc := client.Context{Name: contextName(serverURL), Server: serverURL, Token: t.Secret, CAFile: s.caFile()}
	if err := client.SaveContext(filepath.Join(s.cfg.DataDir, AdminConfigFile), cc, true); err != nil {
		return err
	}
	s.log.Info("made the admin token", "config", filepath.Join(s.cfg.DataDir, AdminConfigFile))
	if s.cfg.ClientConfig != "" {
		if err := client.SaveContext(s.cfg.ClientConfig, cc, true); err != nil {
			s.log.Warn("cannot write the client config; use the one under --data-dir", "err", err, "path", s.cfg.ClientConfig)
		} else {
			s.log.Info("client config updated", "path", s.cfg.ClientConfig, "context", cc.Name)
		}
	}
	return nil
}

// contextName names a client config context after the server's host.
func contextName(serverURL string) string {
	h := strings.TrimPrefix(strings.TrimPrefix(serverURL, "https://"), "http://")
	return strings.NewReplacer(":", "-", "/", "-", "[", "", "]", "").Replace(h)
}

func (s *Server) caFile() string {
	if s.cfg.TLSCA != "" {
		if abs, err := filepath.Abs(s.cfg.TLSCA); err == nil {
			return abs
		}
		return s.cfg.TLSCA
	}
	return filepath.Join(s.pkiDir(), "ca.crt")
}
