package pki

import (
	"crypto/tls"
	"crypto/x509"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestCAPersists: the first call creates the CA with a private key only
// its owner reads; the second loads the same one; half a CA is refused.
func TestCAPersists(t *testing.T) {
	dir := t.TempDir()
	ca, created, err := LoadOrCreateCA(dir)
	if err != nil || !created {
		t.Fatalf("LoadOrCreateCA = %v, created %v", err, created)
	}
	fi, err := os.Stat(filepath.Join(dir, CAKeyFile))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("CA key mode = %v (%v); want 0600", fi.Mode(), err)
	}
	again, created, err := LoadOrCreateCA(dir)
	if err != nil || created {
		t.Fatalf("second LoadOrCreateCA = %v, created %v", err, created)
	}
	if !again.Cert.Equal(ca.Cert) {
		t.Fatal("second start made a new CA")
	}
	os.Remove(filepath.Join(dir, CAKeyFile))
	if _, _, err := LoadOrCreateCA(dir); err == nil || !strings.Contains(err.Error(), "not the other") {
		t.Fatalf("CA without its key: %v; want a refusal", err)
	}
}

// TestHandshakes: a server certificate verifies for its hosts and names
// the server; a node certificate names its node and authenticates it to
// a server that requires client certificates; a request for another name
// is not signed.
func TestHandshakes(t *testing.T) {
	ca, err := NewCA("test", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	scert, skey, err := ca.IssueServer([]string{"127.0.0.1", "localhost"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	skp, err := NewKeyPair(scert, skey)
	if err != nil {
		t.Fatal(err)
	}
	csr, nkey, err := NewCSR("node-1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ca.SignNode(csr, "node-2", nil, time.Hour); err == nil {
		t.Fatal("signed node-1's request as node-2")
	}
	ncert, err := ca.SignNode(csr, "node-1", nil, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	nkp, err := NewKeyPair(ncert, nkey)
	if err != nil {
		t.Fatal(err)
	}
	got := handshake(t, ServerTLS(skp, ca.Pool(), true), ClientTLS(ca.Pool(), nkp), "127.0.0.1")
	if id, ok := Verify(got); !ok || id != (Identity{Name: "node-1", Node: true}) {
		t.Fatalf("server saw %+v (%v); want node-1", id, ok)
	}
	if id, ok := Verify(skp.Leaf()); !ok || id.Node || id.Name != ServerName {
		t.Fatalf("server certificate reads as %+v", id)
	}
	// A client that trusts another CA refuses the server.
	other, _ := NewCA("other", time.Hour)
	if err := tryHandshake(ServerTLS(skp, ca.Pool(), false), ClientTLS(other.Pool(), nil), "127.0.0.1"); err == nil {
		t.Fatal("a client trusting another CA accepted the server")
	}
	// A node certificate from another CA is refused.
	ocsr, okey, _ := NewCSR("node-1")
	ocert, _ := other.SignNode(ocsr, "node-1", nil, time.Hour)
	okp, _ := NewKeyPair(ocert, okey)
	if err := tryHandshake(ServerTLS(skp, ca.Pool(), true), ClientTLS(ca.Pool(), okp), "127.0.0.1"); err == nil {
		t.Fatal("a node certificate from another CA was accepted")
	}
}

// TestClientCertificate: a client certificate authenticates its holder to
// a server of the same CA, names neither a node nor a server, and cannot
// serve; a named CA keeps its name and loads back.
func TestClientCertificate(t *testing.T) {
	dir := t.TempDir()
	ca, created, err := LoadOrCreateNamedCA(dir, "etcd CA")
	if err != nil || !created || ca.Cert.Subject.CommonName != "etcd CA" {
		t.Fatalf("LoadOrCreateNamedCA = %v, created %v", err, created)
	}
	if again, _, err := LoadOrCreateNamedCA(dir, "ignored"); err != nil || !again.Cert.Equal(ca.Cert) {
		t.Fatalf("second LoadOrCreateNamedCA = %v; want the same CA", err)
	}
	scert, skey, _ := ca.IssueServer([]string{"127.0.0.1"}, time.Hour)
	skp, _ := NewKeyPair(scert, skey)
	ccert, ckey, err := ca.IssueClient("etcd-client", "gangway:etcd", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	ckp, err := NewKeyPair(ccert, ckey)
	if err != nil {
		t.Fatal(err)
	}
	got := handshake(t, ServerTLS(skp, ca.Pool(), true), ClientTLS(ca.Pool(), ckp), "127.0.0.1")
	if got.Subject.CommonName != "etcd-client" {
		t.Fatalf("server saw %v; want etcd-client", got.Subject)
	}
	if id, ok := Verify(got); ok {
		t.Fatalf("a client certificate reads as %+v", id)
	}
	if err := tryHandshake(ServerTLS(ckp, nil, false), ClientTLS(ca.Pool(), nil), "127.0.0.1"); err == nil {
		t.Fatal("a client certificate served")
	}
}

// TestKeyPairRotates: after Set, new handshakes present the new
// certificate.
func TestKeyPairRotates(t *testing.T) {
	ca, _ := NewCA("test", time.Hour)
	c1, k1, _ := ca.IssueServer([]string{"127.0.0.1"}, time.Hour)
	kp, err := NewKeyPair(c1, k1)
	if err != nil {
		t.Fatal(err)
	}
	first := kp.Leaf().SerialNumber
	c2, k2, _ := ca.IssueServer([]string{"127.0.0.1"}, 2*time.Hour)
	if err := kp.Set(c2, k2); err != nil {
		t.Fatal(err)
	}
	cs := serverCertOf(t, ServerTLS(kp, nil, false), ClientTLS(ca.Pool(), nil))
	if cs.SerialNumber.Cmp(first) == 0 || cs.SerialNumber.Cmp(kp.Leaf().SerialNumber) != 0 {
		t.Fatal("handshake after Set presented the old certificate")
	}
}

// handshake connects client to a server on loopback and returns the
// client certificate the server verified.
func handshake(t *testing.T, srv, cli *tls.Config, host string) *x509.Certificate {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", srv)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	got := make(chan *x509.Certificate, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			got <- nil
			return
		}
		defer c.Close()
		tc := c.(*tls.Conn)
		if tc.Handshake() != nil || len(tc.ConnectionState().PeerCertificates) == 0 {
			got <- nil
			return
		}
		got <- tc.ConnectionState().PeerCertificates[0]
	}()
	cli = cli.Clone()
	cli.ServerName = host
	c, err := tls.Dial("tcp", ln.Addr().String(), cli)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cert := <-got
	if cert == nil {
		t.Fatal("server saw no client certificate")
	}
	return cert
}

func tryHandshake(srv, cli *tls.Config, host string) error {
	ln, err := tls.Listen("tcp", "127.0.0.1:0", srv)
	if err != nil {
		return err
	}
	defer ln.Close()
	done := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			done <- err
			return
		}
		defer c.Close()
		done <- c.(*tls.Conn).Handshake()
	}()
	cli = cli.Clone()
	cli.ServerName = host
	c, err := tls.Dial("tcp", ln.Addr().String(), cli)
	if err == nil {
		// TLS 1.3: the server's refusal of a client certificate arrives
		// after the client's handshake; a read surfaces it.
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, err = c.Read(make([]byte, 1))
		c.Close()
		if ne, ok := err.(net.Error); ok && ne.Timeout() {
			err = nil
		}
	}
	if serr := <-done; err == nil {
		err = serr
	}
	return err
}

func serverCertOf(t *testing.T, srv, cli *tls.Config) *x509.Certificate {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", srv)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err == nil {
			c.(*tls.Conn).Handshake()
			c.Close()
		}
	}()
	cli = cli.Clone()
	cli.ServerName = "127.0.0.1"
	c, err := tls.Dial("tcp", ln.Addr().String(), cli)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	return c.ConnectionState().PeerCertificates[0]
}

