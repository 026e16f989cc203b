package store

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/gangway/gangway/internal/base/pki"
)

// The embedded etcd's own PKI, under EmbeddedConfig.Dir. Its CA is not the
// cluster's: nodes' certificates are signed by the cluster CA and must not
// open etcd, which holds every token and job.
const (
	EtcdPKIDir     = "etcd-pki"
	etcdCAName     = "gangway etcd CA"
	etcdClientName = "gangway-etcd-client"
	etcdClientOrg  = "gangway:etcd"
	// Leaf certificates live etcdLeafTTL and are issued again on a start
	// within etcdRenewBefore of their end (the CA lives ten years).
	etcdLeafTTL     = 5 * 365 * 24 * time.Hour
	etcdRenewBefore = 30 * 24 * time.Hour
)

// TLSFiles names the PEM files a client of etcd trusts and presents:
// etcdctl's --cacert, --cert and --key.
type TLSFiles struct {
	CA   string
	Cert string
	Key  string
}

// ClientConfig reads the files into a client's TLS configuration.
func (f TLSFiles) ClientConfig() (*tls.Config, error) {
	caPEM, err := os.ReadFile(f.CA)
	if err != nil {
		return nil, fmt.Errorf("store: etcd client TLS: %w", err)
	}
	roots, err := pki.PoolFromPEM(caPEM)
	if err != nil {
		return nil, fmt.Errorf("store: etcd client TLS: %s: %w", f.CA, err)
	}
	pair, err := tls.LoadX509KeyPair(f.Cert, f.Key)
	if err != nil {
		return nil, fmt.Errorf("store: etcd client TLS: %w", err)
	}
	return &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: roots, Certificates: []tls.Certificate{pair}}, nil
}

// etcdPKI is what the embedded member serves with and what its clients use.
type etcdPKI struct {
	server TLSFiles // CA, server.crt, server.key
	client TLSFiles // CA, client.crt, client.key
}

// ensureEtcdPKI loads dir's etcd PKI, creating what is missing on the first
// start: the CA (kept for good), a server certificate for hosts and a
// client certificate. A leaf that does not match its key, is not the CA's,
// ends within etcdRenewBefore or (the server's) does not name every host
// is issued again; the CA is never replaced here.
func ensureEtcdPKI(dir string, hosts []string) (etcdPKI, error) {
	ca, _, err := pki.LoadOrCreateNamedCA(dir, etcdCAName)
	if err != nil {
		return etcdPKI{}, fmt.Errorf("store: etcd CA: %w", err)
	}
	p := etcdPKI{
		server: TLSFiles{CA: filepath.Join(dir, pki.CAFile), Cert: filepath.Join(dir, "server.crt"), Key: filepath.Join(dir, "server.key")},
		client: TLSFiles{CA: filepath.Join(dir, pki.CAFile), Cert: filepath.Join(dir, "client.crt"), Key: filepath.Join(dir, "client.key")},
	}
	if !leafUsable(ca, p.server, x509.ExtKeyUsageServerAuth, hosts) {
		cert, key, err := ca.IssueServer(hosts, etcdLeafTTL)
		if err != nil {
			return etcdPKI{}, fmt.Errorf("store: etcd server certificate: %w", err)
		}
		if err := writePair(p.server, cert, key); err != nil {
			return etcdPKI{}, err
		}
	}
	if !leafUsable(ca, p.client, x509.ExtKeyUsageClientAuth, nil) {
		cert, key, err := ca.IssueClient(etcdClientName, etcdClientOrg, etcdLeafTTL)
		if err != nil {
			return etcdPKI{}, fmt.Errorf("store: etcd client certificate: %w", err)
		}
		if err := writePair(p.client, cert, key); err != nil {
			return etcdPKI{}, err
		}
	}
	return p, nil
}

// leafUsable reports whether f's certificate and key exist, match, verify
// against ca for usage, name every host and last beyond etcdRenewBefore.
func leafUsable(ca *pki.CA, f TLSFiles, usage x509.ExtKeyUsage, hosts []string) bool {
	pair, err := tls.LoadX509KeyPair(f.Cert, f.Key)
	if err != nil {
		return false
	}
	leaf := pair.Leaf
	if leaf == nil {
		return false
	}
	_, err = leaf.Verify(x509.VerifyOptions{
		Roots:       ca.Pool(),
		CurrentTime: time.Now().Add(etcdRenewBefore),
		KeyUsages:   []x509.ExtKeyUsage{usage},
	})
	if err != nil {
		return false
	}
	return !slices.ContainsFunc(hosts, func(h string) bool { return leaf.VerifyHostname(h) != nil })
}

// writePair writes the key (0600) before the certificate, so a crash
// between the two leaves a pair that does not match, which the next start
// issues again.
func writePair(f TLSFiles, certPEM, keyPEM []byte) error {
	if err := pki.WriteFile(f.Key, keyPEM, 0o600); err != nil {
		return fmt.Errorf("store: etcd PKI: %w", err)
	}
	if err := pki.WriteFile(f.Cert, certPEM, 0o644); err != nil {
		return fmt.Errorf("store: etcd PKI: %w", err)
	}
	return nil
}
