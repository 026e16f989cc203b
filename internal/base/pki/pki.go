// Package pki is gangway's cluster certificate authority: it creates the CA
// on a server's first start, issues the server's certificate, signs nodes'
// certificate requests, and keeps a key pair that can be replaced while
// connections use it (rotation). Everything is crypto/x509 and crypto/tls
// with ECDSA P-256 keys; nothing here is home-made cryptography.
//
// Identities live in the certificate's subject: a node is CN=<name>,
// O=gangway:nodes; a server is CN=gangway-server, O=gangway:servers (as
// Kubernetes' system:nodes group). Verify reads them back.
//
// It imports only the standard library (net/http for AgentClient).
package pki

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"
)

// Organisations that say what a certificate's holder is.
const (
	OrgNodes   = "gangway:nodes"
	OrgServers = "gangway:servers"
	// ServerName is the common name of every server's certificate.
	ServerName = "gangway-server"
)

// Files a server keeps under its PKI directory.
const (
	CAFile         = "ca.crt"
	CAKeyFile      = "ca.key"
	ServerCertFile = "server.crt"
	ServerKeyFile  = "server.key"
)

// CA is the cluster's certificate authority.
type CA struct {
	Cert *x509.Certificate
	// PEM is Cert encoded, as clients and agents are given it.
	PEM []byte
	key crypto.Signer
}

// LoadOrCreateCA reads dir/ca.crt and dir/ca.key, or creates both (the key
// 0600, valid ten years) when neither exists. created says which.
func LoadOrCreateCA(dir string) (ca *CA, created bool, err error) {
	return LoadOrCreateNamedCA(dir, "gangway cluster CA")
}

// LoadOrCreateNamedCA is LoadOrCreateCA for a CA other than the cluster's
// (etcd's own, say); name is the common name a new CA gets.
func LoadOrCreateNamedCA(dir, name string) (ca *CA, created bool, err error) {
	certPath, keyPath := filepath.Join(dir, CAFile), filepath.Join(dir, CAKeyFile)
	certPEM, cerr := os.ReadFile(certPath)
	keyPEM, kerr := os.ReadFile(keyPath)
	switch {
	case cerr == nil && kerr == nil:
		ca, err := ParseCA(certPEM, keyPEM)
		if err != nil {
			return nil, false, fmt.Errorf("pki: %s: %w", dir, err)
		}
		return ca, false, nil
	case !errors.Is(cerr, os.ErrNotExist) && cerr != nil:
		return nil, false, fmt.Errorf("pki: read CA: %w", cerr)
	case !errors.Is(kerr, os.ErrNotExist) && kerr != nil:
		return nil, false, fmt.Errorf("pki: read CA key: %w", kerr)
	case cerr == nil || kerr == nil:
		return nil, false, fmt.Errorf("pki: %s has one of %s and %s but not the other; restore it or remove both to make a new CA (every node must then join again)", dir, CAFile, CAKeyFile)
	}
	ca, err = NewCA(name, 10*365*24*time.Hour)
	if err != nil {
		return nil, false, err
	}
	keyPEM, err = encodeKey(ca.key)
	if err != nil {
		return nil, false, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, false, fmt.Errorf("pki: %w", err)
	}
	// The key first: a crash between the two leaves no CA without its key.
	if err := WriteFile(keyPath, keyPEM, 0o600); err != nil {
		return nil, false, err
	}
	if err := WriteFile(certPath, ca.PEM, 0o644); err != nil {
		return nil, false, err
	}
	return ca, true, nil
}

// NewCA makes a self-signed CA valid for ttl.
func NewCA(name string, ttl time.Duration) (*CA, error) {
	key, err := NewKey()
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: name, Organization: []string{"gangway"}},
		NotBefore:             now.Add(-Backdate),
		NotAfter:              now.Add(ttl),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("pki: create CA: %w", err)
	}
	cert, _ := x509.ParseCertificate(der)
	return &CA{Cert: cert, PEM: encodeCert(der), key: key}, nil
}

// ParseCA reads a CA from its certificate and key, PEM.
func ParseCA(certPEM, keyPEM []byte) (*CA, error) {
	cert, err := ParseCert(certPEM)
	if err != nil {
		return nil, err
	}
	if !cert.IsCA {
		return nil, errors.New("the CA certificate is not a CA")
	}
	key, err := ParseKey(keyPEM)
	if err != nil {
		return nil, err
	}
	if !publicEqual(cert.PublicKey, key.Public()) {
		return nil, errors.New("the CA key does not match its certificate")
	}
	return &CA{Cert: cert, PEM: bytes.Clone(certPEM), key: key}, nil
}

// Pool is a pool holding the CA alone.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.Cert)
	return p
}

