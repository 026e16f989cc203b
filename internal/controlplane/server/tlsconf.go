package server

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/gangway/gangway/internal/base/pki"
	"github.com/gangway/gangway/internal/controlplane/store"
)

// serverCertTTL is how long a server certificate the server issues itself
// lasts; it is issued again at every start.
const serverCertTTL = 365 * 24 * time.Hour

// pkiDir is where the server keeps its CA and certificate.
func (s *Server) pkiDir() string { return filepath.Join(s.cfg.DataDir, "pki") }

// setupTLS loads or makes the CA and the server's certificate, and returns
// the configuration the API serves with: client certificates from the CA
// are verified when given (agents); people use tokens.
func (s *Server) setupTLS(addr net.Addr) (*tls.Config, error) {
	var err error
	if s.cfg.TLSCA != "" {
		certPEM, err1 := os.ReadFile(s.cfg.TLSCA)
		keyPEM, err2 := os.ReadFile(s.cfg.TLSCAKey)
		if err := errors.Join(err1, err2); err != nil {
			return nil, fmt.Errorf("server: --tls-ca: %w", err)
		}
		if s.ca, err = pki.ParseCA(certPEM, keyPEM); err != nil {
			return nil, fmt.Errorf("server: --tls-ca %s: %w", s.cfg.TLSCA, err)
		}
	} else {
		var created bool
		if s.ca, created, err = pki.LoadOrCreateCA(s.pkiDir()); err != nil {
			return nil, fmt.Errorf("server: %w", err)
		}
		if created {
			s.log.Info("made the cluster CA", "dir", s.pkiDir())
		}
	}
	s.caPEM = s.ca.PEM
	var certPEM, keyPEM []byte
	if s.cfg.TLSCert != "" {
		certPEM, err = os.ReadFile(s.cfg.TLSCert)
		if err == nil {
			keyPEM, err = os.ReadFile(s.cfg.TLSKey)
		}
		if err != nil {
			return nil, fmt.Errorf("server: --tls-cert: %w", err)
		}
	} else {
		// Issued at every start, for every name of this host, so that a
		// new address or --tls-san needs no manual step.
		if certPEM, keyPEM, err = s.ca.IssueServer(s.hostNames(addr), serverCertTTL); err != nil {
			return nil, err
		}
		if err := os.MkdirAll(s.pkiDir(), 0o700); err != nil {
			return nil, fmt.Errorf("server: %w", err)
		}
		// Kept for operators and tools (curl --cert); the server reads it
		// from memory.
		if err := pki.WriteFile(filepath.Join(s.pkiDir(), pki.ServerKeyFile), keyPEM, 0o600); err != nil {
			return nil, err
		}
		if err := pki.WriteFile(filepath.Join(s.pkiDir(), pki.ServerCertFile), certPEM, 0o644); err != nil {
			return nil, err
		}
	}
	if s.serverKP, err = pki.NewKeyPair(certPEM, keyPEM); err != nil {
		return nil, fmt.Errorf("server: %w", err)
	}
	// Towards agents the server shows a certificate that names it as a
	// server: its own when it does (one the CA issued), else one issued
	// for the purpose.
	clientKP := s.serverKP
	if id, ok := pki.Verify(s.serverKP.Leaf()); !ok || id.Node {
		c, k, err := s.ca.IssueServer(nil, serverCertTTL)
		if err != nil {
			return nil, err
		}
		if clientKP, err = pki.NewKeyPair(c, k); err != nil {
			return nil, err
		}
	}
	if s.cfg.InitialCluster != "" {
		if err := s.issuePeerCert(addr); err != nil {
			return nil, err
		}
	}
	s.agentHC = pki.AgentClient(s.ca.Pool(), clientKP)
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.Proxy, tr.TLSClientConfig = nil, pki.ClientTLS(s.ca.Pool(), clientKP)
	s.leaderOf.hc = &http.Client{Transport: tr, Timeout: 15 * time.Second}
	return pki.ServerTLS(s.serverKP, s.ca.Pool(), false), nil
}

// issuePeerCert issues the certificate the embedded etcd member shows its
// peers (a server's, for every name of this host and the peer address),
// under DataDir/pki, at every start.
func (s *Server) issuePeerCert(addr net.Addr) error {
	hosts := s.hostNames(addr)
	if h, _, err := net.SplitHostPort(s.cfg.EtcdPeerAddr); err == nil && h != "" {
		hosts = append(hosts, h)
	}
	certPEM, keyPEM, err := s.ca.IssueServer(hosts, serverCertTTL)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(s.pkiDir(), 0o700); err != nil {
		return fmt.Errorf("server: %w", err)
	}
	s.peerTLS = store.TLSFiles{CA: s.cfg.TLSCA, Cert: filepath.Join(s.pkiDir(), "etcd-peer.crt"), Key: filepath.Join(s.pkiDir(), "etcd-peer.key")}
	if err := pki.WriteFile(s.peerTLS.Key, keyPEM, 0o600); err != nil {
		return err
	}
	return pki.WriteFile(s.peerTLS.Cert, certPEM, 0o644)
}

// hostNames are the names and addresses this server's certificate covers:
// loopback, the host's name and every interface address, the listener's,
// and TLSSANs.
func (s *Server) hostNames(addr net.Addr) []string {
	names := []string{"localhost", "127.0.0.1", "::1"}
	if h, err := os.Hostname(); err == nil {
		names = append(names, h)
	}
	if as, err := net.InterfaceAddrs(); err == nil {
		for _, a := range as {
			if ipn, ok := a.(*net.IPNet); ok {
				names = append(names, ipn.IP.String())
			}
		}
	}
	if ta, ok := addr.(*net.TCPAddr); ok && !ta.IP.IsUnspecified() {
		names = append(names, ta.IP.String())
	}
	return append(names, s.cfg.TLSSANs...)
}

// advertiseURL is the URL written into the admin's client config.
func (s *Server) advertiseURL(addr net.Addr) string {
	if s.cfg.AdvertiseURL != "" {
		return s.cfg.AdvertiseURL
	}
	ta, ok := addr.(*net.TCPAddr)
	if !ok {
		return "https://" + addr.String()
	}
	host := ta.IP.String()
	if ta.IP.IsUnspecified() {
		host = "127.0.0.1"
	}
	return "https://" + net.JoinHostPort(host, fmt.Sprint(ta.Port))
}
