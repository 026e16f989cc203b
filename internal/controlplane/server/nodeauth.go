package server

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"net/http"

	"github.com/gangway/gangway/internal/api"
)

// Node identity. Until nodes have certificates, a node proves it is the
// agent that registered its name with a secret: the server draws it at the
// node's first registration, hands it to that agent once, and keeps only
// its hash (the node's credential, store.RegisterNode, apart from the node
// record so that no reader of nodes holds it). The agent presents it in
// api.NodeSecretHeader on every request, and authenticateNode is the one
// place it is checked: with mTLS, the certificate's node name replaces the
// header there, and the credential becomes the certificate's identity.
//
// A lost node's name may be claimed by an agent without the secret (a node
// reinstalled with an empty data directory must be able to come back, and
// there is no operator command to reset a credential yet). That lets
// whoever can reach the server take over a node that died, which is no
// worse than before any credential, and the scheduler treats a lost node
// as gone anyway. Certificates close it: then only the holder of the
// node's certificate can register its name at all.

// nodeSecretBytes is how much randomness a node secret carries.
const nodeSecretBytes = 32

var (
	// errNodeSecret: the request does not carry the secret of the node
	// it names.
	errNodeSecret = errors.New("the node secret presented is not this node's: only the agent that registered the node may speak for it")
	// errNoCredential: the node has no credential (it never registered,
	// or registered before nodes had secrets); it must register.
	errNoCredential = errors.New("node has no credential: register first")
)

// newNodeSecret draws a node secret and returns it with its credential.
func newNodeSecret() (secret, credential string) {
	b := make([]byte, nodeSecretBytes)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	secret = base64.RawURLEncoding.EncodeToString(b)
	return secret, credentialOf(secret)
}

// credentialOf is the credential stored for secret: its SHA-256, in hex.
func credentialOf(secret string) string {
	h := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(h[:])
}

// presents reports whether r carries the secret whose credential is cred.
func presents(r *http.Request, cred string) bool {
	secret := r.Header.Get(api.NodeSecretHeader)
	if cred == "" || secret == "" {
		return false
	}
	return subtle.ConstantTimeCompare([]byte(credentialOf(secret)), []byte(cred)) == 1
}

// authenticateNode checks that r comes from the agent holding node's
// registration: errNodeSecret if it presents another secret or none,
// errNoCredential if the node has none. The credential comes from the
// cache, and from etcd when the cache does not match (it may not have seen
// a fresh registration yet), so a correct agent costs no store read.
func (s *Server) authenticateNode(ctx context.Context, r *http.Request, node string) error {
	if cred, ok := s.cache.NodeCredential(node); ok && presents(r, cred) {
		return nil
	}
	cred, err := s.st.NodeCredential(ctx, node)
	switch {
	case err != nil:
		return err
	case cred == "":
		return errNoCredential
	case !presents(r, cred):
		return errNodeSecret
	}
	return nil
}
