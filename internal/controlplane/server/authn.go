package server

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/gangway/gangway/internal/api"
	"github.com/gangway/gangway/internal/base/pki"
	"github.com/gangway/gangway/internal/controlplane/store"
)

// Authentication: who is calling. A request proves it one of three ways,
// tried in order:
//
//   - a client certificate from the cluster CA (verified by the TLS
//     handshake): an agent, as the node its certificate names, or another
//     server;
//   - a bearer token of ours ("gwt_<id>_<secret>"): its record, kept in
//     the store with the secret's hash alone, says the user, role, groups
//     and Unix account; expired and revoked tokens say so;
//   - a bearer token that is an OIDC ID token, where the operator
//     configured an issuer (oidc.go).
//
// Anything else is anonymous, which only /healthz and the join admit
// (authz.go).

// Identity kinds.
const (
	kindUser   = "user"
	kindNode   = "node"
	kindServer = "server"
)

// Token prefixes: user tokens and join tokens look different, so that a
// join token pasted as a user's is named as such.
const (
	userTokenPrefix = "gwt_"
	joinTokenPrefix = "gwj_"
	tokenIDBytes    = 6
	tokenSecretLen  = 32
)

// errUnauthenticated and friends are what a 401 says.
var (
	errNoCredentials = errors.New("no credentials: send a token (Authorization: Bearer TOKEN; gangway reads it from --token, $GANGWAY_TOKEN or the client config) or a node certificate")
	errBadToken      = errors.New("the token is not valid: wrong or unknown")
	errExpiredToken  = errors.New("the token has expired: ask an admin for a new one (gangway token create)")
	errRevokedToken  = errors.New("the token was revoked")
	errRevokedNode   = errors.New("this node's certificate was revoked (gangway node revoke); join again with a new join token")
	errJoinAsUser    = errors.New("a join token only joins a node (gangway agent --join); it cannot call the API")
)

type whoKey struct{}

// who is the caller r was authenticated as; nil for anonymous.
func who(r *http.Request) *api.Who {
	w, _ := r.Context().Value(whoKey{}).(*api.Who)
	return w
}

// newToken draws a token: its text, given to the caller once, and its
// record's id and hash.
func newToken(prefix string) (text, id, hash string) {
	b := make([]byte, tokenIDBytes+tokenSecretLen)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	id = hex.EncodeToString(b[:tokenIDBytes])
	secret := base64.RawURLEncoding.EncodeToString(b[tokenIDBytes:])
	return prefix + id + "_" + secret, id, hashSecret(secret)
}

func hashSecret(secret string) string {
	h := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(h[:])
}

// splitToken reads a token's prefix, id and secret; ok false if it is not
// one of ours.
func splitToken(tok string) (prefix, id, secret string, ok bool) {
	for _, p := range []string{userTokenPrefix, joinTokenPrefix} {
		if rest, found := strings.CutPrefix(tok, p); found {
			id, secret, ok = strings.Cut(rest, "_")
			return p, id, secret, ok && len(id) == 2*tokenIDBytes && secret != ""
		}
	}
	return "", "", "", false
}

// tokenCache holds token records read from the store for a short while:
// each request would otherwise cost a store read. Revocation on this
// replica drops the entry at once; on others it takes effect within
// tokenCacheTTL.
type tokenCache struct {
	mu sync.Mutex // guards m
	m  map[string]cachedToken
}

type cachedToken struct {
	t  *api.Token
	at time.Time
}

const tokenCacheTTL = 2 * time.Second

func (c *tokenCache) get(id string, now time.Time) (*api.Token, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[id]
	if !ok || now.Sub(e.at) > tokenCacheTTL {
		return nil, false
	}
	return e.t, true
}

func (c *tokenCache) put(t *api.Token, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m) > 100000 {
		c.m = map[string]cachedToken{}
	}
	c.m[t.ID] = cachedToken{t, now}
}

func (c *tokenCache) drop(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.m, id)
}