// TestSkewedClocks: a node whose clock is up to Backdate behind the
// server's (or ahead, within the certificates' life) still completes the
// handshake with certificates the server has just issued; beyond that it
// cannot, and says why.
func TestSkewedClocks(t *testing.T) {
	ca, err := NewCA("test", 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	scert, skey, _ := ca.IssueServer([]string{"127.0.0.1"}, 24*time.Hour)
	skp, _ := NewKeyPair(scert, skey)
	csr, nkey, _ := NewCSR("node-1")
	ncert, _ := ca.SignNode(csr, "node-1", nil, 24*time.Hour)
	nkp, _ := NewKeyPair(ncert, nkey)
	for _, skew := range []time.Duration{-45 * time.Minute, 45 * time.Minute, 10 * time.Hour} {
		cc := ClientTLS(ca.Pool(), nkp)
		cc.Time = func() time.Time { return time.Now().Add(skew) }
		if got := handshake(t, ServerTLS(skp, ca.Pool(), true), cc, "127.0.0.1"); got.Subject.CommonName != "node-1" {
			t.Errorf("node clock %s off: the server saw %s", skew, got.Subject.CommonName)
		}
	}
	cc := ClientTLS(ca.Pool(), nkp)
	cc.Time = func() time.Time { return time.Now().Add(-2 * Backdate) }
	if err := tryHandshake(ServerTLS(skp, ca.Pool(), true), cc, "127.0.0.1"); err == nil {
		t.Error("a node clock twice the backdate behind accepted a certificate not yet valid for it")
	}
}
