package agent

import (
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/gangway/gangway/internal/base/pki"
)

// TestLogEndpointServesOnlyTheServer: the agent's endpoint answers a
// caller showing a server's certificate from the cluster CA, and no one
// else: not an anonymous caller, not another node.
func TestLogEndpointServesOnlyTheServer(t *testing.T) {
	ca, err := pki.NewCA("test", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	srvCert, _, _ := ca.IssueServer(nil, time.Hour)
	csr, _, _ := pki.NewCSR("n2")
	nodeCert, _ := ca.SignNode(csr, "n2", nil, time.Hour)
	h := onlyServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("logs")) }))
	for _, c := range []struct {
		name string
		cert []byte
		want int
	}{
		{"no certificate", nil, http.StatusUnauthorized},
		{"another node's certificate", nodeCert, http.StatusForbidden},
		{"the server's certificate", srvCert, http.StatusOK},
	} {
		r := httptest.NewRequest("GET", "/v1/logs?task=1/1/0", nil)
		if c.cert != nil {
			x, err := pki.ParseCert(c.cert)
			if err != nil {
				t.Fatal(err)
			}
			r.TLS = &tls.ConnectionState{PeerCertificates: []*x509.Certificate{x}}
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != c.want {
			t.Errorf("%s: %d; want %d", c.name, w.Code, c.want)
		}
	}
}
