package store

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.etcd.io/etcd/server/v3/etcdserver/api/v3client"
	"go.uber.org/zap"
)

// Limits the embedded etcd runs with, and an external etcd cluster needs
// (--max-txn-ops, --max-request-bytes) for gangs of many ranks: an
// attempt of N ranks writes N+1 keys, about 2 KB each, in one transaction.
const (
	MaxTxnOps       = 16384
	MaxRequestBytes = 32 << 20
)

// EmbeddedConfig configures a single-member etcd inside this process.
type EmbeddedConfig struct {
	// Dir holds etcd's data (etcd/ under it) and its PKI (EtcdPKIDir).
	Dir string
	// ClientAddr is where other processes can reach this etcd
	// ("127.0.0.1:2379"), over TLS with a client certificate of etcd's own
	// CA (Embedded.ClientFiles); empty picks a free loopback port.
	ClientAddr string
	// PeerAddr is the raft peer address; empty picks a free loopback port.
	// With other members it is where they reach this one.
	PeerAddr string
	// Name is this member's name; default "gangway".
	Name string
	// InitialCluster lists every member as name=https://host:port (etcd's
	// --initial-cluster), this one included; empty: this member alone.
	InitialCluster string
	// ExistingCluster joins a cluster that already runs (etcd's
	// --initial-cluster-state existing) instead of forming a new one.
	ExistingCluster bool
	// PeerTLS secures the peer listener when there are other members:
	// each member serves with Cert and Key and accepts only peers whose
	// certificate chains to CA and is named PeerCN.
	PeerTLS TLSFiles
	PeerCN  string
	// Verbose keeps etcd's own logging; by default it is silenced.
	Verbose bool
}

// Embedded is a running embedded etcd member.
type Embedded struct {
	etcd *embed.Etcd
	// Endpoint is the client URL others may dial: https, and only with the
	// client certificate in ClientFiles.
	Endpoint string
	// ClientFiles are the CA, certificate and key under
	// Dir/EtcdPKIDir that a client of Endpoint trusts and presents
	// (etcdctl --cacert --cert --key).
	ClientFiles TLSFiles
	clientTLS   *tls.Config
	closeOnce   sync.Once
}

// StartEmbedded starts a single-member etcd and waits until it serves.
// Close stops it.
//
// Its client listener is TLS and requires a client certificate signed by
// a CA of etcd's own (not the cluster CA, which signs nodes), made under
// Dir/EtcdPKIDir on the first start and reused after. The in-process
// Client needs none of it. Alone, the peer listener is plain loopback;
// with other members (InitialCluster) it is TLS both ways (PeerTLS).
func StartEmbedded(ctx context.Context, c EmbeddedConfig) (*Embedded, error) {
	if c.Dir == "" {
		return nil, errors.New("store: embedded etcd needs a data directory")
	}
	// Ports picked here may be taken by someone else before etcd binds
	// them; pick again a few times before giving up.
	picked := c.ClientAddr == "" || c.PeerAddr == ""
	for try := 0; ; try++ {
		e, err := startEmbedded(ctx, c)
		inUse := err != nil && (errors.Is(err, syscall.EADDRINUSE) || strings.Contains(err.Error(), "address already in use"))
		if err == nil || !picked || try == 4 || !inUse {
			return e, err
		}
	}
}

func startEmbedded(ctx context.Context, c EmbeddedConfig) (*Embedded, error) {
	if err := os.MkdirAll(c.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("store: create etcd dir: %w", err)
	}
	var err error
	if c.ClientAddr == "" {
		if c.ClientAddr, err = freeAddr(); err != nil {
			return nil, err
		}
	}
	if c.PeerAddr == "" {
		if c.PeerAddr, err = freeAddr(); err != nil {
			return nil, err
		}
	}
	host, _, err := net.SplitHostPort(c.ClientAddr)
	if err != nil {
		return nil, fmt.Errorf("store: etcd client address %q: %w", c.ClientAddr, err)
	}
	hosts := []string{"127.0.0.1", "::1", "localhost"}
	if host != "" && !slices.Contains(hosts, host) {
		hosts = append(hosts, host)
	}
	p, err := ensureEtcdPKI(filepath.Join(c.Dir, EtcdPKIDir), hosts)
	if err != nil {
		return nil, err
	}
	clientTLS, err := p.client.ClientConfig()
	if err != nil {
		return nil, err
	}
	cfg := embed.NewConfig()
	cfg.Name = "gangway"
	if c.Name != "" {
		cfg.Name = c.Name
	}
	cfg.Dir = filepath.Join(c.Dir, "etcd")
	cfg.ClientTLSInfo = transport.TLSInfo{
		CertFile:      p.server.Cert,
		KeyFile:       p.server.Key,
		TrustedCAFile: p.server.CA,
		// etcd's own gRPC gateway dials the member with these.
		ClientCertFile: p.client.Cert,
		ClientKeyFile:  p.client.Key,
		ClientCertAuth: true,
	}
	cu := url.URL{Scheme: "https", Host: c.ClientAddr}
	pu := url.URL{Scheme: "http", Host: c.PeerAddr}
	cfg.ListenClientUrls = []url.URL{cu}
	cfg.AdvertiseClientUrls = []url.URL{cu}
	cfg.InitialCluster = cfg.Name + "=" + pu.String()
	if c.InitialCluster != "" {
		// Several members: raft between them over TLS, only with peers
		// holding a certificate of the given CA and name.
		if c.PeerTLS.CA == "" {
			return nil, errors.New("store: a member of several needs peer TLS")
		}
		pu.Scheme = "https"
		if err := checkInitialCluster(c.InitialCluster, cfg.Name, pu.String()); err != nil {
			return nil, err
		}
		cfg.InitialCluster = c.InitialCluster
		cfg.PeerTLSInfo = transport.TLSInfo{CertFile: c.PeerTLS.Cert, KeyFile: c.PeerTLS.Key, TrustedCAFile: c.PeerTLS.CA,
			ClientCertAuth: true, AllowedCNs: []string{c.PeerCN}}
		if c.ExistingCluster {
			cfg.ClusterState = embed.ClusterStateFlagExisting
		}
	}
	cfg.ListenPeerUrls = []url.URL{pu}
	cfg.AdvertisePeerUrls = []url.URL{pu}
	cfg.ListenMetricsUrls = nil
	// Compaction keeps the data directory small. Raft keeps etcd's ticks
	// (100 ms heartbeat, 1 s election): shorter ones would tighten a
	// failover but elect spuriously when a busy machine's fsync stalls.
	cfg.AutoCompactionMode = "revision"
	cfg.AutoCompactionRetention = "10000"
	// A gang's attempt and all its assignments go in one transaction: one
	// operation and about 2 KB per rank, so etcd's defaults (128
	// operations, 1.5 MiB) would stop gangs of 128 ranks and more.
	cfg.MaxTxnOps = MaxTxnOps
	cfg.MaxRequestBytes = MaxRequestBytes
	if !c.Verbose {
		cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
		cfg.LogLevel = "error"
	}
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, fmt.Errorf("store: start embedded etcd: %w", err)
	}
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		e.Close()
		return nil, fmt.Errorf("store: embedded etcd: %w", err)
	case <-ctx.Done():
		e.Close()
		return nil, ctx.Err()
	case <-time.After(60 * time.Second):
		e.Close()
		return nil, errors.New("store: embedded etcd did not become ready in 60s")
	}
	return &Embedded{etcd: e, Endpoint: cu.String(), ClientFiles: p.client, clientTLS: clientTLS}, nil
}

