package server

import (
	"context"
	"errors"
	"fmt"
	"os/user"
	"slices"
	"strconv"

	"github.com/coreos/go-oidc/v3/oidc"
	"github.com/gangway/gangway/internal/api"
)

// OIDCConfig lets users sign in with an identity provider's ID tokens
// instead of gangway's tokens: the token's signature, issuer, audience and
// expiry are checked against the provider's published keys (coreos/go-oidc).
type OIDCConfig struct {
	// Issuer is the provider's URL (its /.well-known/openid-configuration
	// is read at start); ClientID the audience tokens must name.
	Issuer, ClientID string
	// UserClaim names the user (default "email"); GroupsClaim their groups
	// (default "groups").
	UserClaim, GroupsClaim string
	// AdminGroups and ViewerGroups give those roles; anyone else is a user.
	AdminGroups, ViewerGroups []string
}

// oidcAuth verifies ID tokens.
type oidcAuth struct {
	cfg OIDCConfig
	v   *oidc.IDTokenVerifier
}

// newOIDC reads the provider's configuration and keys' address.
func newOIDC(ctx context.Context, cfg OIDCConfig) (*oidcAuth, error) {
	if cfg.UserClaim == "" {
		cfg.UserClaim = "email"
	}
	if cfg.GroupsClaim == "" {
		cfg.GroupsClaim = "groups"
	}
	if cfg.ClientID == "" {
		return nil, errors.New("server: --oidc-client-id is required with --oidc-issuer")
	}
	p, err := oidc.NewProvider(ctx, cfg.Issuer)
	if err != nil {
		return nil, fmt.Errorf("server: OIDC issuer %s: %w", cfg.Issuer, err)
	}
	return &oidcAuth{cfg: cfg, v: p.Verifier(&oidc.Config{ClientID: cfg.ClientID})}, nil
}

// verify authenticates an ID token: its user, groups and role from its
// claims, and the Unix account from its numeric "uid" and "gid" claims or,
// failing those, the server's account of the user's name.
func (o *oidcAuth) verify(ctx context.Context, raw string) (*api.Who, error) {
	tok, err := o.v.Verify(ctx, raw)
	if err != nil {
		return nil, fmt.Errorf("the ID token is not valid: %w", err)
	}
	var claims map[string]any
	if err := tok.Claims(&claims); err != nil {
		return nil, fmt.Errorf("the ID token's claims: %w", err)
	}
	name, _ := claims[o.cfg.UserClaim].(string)
	if name == "" {
		return nil, fmt.Errorf("the ID token has no %q claim to name its user", o.cfg.UserClaim)
	}
	var groups []string
	if gs, ok := claims[o.cfg.GroupsClaim].([]any); ok {
		for _, g := range gs {
			if s, ok := g.(string); ok {
				groups = append(groups, s)
			}
		}
	}
	role := api.RoleUser
	for _, g := range groups {
		if slices.Contains(o.cfg.AdminGroups, g) {
			role = api.RoleAdmin
			break
		}
		if slices.Contains(o.cfg.ViewerGroups, g) {
			role = api.RoleViewer
		}
	}
	w := &api.Who{Kind: kindUser, Name: name, Role: role, Groups: groups, Via: "oidc"}
	uid, uok := claims["uid"].(float64)
	gid, gok := claims["gid"].(float64)
	switch {
	case uok:
		if !gok {
			gid = uid
		}
		w.RunAs = &api.RunAs{User: name, UID: int(uid), GID: int(gid)}
	default:
		if u, err := user.Lookup(name); err == nil {
			uid, err1 := strconv.Atoi(u.Uid)
			gid, err2 := strconv.Atoi(u.Gid)
			if err1 == nil && err2 == nil {
				w.RunAs = &api.RunAs{User: name, UID: uid, GID: gid}
			}
		}
	}
	return w, nil
}
