package server

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/gangway/gangway/internal/api"
	"github.com/gangway/gangway/internal/base/pki"
	"github.com/gangway/gangway/internal/controlplane/store"
)

// Node identity. An agent joins once: it proves a join token (or an
// admin's token), sends a certificate request for its node's name, and
// gets a certificate signed by the cluster CA (join). From then on the
// certificate is its identity on every request (mutual TLS): guard admits
// it to the agent routes alone, and authenticateNode lets it speak only
// for the node it names, so it cannot register another name, read another
// node's assignments or report another node's ranks. Before expiry the
// agent trades a new request for a new certificate (renew) without
// restarting anything. `gangway node revoke` records a time before which
// the node's certificates are refused (authn.go); the node must join
// again.

// errOtherNode: the certificate is another node's.
var errOtherNode = errors.New("this node's certificate speaks for another node")

// DefaultNodeCertTTL is how long a node certificate lasts; agents renew it
// when two thirds have passed.
const DefaultNodeCertTTL = 30 * 24 * time.Hour

// authenticateNode checks that r comes from node's agent: its
// certificate names node.
func (s *Server) authenticateNode(_ context.Context, r *http.Request, node string) error {
	wh := who(r)
	if wh == nil || wh.Kind != kindNode {
		return errNoCredentials
	}
	if wh.Name != node {
		return fmt.Errorf("%w (%s, not %s)", errOtherNode, wh.Name, node)
	}
	return nil
}

// join signs a node's certificate for the holder of a join token or an
// admin's token. A join token is spent by the join (its uses counted
// down in a compare-and-swap, so two agents cannot share its last use).
func (s *Server) join(w http.ResponseWriter, r *http.Request) {
	b, err := readBody(w, r)
	if err != nil {
		writeError(w, statusFor(err), err)
		return
	}
	var req api.JoinRequest
	if err := api.DecodeStrict(b, &req); err != nil {
		writeError(w, http.StatusBadRequest, fmt.Errorf("join: %w", err))
		return
	}
	if !api.ValidNodeName(req.Node) {
		writeError(w, http.StatusBadRequest, api.ErrorForField("node", "%q: use letters, digits, '-', '_' and '.' (at most 63)", req.Node))
		return
	}
	if s.ca == nil {
		writeError(w, http.StatusServiceUnavailable, errors.New("join: this server has no CA key to sign node certificates (give it --tls-ca-key)"))
		return
	}
	// The request is checked before the token is spent on it.
	if csr, err := pki.ParseCSR([]byte(req.CSR)); err != nil || csr.Subject.CommonName != req.Node {
		msg := "the certificate request must name the node joining"
		if err != nil {
			msg = err.Error()
		}
		writeError(w, http.StatusBadRequest, api.ErrorForField("csr", "%s", msg))
		return
	}
	ctx := r.Context()
	by, err := s.admitJoin(ctx, r)
	if err != nil {
		s.refusedAuth.Add(1)
		s.log.Warn("join refused", "node", req.Node, "remote", r.RemoteAddr, "err", err)
		w.Header().Set("WWW-Authenticate", `Bearer realm="gangway"`)
		writeError(w, http.StatusUnauthorized, fmt.Errorf("join: %w", err))
		return
	}
	s.issueNodeCert(w, r, req, by)
}

// admitJoin checks r's token for a join: a join token with uses left,
// spent here, or an admin's token. It returns who admitted the node.
func (s *Server) admitJoin(ctx context.Context, r *http.Request) (string, error) {
	tok, ok := bearer(r)
	if !ok {
		return "", errors.New("no join token: give the agent --join TOKEN (gangway token create --kind join)")
	}
	prefix, id, secret, ours := splitToken(tok)
	if !ours {
		return "", errBadToken
	}
	for {
		s.tokens.drop(id) // a join reads the newest uses left
		t, err := s.lookupToken(ctx, id, secret)
		if err != nil {
			return "", err
		}
		if prefix == userTokenPrefix {
			if t.Kind == api.TokenUser && t.Role == api.RoleAdmin {
				return "admin " + t.User, nil
			}
			return "", errors.New("only a join token or an admin's token joins a node")
		}
		if t.UsesLeft <= 0 {
			return "", errors.New("the join token was used up: make another (gangway token create --kind join)")
		}
		t.UsesLeft--
		err = s.st.PutToken(ctx, t)
		if errors.Is(err, store.ErrConflict) {
			continue
		}
		if err != nil {
			return "", err
		}
		return "join token " + t.ID, nil
	}
}

// renew signs a new certificate for the node whose certificate r presents.
func (s *Server) renew(w http.ResponseWriter, r *http.Request) {
	b, err := readBody(w, r)
	if err != nil {
		writeError(w, statusFor(err), err)
		return
	}
	var req api.JoinRequest
	if err := api.DecodeStrict(b, &req); err != nil {
		writeError(w, http.StatusBadRequest, fmt.Errorf("renew: %w", err))
		return
	}
	if err := s.authenticateNode(r.Context(), r, req.Node); err != nil {
		writeError(w, http.StatusForbidden, fmt.Errorf("renew: %w", err))
		return
	}
	if s.ca == nil {
		writeError(w, http.StatusServiceUnavailable, errors.New("renew: this server has no CA key"))
		return
	}
	s.issueNodeCert(w, r, req, "renewal")
}

func (s *Server) issueNodeCert(w http.ResponseWriter, r *http.Request, req api.JoinRequest, by string) {
	// Certificates carry whole seconds: one issued in the second of the
	// node's revocation would read as issued before it, so wait for the
	// next second.
	if at, ok := s.revokedAt(req.Node); ok && time.Now().Truncate(time.Second).Equal(at.Truncate(time.Second)) {
		time.Sleep(time.Until(at.Truncate(time.Second).Add(time.Second)))
	}
	host, _, _ := net.SplitHostPort(r.RemoteAddr)
	cert, err := s.ca.SignNode([]byte(req.CSR), req.Node, []string{host}, s.cfg.NodeCertTTL)
	if err != nil {
		writeError(w, http.StatusBadRequest, api.ErrorForField("csr", "%s", err))
		return
	}
	s.log.Info("node certificate issued", "node", req.Node, "by", by, "remote", r.RemoteAddr)
	writeJSON(w, r, http.StatusOK, api.JoinAnswer{Certificate: string(cert), CA: string(s.caPEM)})
}

// revokeNode cuts a node off: certificates issued to it until now are
// refused from now on, here at once and on other replicas within
// revocationRefresh.
func (s *Server) revokeNode(ctx context.Context, name string) error {
	now := time.Now()
	if err := s.st.RevokeNode(ctx, name, now); err != nil {
		return err
	}
	s.revoked.mu.Lock()
	if s.revoked.m == nil {
		s.revoked.m = map[string]time.Time{}
	}
	s.revoked.m[name] = now
	s.revoked.mu.Unlock()
	return nil
}