// checkInitialCluster reports what in an --initial-cluster list cannot
// work for member name advertising peerURL, in the flags' words.
func checkInitialCluster(list, name, peerURL string) error {
	seen := map[string]bool{}
	found := false
	for _, m := range strings.Split(list, ",") {
		n, u, ok := strings.Cut(strings.TrimSpace(m), "=")
		if !ok || n == "" || u == "" {
			return fmt.Errorf("store: --initial-cluster %q: %q is not name=https://host:port", list, m)
		}
		pu, err := url.Parse(u)
		if err != nil || pu.Scheme != "https" || pu.Port() == "" {
			return fmt.Errorf("store: --initial-cluster: member %s at %q: want https://host:port (peers speak TLS)", n, u)
		}
		if seen[n] {
			return fmt.Errorf("store: --initial-cluster names member %s twice", n)
		}
		seen[n] = true
		if n == name {
			found = true
			if u != peerURL {
				return fmt.Errorf("store: --initial-cluster has this member (%s) at %s, but --etcd-peer-addr makes it %s", name, u, peerURL)
			}
		}
	}
	if !found {
		return fmt.Errorf("store: --initial-cluster %q does not name this member (--etcd-name %s)", list, name)
	}
	if len(seen)%2 == 0 {
		return fmt.Errorf("store: --initial-cluster has %d members: use an odd number (3 or 5) so that a majority survives a member's loss", len(seen))
	}
	return nil
}

// ClientTLS is a TLS configuration that dials Endpoint (with DialWith):
// it trusts etcd's CA and presents the client certificate. Each call
// returns a new copy.
func (e *Embedded) ClientTLS() *tls.Config { return e.clientTLS.Clone() }

// Client returns an in-process client that needs no network round trip.
// Closing it does not stop the member.
func (e *Embedded) Client() *clientv3.Client { return v3client.New(e.etcd.Server) }

// Close stops the member and waits for it. It may be called again.
func (e *Embedded) Close() { e.closeOnce.Do(e.etcd.Close) }

// Done is closed once the member has stopped: after Close, or by itself
// on a fatal error, after which its clients only fail.
func (e *Embedded) Done() <-chan struct{} { return e.etcd.Server.StopNotify() }

func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("store: pick a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// Dial connects to an external etcd cluster over plain connections (or
// TLS without a client certificate, for https endpoints whose CA the
// system trusts); DialWith can present one.
func Dial(ctx context.Context, endpoints []string) (*clientv3.Client, error) {
	return DialWith(ctx, DialConfig{Endpoints: endpoints})
}

// DialConfig says how to reach an etcd cluster.
type DialConfig struct {
	Endpoints []string
	// TLS, if not nil, is used for every connection: its RootCAs trust the
	// cluster's servers and its certificate authenticates this client
	// (Embedded.ClientTLS, or TLSFiles.ClientConfig for an external
	// cluster). Nil: the endpoints' schemes decide.
	TLS *tls.Config
}

// DialWith connects to an etcd cluster as c says.
func DialWith(ctx context.Context, c DialConfig) (*clientv3.Client, error) {
	endpoints := c.Endpoints
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   endpoints,
		TLS:         c.TLS,
		DialTimeout: 5 * time.Second,
		Context:     ctx,
		Logger:      zap.NewNop(),
		// Big gangs' transactions (see MaxRequestBytes); the cluster's
		// own --max-request-bytes and --max-txn-ops must allow them too.
		MaxCallSendMsgSize: MaxRequestBytes + 1<<20,
		MaxCallRecvMsgSize: 0, // unlimited: a full list of a big cluster
	})
	if err != nil {
		return nil, fmt.Errorf("store: dial etcd %v: %w", endpoints, err)
	}
	return cli, nil
}