// IssueServer issues a server certificate for hosts (DNS names or IPs),
// usable to serve and, towards agents, as a client; key and certificate
// PEM.
func (ca *CA) IssueServer(hosts []string, ttl time.Duration) (certPEM, keyPEM []byte, err error) {
	key, err := NewKey()
	if err != nil {
		return nil, nil, err
	}
	tmpl := ca.template(pkix.Name{CommonName: ServerName, Organization: []string{OrgServers}}, ttl)
	tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else if h != "" {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, key.Public(), ca.key)
	if err != nil {
		return nil, nil, fmt.Errorf("pki: issue server certificate: %w", err)
	}
	keyPEM, err = encodeKey(key)
	return encodeCert(der), keyPEM, err
}

// IssueClient issues a certificate that authenticates name as a client
// (CN=name, O=org) and serves nothing; key and certificate PEM. It is for
// clients of a CA other than the cluster's: Verify names no node or server
// unless org is OrgNodes or OrgServers.
func (ca *CA) IssueClient(name, org string, ttl time.Duration) (certPEM, keyPEM []byte, err error) {
	key, err := NewKey()
	if err != nil {
		return nil, nil, err
	}
	subject := pkix.Name{CommonName: name}
	if org != "" {
		subject.Organization = []string{org}
	}
	tmpl := ca.template(subject, ttl)
	tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, key.Public(), ca.key)
	if err != nil {
		return nil, nil, fmt.Errorf("pki: issue client certificate: %w", err)
	}
	keyPEM, err = encodeKey(key)
	return encodeCert(der), keyPEM, err
}

// SignNode signs a node's certificate request: the certificate names node
// (whatever the request asked), serves the agent's endpoint for hosts and
// authenticates the agent to servers, for ttl.
func (ca *CA) SignNode(csrPEM []byte, node string, hosts []string, ttl time.Duration) ([]byte, error) {
	csr, err := ParseCSR(csrPEM)
	if err != nil {
		return nil, err
	}
	if csr.Subject.CommonName != node {
		return nil, fmt.Errorf("the certificate request names %q, not the node %q", csr.Subject.CommonName, node)
	}
	tmpl := ca.template(pkix.Name{CommonName: node, Organization: []string{OrgNodes}}, ttl)
	tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth, x509.ExtKeyUsageServerAuth}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else if h != "" {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, csr.PublicKey, ca.key)
	if err != nil {
		return nil, fmt.Errorf("pki: sign node certificate: %w", err)
	}
	return encodeCert(der), nil
}

func (ca *CA) template(subject pkix.Name, ttl time.Duration) *x509.Certificate {
	now := time.Now()
	end := now.Add(ttl)
	if end.After(ca.Cert.NotAfter) {
		end = ca.Cert.NotAfter
	}
	return &x509.Certificate{
		SerialNumber: serial(),
		Subject:      subject,
		NotBefore:    now.Add(-Backdate), // clocks apart
		NotAfter:     end,
		KeyUsage:     x509.KeyUsageDigitalSignature,
	}
}

// Backdate is how far before its issue a certificate is valid from: a
// node whose clock is behind the server's (no NTP yet after a boot, a
// drifting RTC) must still accept the server's new certificate, and the
// server its new node certificate. Fencing and liveness compare no clocks
// (each side measures its own durations), so certificates are what skew
// could break; an hour covers any clock a person would not notice.
const Backdate = time.Hour

// IssuedAt is when a certificate this CA made was issued.
func IssuedAt(c *x509.Certificate) time.Time { return c.NotBefore.Add(Backdate) }

// NewCSR makes a key and a certificate request for a node's name.
func NewCSR(node string) (csrPEM, keyPEM []byte, err error) {
	key, err := NewKey()
	if err != nil {
		return nil, nil, err
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
		Subject: pkix.Name{CommonName: node, Organization: []string{OrgNodes}},
	}, key)
	if err != nil {
		return nil, nil, fmt.Errorf("pki: certificate request: %w", err)
	}
	keyPEM, err = encodeKey(key)
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}), keyPEM, err
}

// ParseCSR reads a PEM certificate request and checks its signature.
func ParseCSR(b []byte) (*x509.CertificateRequest, error) {
	blk, _ := pem.Decode(b)
	if blk == nil || blk.Type != "CERTIFICATE REQUEST" {
		return nil, errors.New("not a PEM certificate request")
	}
	csr, err := x509.ParseCertificateRequest(blk.Bytes)
	if err != nil {
		return nil, fmt.Errorf("certificate request: %w", err)
	}
	if err := csr.CheckSignature(); err != nil {
		return nil, fmt.Errorf("certificate request: %w", err)
	}
	return csr, nil
}

// ParseCert reads the first PEM certificate in b.
func ParseCert(b []byte) (*x509.Certificate, error) {
	blk, _ := pem.Decode(b)
	if blk == nil || blk.Type != "CERTIFICATE" {
		return nil, errors.New("not a PEM certificate")
	}
	return x509.ParseCertificate(blk.Bytes)
}