// lookupToken finds the record of a token's id and checks the secret
// against it (constant time), its expiry and revocation.
func (s *Server) lookupToken(ctx context.Context, id, secret string) (*api.Token, error) {
	now := time.Now()
	t, ok := s.tokens.get(id, now)
	if !ok {
		var err error
		t, err = s.st.Token(ctx, id)
		if errors.Is(err, store.ErrNotFound) {
			return nil, errBadToken
		}
		if err != nil {
			return nil, err
		}
		s.tokens.put(t, now)
	}
	if subtle.ConstantTimeCompare([]byte(hashSecret(secret)), []byte(t.Hash)) != 1 {
		return nil, errBadToken
	}
	switch {
	case !t.RevokedAt.IsZero():
		return nil, errRevokedToken
	case now.After(t.ExpiresAt):
		return nil, errExpiredToken
	}
	return t, nil
}

// authenticate says who r comes from: nil and no error for anonymous; an
// error (for a 401) when it presents credentials that do not hold.
func (s *Server) authenticate(r *http.Request) (*api.Who, error) {
	if r.TLS != nil && len(r.TLS.PeerCertificates) > 0 {
		// The handshake verified the chain against the cluster CA.
		cert := r.TLS.PeerCertificates[0]
		id, ok := pki.Verify(cert)
		if !ok {
			return nil, errors.New("the client certificate names neither a node nor a server")
		}
		if !id.Node {
			if node := r.Header.Get(forwardHeader); node != "" {
				// A replica forwards an agent's request to the leader; it
				// checked the node's certificate.
				return &api.Who{Kind: kindNode, Name: node, Via: "certificate, forwarded by a replica"}, nil
			}
			return &api.Who{Kind: kindServer, Name: id.Name, Role: api.RoleAdmin, Via: "certificate"}, nil
		}
		if at, revoked := s.revokedAt(id.Name); revoked && !pki.IssuedAt(cert).After(at) {
			return nil, errRevokedNode
		}
		return &api.Who{Kind: kindNode, Name: id.Name, Via: "certificate"}, nil
	}
	tok, ok := bearer(r)
	if !ok {
		return nil, nil
	}
	prefix, id, secret, ours := splitToken(tok)
	if !ours {
		if s.oidc != nil {
			return s.oidc.verify(r.Context(), tok)
		}
		return nil, errBadToken
	}
	if prefix == joinTokenPrefix {
		return nil, errJoinAsUser
	}
	t, err := s.lookupToken(r.Context(), id, secret)
	if err != nil {
		return nil, err
	}
	if t.Kind != api.TokenUser {
		return nil, errJoinAsUser
	}
	return &api.Who{Kind: kindUser, Name: t.User, Role: t.Role, Groups: t.Groups, RunAs: t.RunAs, Via: "token"}, nil
}

// bearer is r's bearer token.
func bearer(r *http.Request) (string, bool) {
	h := r.Header.Get("Authorization")
	if h == "" {
		return "", false
	}
	scheme, tok, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	tok = strings.TrimSpace(tok)
	return tok, tok != ""
}

// revocations is the server's copy of node revocations, refreshed from the
// store every revocationRefresh (revokes on this replica apply at once).
type revocations struct {
	mu sync.Mutex // guards m
	m  map[string]time.Time
}

const revocationRefresh = 2 * time.Second

func (s *Server) revokedAt(node string) (time.Time, bool) {
	s.revoked.mu.Lock()
	defer s.revoked.mu.Unlock()
	at, ok := s.revoked.m[node]
	return at, ok
}

func (s *Server) setRevoked(m map[string]time.Time) {
	s.revoked.mu.Lock()
	s.revoked.m = m
	s.revoked.mu.Unlock()
}

// refreshRevocations reloads revocations until ctx ends.
func (s *Server) refreshRevocations(ctx context.Context) {
	t := time.NewTicker(revocationRefresh)
	defer t.Stop()
	for {
		if m, err := s.st.Revocations(ctx); err == nil {
			s.setRevoked(m)
		} else if ctx.Err() == nil {
			s.log.Warn("cannot read node revocations", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// describeWho names a caller for messages and the audit log.
func describeWho(w *api.Who) string {
	if w == nil {
		return "anonymous"
	}
	if w.Kind == kindUser {
		return fmt.Sprintf("%s (%s)", w.Name, w.Role)
	}
	return w.Kind + " " + w.Name
}
