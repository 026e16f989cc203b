package server

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gangway/gangway/internal/api"
	"github.com/gangway/gangway/internal/api/client"
	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
)

// testIssuer is an OpenID Connect provider as far as verifying its ID
// tokens goes: discovery, its keys, and tokens it signs.
type testIssuer struct {
	srv *httptest.Server
	key *ecdsa.PrivateKey
}

func newTestIssuer(t *testing.T) *testIssuer {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	iss := &testIssuer{key: key}
	mux := http.NewServeMux()
	mux.HandleFunc("/.well-known/openid-configuration", func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode(map[string]any{
			"issuer": iss.srv.URL, "jwks_uri": iss.srv.URL + "/keys", "authorization_endpoint": iss.srv.URL + "/auth",
			"token_endpoint": iss.srv.URL + "/token", "id_token_signing_alg_values_supported": []string{"ES256"},
		})
	})
	mux.HandleFunc("/keys", func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: &key.PublicKey, KeyID: "k1", Algorithm: "ES256", Use: "sig"}}})
	})
	iss.srv = httptest.NewServer(mux)
	t.Cleanup(iss.srv.Close)
	return iss
}

// token signs claims (iss, aud, exp filled in unless given) with key.
func (i *testIssuer) token(t *testing.T, key *ecdsa.PrivateKey, claims map[string]any) string {
	t.Helper()
	sig, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.ES256, Key: key}, (&jose.SignerOptions{}).WithHeader("kid", "k1"))
	if err != nil {
		t.Fatal(err)
	}
	c := map[string]any{"iss": i.srv.URL, "aud": "gangway", "sub": "s1", "iat": time.Now().Unix(), "exp": time.Now().Add(time.Hour).Unix()}
	for k, v := range claims {
		c[k] = v
	}
	tok, err := jwt.Signed(sig).Claims(c).Serialize()
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// TestOIDCTokens: an ID token from the configured provider authenticates
// its user with the role its groups give and the account its uid claim
// names; one for another audience, expired, or signed by another key is
// refused.
func TestOIDCTokens(t *testing.T) {
	iss := newTestIssuer(t)
	e := startAgentEnvWith(t, func(c *Config) {
		c.OIDC = OIDCConfig{Issuer: iss.srv.URL, ClientID: "gangway", AdminGroups: []string{"ops"}, ViewerGroups: []string{"audit"}}
	})
	alice := e.withToken(iss.token(t, iss.key, map[string]any{"email": "alice", "groups": []string{"ml"}, "uid": 64020, "gid": 64021}))
	w, err := alice.WhoAmI(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if w.Name != "alice" || w.Role != api.RoleUser || w.Via != "oidc" || w.RunAs == nil || w.RunAs.UID != 64020 || w.RunAs.GID != 64021 {
		t.Errorf("alice by OIDC: %+v (runAs %+v)", w, w.RunAs)
	}
	if _, err := alice.SubmitID(e.ctx, []byte(`{"ranks": 1, "command": ["true"]}`)); err != nil {
		t.Errorf("alice submits: %v", err)
	}
	if _, err := alice.CreateToken(e.ctx, &api.TokenRequest{User: "x", Role: api.RoleUser}); statusOf(err) != http.StatusForbidden {
		t.Errorf("a user by OIDC makes a token: %v; want 403", err)
	}
	ops := e.withToken(iss.token(t, iss.key, map[string]any{"email": "olga", "groups": []string{"ml", "ops"}}))
	if w, err := ops.WhoAmI(e.ctx); err != nil || w.Role != api.RoleAdmin {
		t.Errorf("a member of ops: %+v, %v; want admin", w, err)
	}
	other, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	for _, c := range []struct {
		name  string
		token string
	}{
		{"another audience", iss.token(t, iss.key, map[string]any{"email": "alice", "aud": "someone-else"})},
		{"expired", iss.token(t, iss.key, map[string]any{"email": "alice", "exp": time.Now().Add(-time.Minute).Unix()})},
		{"signed by another key", iss.token(t, other, map[string]any{"email": "alice"})},
		{"no user claim", iss.token(t, iss.key, map[string]any{"groups": []string{"ops"}})},
	} {
		_, err := e.withToken(c.token).Jobs(e.ctx, client.JobQuery{})
		if statusOf(err) != http.StatusUnauthorized || !strings.Contains(err.Error(), "token") {
			t.Errorf("%s: %v; want 401", c.name, err)
		}
	}
}
