package client

import (
	"context"
	"net/url"
	"strconv"
	"time"

	"github.com/gangway/gangway/internal/api"
)

// CreateToken makes a token (admins only); its secret is in the answer
// alone.
func (c *Client) CreateToken(ctx context.Context, req *api.TokenRequest) (*api.TokenCreated, error) {
	var t api.TokenCreated
	return &t, c.postJSON(ctx, "/v1/tokens", req, &t)
}

// Tokens lists every token's record (admins only).
func (c *Client) Tokens(ctx context.Context) ([]*api.Token, error) {
	var ts []*api.Token
	return ts, c.Get(ctx, "/v1/tokens", &ts)
}

// RevokeToken revokes a token by id (or its whole text).
func (c *Client) RevokeToken(ctx context.Context, id string) (*api.Token, error) {
	var t api.Token
	return &t, c.do(ctx, &request{method: "DELETE", path: "/v1/tokens/" + url.PathEscape(id)}, &t)
}

// WhoAmI says who the server takes the client for.
func (c *Client) WhoAmI(ctx context.Context) (*api.Who, error) {
	var w api.Who
	return &w, c.Get(ctx, "/v1/whoami", &w)
}

// Audit reads the newest audit records (admins only): of who if set,
// since if not zero, at most limit (0: the server's default).
func (c *Client) Audit(ctx context.Context, who string, since time.Time, limit int) ([]api.AuditRecord, error) {
	q := url.Values{}
	if who != "" {
		q.Set("who", who)
	}
	if !since.IsZero() {
		q.Set("since", since.UTC().Format(time.RFC3339Nano))
	}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	path := "/v1/audit"
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	var rs []api.AuditRecord
	return rs, c.Get(ctx, path, &rs)
}
