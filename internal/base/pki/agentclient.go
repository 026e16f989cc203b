package pki

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
)

// AgentClient calls agents' endpoints: it shows kp and accepts only a peer
// whose certificate chains to roots and names a node; which node is
// checked per request (ForNode).
func AgentClient(roots *x509.CertPool, kp *KeyPair) *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.Proxy = nil
	tr.TLSClientConfig = &tls.Config{
		MinVersion:           tls.VersionTLS12,
		GetClientCertificate: kp.GetClientCertificate,
		// The agent's address may change under its name, so the name in
		// its certificate, not the address, is what is checked:
		// VerifyConnection does the whole verification.
		InsecureSkipVerify: true,
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return errors.New("the agent showed no certificate")
			}
			inter := x509.NewCertPool()
			for _, c := range cs.PeerCertificates[1:] {
				inter.AddCert(c)
			}
			if _, err := cs.PeerCertificates[0].Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter,
				KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
				return fmt.Errorf("the agent's certificate: %w", err)
			}
			if id, ok := Verify(cs.PeerCertificates[0]); !ok || !id.Node {
				return errors.New("the agent's certificate names no node")
			}
			return nil
		},
	}
	return &http.Client{Transport: &nodeCheck{tr}}
}

type agentNodeKey struct{}

// ForNode makes a request to the agent of node: the answer is refused
// unless that node's certificate served it.
func ForNode(ctx context.Context, node string) context.Context {
	return context.WithValue(ctx, agentNodeKey{}, node)
}

// nodeCheck refuses an answer served by another node's certificate than
// the request's context names.
type nodeCheck struct{ next http.RoundTripper }

func (n *nodeCheck) RoundTrip(r *http.Request) (*http.Response, error) {
	want, _ := r.Context().Value(agentNodeKey{}).(string)
	resp, err := n.next.RoundTrip(r)
	if err != nil {
		return nil, err
	}
	if resp.TLS == nil || len(resp.TLS.PeerCertificates) == 0 {
		resp.Body.Close()
		return nil, errors.New("the agent did not answer over TLS")
	}
	if id, _ := Verify(resp.TLS.PeerCertificates[0]); want == "" || id.Name != want {
		resp.Body.Close()
		return nil, fmt.Errorf("the agent at %s is %s, not node %s", r.URL.Host, id.Name, want)
	}
	return resp, nil
}
