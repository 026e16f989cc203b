package agent

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/gangway/gangway/internal/api"
	"github.com/gangway/gangway/internal/api/client"
	"github.com/gangway/gangway/internal/base/pki"
)

// The node's credentials: a certificate signed by the cluster CA naming
// this node, its key and the CA, under DataDir/pki (the key 0600). The
// first start trades a join token for them (join); the renew loop trades
// a new key for a new certificate when two thirds of the old one's life
// have passed, without touching any rank.
const (
	nodeCertFile = "node.crt"
	nodeKeyFile  = "node.key"
)

func (a *Agent) pkiDir() string { return filepath.Join(a.cfg.DataDir, "pki") }

// credentials loads the node's certificate, or joins for one, and returns
// it with the CA pool to trust.
func (a *Agent) credentials(ctx context.Context) (*pki.KeyPair, *x509.CertPool, error) {
	dir := a.pkiDir()
	certPEM, err1 := os.ReadFile(filepath.Join(dir, nodeCertFile))
	keyPEM, err2 := os.ReadFile(filepath.Join(dir, nodeKeyFile))
	caPEM, err3 := os.ReadFile(filepath.Join(dir, pki.CAFile))
	if err := errors.Join(err1, err2, err3); err == nil {
		kp, err := pki.NewKeyPair(certPEM, keyPEM)
		pool, perr := pki.PoolFromPEM(caPEM)
		switch {
		case err != nil || perr != nil:
			a.log.Warn("node credentials unreadable; joining again", "err", errors.Join(err, perr))
		case kp.Leaf().Subject.CommonName != a.cfg.Name:
			a.log.Warn("node certificate names another node; joining again", "cert", kp.Leaf().Subject.CommonName)
		case time.Now().After(kp.Leaf().NotAfter):
			a.log.Warn("node certificate expired; joining again", "expired", kp.Leaf().NotAfter)
		default:
			return kp, pool, nil
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, nil, fmt.Errorf("agent: node credentials: %w", err)
	}
	return a.join(ctx)
}

// join trades the join token for the node's certificate.
func (a *Agent) join(ctx context.Context) (*pki.KeyPair, *x509.CertPool, error) {
	if a.cfg.JoinToken == "" {
		return nil, nil, errors.New("agent: this node has not joined the cluster: give --join TOKEN (an admin makes one: gangway token create --kind join)")
	}
	if a.cfg.CAFile == "" {
		return nil, nil, errors.New("agent: to join, give --ca-file: the cluster CA (the server's <data-dir>/pki/ca.crt), so that the agent knows it talks to the real server")
	}
	c, err := client.New(client.Config{Server: a.cfg.Server, Timeout: callTimeout, Token: a.cfg.JoinToken, CAFile: a.cfg.CAFile})
	if err != nil {
		return nil, nil, fmt.Errorf("agent: %w", err)
	}
	defer c.CloseIdleConnections()
	csr, keyPEM, err := pki.NewCSR(a.cfg.Name)
	if err != nil {
		return nil, nil, err
	}
	ans, err := c.Join(ctx, &api.JoinRequest{Node: a.cfg.Name, CSR: string(csr)})
	if err != nil {
		return nil, nil, fmt.Errorf("agent: join the cluster as %s: %w", a.cfg.Name, err)
	}
	kp, err := a.keep([]byte(ans.Certificate), keyPEM, []byte(ans.CA))
	if err != nil {
		return nil, nil, err
	}
	pool, err := pki.PoolFromPEM([]byte(ans.CA))
	if err != nil {
		return nil, nil, fmt.Errorf("agent: the server's CA: %w", err)
	}
	a.log.Info("joined the cluster", "node", a.cfg.Name, "cert_expires", kp.Leaf().NotAfter)
	return kp, pool, nil
}

// keep writes the node's credentials (the key first, 0600) and returns
// them as a key pair.
func (a *Agent) keep(certPEM, keyPEM, caPEM []byte) (*pki.KeyPair, error) {
	kp, err := pki.NewKeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("agent: the certificate the server signed: %w", err)
	}
	dir := a.pkiDir()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("agent: %w", err)
	}
	for _, f := range []struct {
		name string
		b    []byte
		mode os.FileMode
	}{{nodeKeyFile, keyPEM, 0o600}, {nodeCertFile, certPEM, 0o644}, {pki.CAFile, caPEM, 0o644}} {
		if len(f.b) == 0 {
			continue
		}
		if err := pki.WriteFile(filepath.Join(dir, f.name), f.b, f.mode); err != nil {
			return nil, fmt.Errorf("agent: %w", err)
		}
	}
	return kp, nil
}

// renewAt is when a certificate is renewed: two thirds into its life
// from its issue (its NotBefore is backdated for clock skew).
func renewAt(c *x509.Certificate) time.Time {
	issued := pki.IssuedAt(c)
	return issued.Add(c.NotAfter.Sub(issued) * 2 / 3)
}

// renewLoop renews the node's certificate before it expires, until ctx
// ends; the new one is used by the next handshake (pki.KeyPair) and kept
// on disk. A failed renewal is retried (every tenth of the time left, at
// most a minute apart).
func (a *Agent) renewLoop(ctx context.Context) {
	for {
		leaf := a.creds.Leaf()
		wait := time.Until(renewAt(leaf))
		t := time.NewTimer(max(wait, 0))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		if err := a.renew(ctx); err != nil {
			if ctx.Err() != nil {
				return
			}
			retry := min(time.Until(leaf.NotAfter)/10, time.Minute)
			a.log.Warn("certificate renewal failed; retrying", "err", err, "expires", leaf.NotAfter, "retry_in", retry)
			rt := time.NewTimer(max(retry, 100*time.Millisecond))
			select {
			case <-ctx.Done():
				rt.Stop()
				return
			case <-rt.C:
			}
		}
	}
}

func (a *Agent) renew(ctx context.Context) error {
	csr, keyPEM, err := pki.NewCSR(a.cfg.Name)
	if err != nil {
		return err
	}
	cctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	ans, err := a.server.Renew(cctx, &api.JoinRequest{Node: a.cfg.Name, CSR: string(csr)})
	if err != nil {
		return err
	}
	kp, err := a.keep([]byte(ans.Certificate), keyPEM, nil)
	if err != nil {
		return err
	}
	if err := a.creds.Set([]byte(ans.Certificate), keyPEM); err != nil {
		return err
	}
	a.log.Info("certificate renewed", "expires", kp.Leaf().NotAfter)
	return nil
}

// onlyServer serves h to the control plane alone: the caller must show a
// server's certificate from the cluster CA (the TLS handshake verified
// the chain).
func onlyServer(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.TLS == nil || len(r.TLS.PeerCertificates) == 0 {
			http.Error(w, "only the gangway server reads this agent", http.StatusUnauthorized)
			return
		}
		if id, ok := pki.Verify(r.TLS.PeerCertificates[0]); !ok || id.Node {
			http.Error(w, "only the gangway server reads this agent", http.StatusForbidden)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// isForbidden reports whether the server refused a request as not this
// node's to make (403).
func isForbidden(err error) bool {
	var ae *client.APIError
	return errors.As(err, &ae) && ae.Status == http.StatusForbidden
}