// ParseKey reads a PEM private key (PKCS#8, EC or PKCS#1).
func ParseKey(b []byte) (crypto.Signer, error) {
	blk, _ := pem.Decode(b)
	if blk == nil {
		return nil, errors.New("not a PEM private key")
	}
	if k, err := x509.ParsePKCS8PrivateKey(blk.Bytes); err == nil {
		if s, ok := k.(crypto.Signer); ok {
			return s, nil
		}
	}
	if k, err := x509.ParseECPrivateKey(blk.Bytes); err == nil {
		return k, nil
	}
	if k, err := x509.ParsePKCS1PrivateKey(blk.Bytes); err == nil {
		return k, nil
	}
	return nil, errors.New("unsupported private key")
}

// NewKey draws an ECDSA P-256 key.
func NewKey() (crypto.Signer, error) {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("pki: key: %w", err)
	}
	return k, nil
}

// Identity is what a verified certificate says its holder is.
type Identity struct {
	// Name is the node's name, or ServerName.
	Name string
	// Node is true for a node, false for a server.
	Node bool
}

// Verify reads who holds a certificate that a TLS handshake already
// verified against the CA; ok false for one that names neither a node nor
// a server.
func Verify(cert *x509.Certificate) (id Identity, ok bool) {
	if len(cert.Subject.Organization) != 1 {
		return Identity{}, false
	}
	switch cert.Subject.Organization[0] {
	case OrgNodes:
		return Identity{Name: cert.Subject.CommonName, Node: true}, cert.Subject.CommonName != ""
	case OrgServers:
		return Identity{Name: cert.Subject.CommonName}, cert.Subject.CommonName == ServerName
	}
	return Identity{}, false
}

// KeyPair is a certificate and key that may be replaced while TLS
// connections use it: handshakes read the current one.
type KeyPair struct {
	cur atomic.Pointer[tls.Certificate]
}

// NewKeyPair holds certPEM and keyPEM.
func NewKeyPair(certPEM, keyPEM []byte) (*KeyPair, error) {
	kp := &KeyPair{}
	return kp, kp.Set(certPEM, keyPEM)
}

// Set replaces the pair; later handshakes present it.
func (kp *KeyPair) Set(certPEM, keyPEM []byte) error {
	c, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return fmt.Errorf("pki: key pair: %w", err)
	}
	kp.cur.Store(&c)
	return nil
}

// Leaf is the current certificate.
func (kp *KeyPair) Leaf() *x509.Certificate { return kp.cur.Load().Leaf }

// GetCertificate serves as tls.Config.GetCertificate.
func (kp *KeyPair) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	return kp.cur.Load(), nil
}

// GetClientCertificate serves as tls.Config.GetClientCertificate.
func (kp *KeyPair) GetClientCertificate(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
	return kp.cur.Load(), nil
}

// ServerTLS is the configuration a server or agent serves with: kp's
// certificate; client certificates from roots verified when given, and
// required when requireClient.
func ServerTLS(kp *KeyPair, roots *x509.CertPool, requireClient bool) *tls.Config {
	auth := tls.VerifyClientCertIfGiven
	if requireClient {
		auth = tls.RequireAndVerifyClientCert
	}
	return &tls.Config{
		MinVersion:     tls.VersionTLS12,
		GetCertificate: kp.GetCertificate,
		ClientAuth:     auth,
		ClientCAs:      roots,
	}
}

// ClientTLS is the configuration of a client that trusts roots and, with
// kp, presents its certificate.
func ClientTLS(roots *x509.CertPool, kp *KeyPair) *tls.Config {
	c := &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: roots}
	if kp != nil {
		c.GetClientCertificate = kp.GetClientCertificate
	}
	return c
}

// PoolFromPEM is a pool of the PEM certificates in b.
func PoolFromPEM(b []byte) (*x509.CertPool, error) {
	p := x509.NewCertPool()
	if !p.AppendCertsFromPEM(b) {
		return nil, errors.New("no PEM certificate in it")
	}
	return p, nil
}

// WriteFile writes b to path atomically (a temporary file renamed over
// it) with perm.
func WriteFile(path string, b []byte, perm os.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("pki: write %s: %w", path, err)
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(perm); err != nil {
		tmp.Close()
		return fmt.Errorf("pki: write %s: %w", path, err)
	}
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return fmt.Errorf("pki: write %s: %w", path, err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("pki: write %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("pki: write %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("pki: write %s: %w", path, err)
	}
	return nil
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127)) // never fails (crypto/rand)
	return n
}

func encodeCert(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

func encodeKey(k crypto.Signer) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		return nil, fmt.Errorf("pki: encode key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

func publicEqual(a, b crypto.PublicKey) bool {
	type eq interface{ Equal(crypto.PublicKey) bool }
	e, ok := a.(eq)
	return ok && e.Equal(b)
}
