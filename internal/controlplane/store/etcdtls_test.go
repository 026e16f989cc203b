package store

import (
	"bytes"
	"context"
	"crypto/tls"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gangway/gangway/internal/base/pki"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// TestEmbeddedClientTLS: the embedded etcd's client port refuses a plain
// client, a TLS client without a certificate and one whose certificate
// another CA (the cluster's, say) signed; the client certificate under
// Dir/etcd-pki reads and writes; a restart on the same Dir keeps the PKI
// and the data.
func TestEmbeddedClientTLS(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	e, err := StartEmbedded(ctx, EmbeddedConfig{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { e.Close() }()
	if !strings.HasPrefix(e.Endpoint, "https://127.0.0.1:") {
		t.Fatalf("Endpoint = %s; want https on loopback", e.Endpoint)
	}
	pkiDir := filepath.Join(dir, EtcdPKIDir)
	for _, f := range []string{"ca.crt", "ca.key", "server.crt", "server.key", "client.crt", "client.key"} {
		fi, err := os.Stat(filepath.Join(pkiDir, f))
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasSuffix(f, ".key") && fi.Mode().Perm() != 0o600 {
			t.Errorf("%s mode %v; want 0600", f, fi.Mode().Perm())
		}
	}
	if e.ClientFiles.Cert != filepath.Join(pkiDir, "client.crt") {
		t.Errorf("ClientFiles = %+v", e.ClientFiles)
	}

	refused := func(name, endpoint string, tc *tls.Config) {
		t.Helper()
		cli, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, TLS: tc, DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			return // refused at dial: fine
		}
		defer cli.Close()
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		if _, err := cli.Put(cctx, "/intruder", name); err == nil {
			t.Errorf("%s: Put succeeded; want a refusal", name)
		}
	}
	files, err := e.ClientFiles.ClientConfig()
	if err != nil {
		t.Fatal(err)
	}
	refused("plain", strings.Replace(e.Endpoint, "https://", "http://", 1), nil)
	refused("TLS without a client certificate", e.Endpoint, &tls.Config{RootCAs: files.RootCAs, MinVersion: tls.VersionTLS12})
	other, err := pki.NewCA("gangway cluster CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	ocert, okey, _ := other.IssueClient("node-1", pki.OrgNodes, time.Hour)
	opair, _ := tls.X509KeyPair(ocert, okey)
	refused("another CA's certificate", e.Endpoint, &tls.Config{RootCAs: files.RootCAs, Certificates: []tls.Certificate{opair}, MinVersion: tls.VersionTLS12})

	put := func(e *Embedded, tc *tls.Config, val string) {
		t.Helper()
		cli, err := DialWith(ctx, DialConfig{Endpoints: []string{e.Endpoint}, TLS: tc})
		if err != nil {
			t.Fatal(err)
		}
		defer cli.Close()
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if val != "" {
			if _, err := cli.Put(cctx, "/k", val); err != nil {
				t.Fatalf("Put with the client certificate: %v", err)
			}
		}
		got, err := cli.Get(cctx, "/k")
		if err != nil || len(got.Kvs) != 1 || string(got.Kvs[0].Value) != "v" {
			t.Fatalf("Get with the client certificate = %v, %v; want v", got, err)
		}
	}
	put(e, e.ClientTLS(), "v")
	put(e, files, "")

	read := func() [][]byte {
		var out [][]byte
		for _, f := range []string{"ca.crt", "server.crt", "client.crt"} {
			b, err := os.ReadFile(filepath.Join(pkiDir, f))
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, b)
		}
		return out
	}
	before := read()
	e.Close()
	e, err = StartEmbedded(ctx, EmbeddedConfig{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	for i, b := range read() {
		if !bytes.Equal(b, before[i]) {
			t.Errorf("restart replaced file %d of the etcd PKI", i)
		}
	}
	put(e, files, "") // the old client configuration still opens it
}
