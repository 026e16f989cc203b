package server

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/gangway/gangway/internal/base/pki"
	"github.com/gangway/gangway/internal/controlplane/ui"
)

// TestDashboardServed: the dashboard's pages are public, with the CSP; a
// browser at the root or at /ui goes to /ui/; unknown API paths still get
// the JSON 404 (or 401 without credentials).
func TestDashboardServed(t *testing.T) {
	e := startAgentEnv(t)
	hc := &http.Client{
		Transport:     &http.Transport{TLSClientConfig: pki.ClientTLS(e.s.ca.Pool(), nil)},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	defer hc.CloseIdleConnections()
	tests := []struct {
		name, path, token string
		code              int
		ctype, location   string
		body              string
	}{
		{"the dashboard, anonymous", "/ui/", "", 200, "text/html", "", "js/app.js"},
		{"a script, anonymous", "/ui/js/app.js", "", 200, "text/javascript", "", "route"},
		{"the root", "/", "", 302, "", "/ui/", ""},
		{"no slash", "/ui", "", 307, "", "/ui/", ""},
		{"an unknown page", "/ui/nope.html", "", 404, "text/plain", "", "no such page"},
		{"an unknown API path", "/v1/nope", e.adm.Token, 404, "application/json", "", `"error":"no such endpoint: GET /v1/nope"`},
		{"an unknown API path, anonymous", "/v1/nope", "", 401, "application/json", "", "no credentials"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, _ := http.NewRequestWithContext(e.ctx, http.MethodGet, e.url+tt.path, nil)
			if tt.token != "" {
				req.Header.Set("Authorization", "Bearer "+tt.token)
			}
			resp, err := hc.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tt.code || !strings.HasPrefix(resp.Header.Get("Content-Type"), tt.ctype) || !strings.Contains(string(b), tt.body) {
				t.Fatalf("%d %s %q; want %d %s with %q", resp.StatusCode, resp.Header.Get("Content-Type"), b, tt.code, tt.ctype, tt.body)
			}
			if tt.location != "" && resp.Header.Get("Location") != tt.location {
				t.Errorf("Location %q; want %q", resp.Header.Get("Location"), tt.location)
			}
			if strings.HasPrefix(tt.path, "/ui/") && resp.Header.Get("Content-Security-Policy") != ui.CSP {
				t.Errorf("CSP %q; want ui.CSP", resp.Header.Get("Content-Security-Policy"))
			}
			if tt.ctype == "application/json" && !json.Valid(b) {
				t.Errorf("not JSON: %q", b)
			}
		})
	}
}
