package server

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/gangway/gangway/internal/api"
	"github.com/gangway/gangway/internal/base/pki"
)

// TestGatewayStatsServed: a viewer reads the gateway's counters (none yet:
// an empty list, not null); without credentials it is refused.
func TestGatewayStatsServed(t *testing.T) {
	e := startAgentEnv(t)
	viewer, err := e.admin.CreateToken(e.ctx, &api.TokenRequest{User: "vera", Role: api.RoleViewer})
	if err != nil {
		t.Fatal(err)
	}
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: pki.ClientTLS(e.s.ca.Pool(), nil)}}
	defer hc.CloseIdleConnections()
	for _, tt := range []struct {
		name, token string
		code        int
	}{
		{"a viewer", viewer.Secret, http.StatusOK},
		{"anonymous", "", http.StatusUnauthorized},
	} {
		req, _ := http.NewRequestWithContext(e.ctx, http.MethodGet, e.url+"/v1/gateway/stats", nil)
		if tt.token != "" {
			req.Header.Set("Authorization", "Bearer "+tt.token)
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var st struct {
			At     time.Time         `json:"at"`
			Models *[]api.ModelStats `json:"models"`
		}
		err = json.NewDecoder(resp.Body).Decode(&st)
		resp.Body.Close()
		if resp.StatusCode != tt.code {
			t.Errorf("%s: %s; want %d", tt.name, resp.Status, tt.code)
			continue
		}
		if tt.code == http.StatusOK && (err != nil || st.At.IsZero() || st.Models == nil || len(*st.Models) != 0) {
			t.Errorf("%s: %+v (%v); want a time and an empty list", tt.name, st, err)
		}
	}
}
