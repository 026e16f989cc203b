package cli

import (
	"context"
	"crypto/x509"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/gangway/gangway/internal/api"
	"github.com/gangway/gangway/internal/base/pki"
	"github.com/gangway/gangway/internal/controlplane/server"
)

// TestAgentRenewsItsCertificate: with node certificates of a few seconds,
// the agent trades its certificate for a new one before it expires,
// keeps it on disk, and its node stays ready and runs jobs past the first
// certificate's end.
func TestAgentRenewsItsCertificate(t *testing.T) {
	cl := startClusterWith(t, 1, 1, func(c *server.Config) { c.NodeCertTTL = 4 * time.Second })
	path := filepath.Join(cl.agentDir("n1"), "pki", "node.crt")
	first := readCert(t, path)
	deadline := time.Now().Add(30 * time.Second)
	for {
		c := readCert(t, path)
		if c.SerialNumber.Cmp(first.SerialNumber) != 0 && time.Now().After(first.NotAfter) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the agent kept its certificate (expired %s) past its end", first.NotAfter)
		}
		time.Sleep(100 * time.Millisecond)
	}
	ctx := context.Background()
	n, err := cl.c.Node(ctx, "n1")
	if err != nil || n.Status.State != api.NodeReady {
		t.Fatalf("node after the first certificate expired: %+v, %v; want ready", n, err)
	}
	id, err := cl.c.SubmitID(ctx, []byte(`{"ranks": 1, "command": ["true"]}`))
	if err != nil {
		t.Fatal(err)
	}
	cl.waitPhase(id, api.JobSucceeded, 30*time.Second)
}

func readCert(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	c, err := pki.ParseCert(b)
	if err != nil {
		t.Fatal(err)
	}
	return c
}
