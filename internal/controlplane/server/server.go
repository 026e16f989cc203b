// Package server is gangway's control plane process: it opens the store
// (embedded etcd by default), serves the REST API under /v1 for people and
// agents, and, on the replica elected leader, runs the controllers.
//
// It is HTTP only: the handlers read and write the store and hand work to
// the controller, and decide nothing of placement or lifecycle. A file per
// resource (jobs.go, nodes.go, agents.go, queues.go, deployments.go, and
// usage.go for the usage report, events.go for the events) holds its
// routes and handlers; http.go the routing and the helpers they share;
// admit.go and capacity.go what a submission must pass; idempotency.go
// its Idempotency-Key (a retry answers what the first try created);
// server.go the process (store, cache, gateway, HTTP); election.go leader
// election; forward.go what replicas that do not lead hand the leader;
// cluster.go the check that the data directory and the store belong to
// one cluster; config.go the Config; metrics.go the Prometheus series
// (client_golang) and admin.go the plain-HTTP listeners that serve them
// with pprof; gateway.go feeds the gateway its replicas and answers its
// counters. The web dashboard (internal/controlplane/ui) is mounted at
// /ui/, public, its data fetched from /v1 with the user's token. The wire
// types are internal/api's; Go callers use internal/api/client.
//
// Security is authn.go (who calls: a node certificate, a token, or an
// OIDC ID token checked by coreos/go-oidc in oidc.go),
// authz.go (what each route needs), tokens.go, nodeauth.go (join, renew,
// revoke) and tlsconf.go (the CA and certificates).
//
// It imports api, api/client (the client config it writes for the first
// admin), base/adminhttp, base/fastjson, base/pki, base/stats, controlplane/audit,
// controlplane/controller, controlplane/events, controlplane/jobarchive, controlplane/openapi, controlplane/ratelimit,
// controlplane/store, controlplane/ui, goodput, inference/autoscale, inference/gateway,
// launch, planner and topology.
package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gangway/gangway/internal/api"
	"github.com/gangway/gangway/internal/api/client"
	"github.com/gangway/gangway/internal/base/pki"
	"github.com/gangway/gangway/internal/controlplane/audit"
	"github.com/gangway/gangway/internal/controlplane/controller"
	"github.com/gangway/gangway/internal/controlplane/events"
	"github.com/gangway/gangway/internal/controlplane/jobarchive"
	"github.com/gangway/gangway/internal/controlplane/ratelimit"
	"github.com/gangway/gangway/internal/controlplane/store"
	"github.com/gangway/gangway/internal/inference/gateway"
	"github.com/gangway/gangway/internal/planner"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Server is one control-plane replica.
type Server struct {
	cfg  Config
	log  *slog.Logger
	live *controller.Liveness // replaced on each leadership; read via liveness()
	// fence is the timing contract with the agents; pool what witnesses
	// are picked from (witnesses.go).
	fence controller.Fencing
	pool  witnessPool

	strag *stragglers // the running gangs' work per rank
	// readings are the GPUs' newest telemetry, by node (top.go).
	readings gpuReadings

	// Set once Run has opened the store; read by handlers.
	st *store.Store
	// cache mirrors the store for the server's whole life: agents' long
	// polls and heartbeats are answered from it, and the controller reads
	// it while this replica leads.
	cache *store.Cache
	// evlog is the events the store holds, which the cache keeps filled
	// (GET /v1/events); recorder writes the events of what the cache
	// applies while this replica leads. Set by Run.
	evlog    *store.EventLog
	recorder *events.Recorder
	// catalog is the planner's models and GPUs, for admission.
	catalog *planner.Catalog
	// scaler sizes autoscaled deployments; set by Run before leading.
	scaler controller.Scaler
	// gw is the gateway, which always runs (it serves the OpenAI API
	// only with Config.Gateway); set by Run before it serves.
	gw *gateway.Gateway

	mu      sync.Mutex                // guards written, leader and live
	written map[string]api.RankStatus // last rank status stored, by task key
	// statuses group-commits heartbeats' rank statuses.
	statuses statusBatcher
	leader   bool
	ctl      *controller.Controller // the running controller while leader

	// refused counts the reports agents may not make (reportscope.go).
	refused refusals

	capMu    sync.Mutex // guards capNodes and capAt
	capNodes []*api.Node
	capAt    time.Time

	// Security (authn.go, authz.go, nodeauth.go); set by Run before it
	// serves, then read-only.
	ca       *pki.CA      // signs node certificates
	caPEM    []byte       // the CA clients and agents trust
	serverKP *pki.KeyPair // the server's certificate, served and shown to agents
	agentHC  *http.Client // calls agents (the log proxy) with serverKP
	tokens   tokenCache
	revoked  revocations
	// refusedAuth counts requests refused for their credentials.
	refusedAuth atomic.Int64
	// ready is closed once the API serves with its first admin token.
	ready chan struct{}
	// audit records mutating requests; set by Run before it serves.
	audit *audit.Log
	// limiter bounds each user's request rate; nil: none.
	limiter *ratelimit.Limiter
	archive *jobarchive.Archive // nil without --job-archive (archive.go)
	// oidc verifies ID tokens; nil without an issuer. Set by Run.
	oidc *oidcAuth
	// advertised is this replica's URL for other replicas and clients;
	// lead what it knows of the leader (forward.go). Set by Run.
	advertised string
	leaderOf   leaderState
	// peerTLS is the embedded etcd's peer certificate (with other members).
	peerTLS store.TLSFiles
	// closing ends when Run begins to shut down (long polls end with it);
	// closeNow ends it.
	closing  context.Context
	closeNow context.CancelFunc
	// etcd is the embedded member, nil with an external etcd. Set by Run.
	etcd *store.Embedded
	// clusterID is the cluster's (cluster.go). Set by Run before it serves.
	clusterID string
	// metrics are the server's series (metrics.go); admin its admin
	// listeners' addresses (admin.go).
	metrics *metrics
	admin   adminAddrs
	// sim lets one simulation run at a time (simulate.go).
	sim simSlot
	// hooks are what only tests set.
	hooks testHooks
}

// DefaultNodeTimeout is how long a node may be silent before it is lost:
// 4.5 heartbeats, the least that leaves the agents' witnesses (see
// controller.Fencing) time to tell a dead control plane from a cut-off
// node, with half a heartbeat to spare.
const DefaultNodeTimeout = 4500 * time.Millisecond

// DefaultMaxOutage is how long agents keep ranks through a control-plane
// outage by default.
const DefaultMaxOutage = controller.DefaultMaxOutage

// DefaultAPIRate is each user's request rate allowed by default, per
// second (twice that in a burst): far above what a person or a script
// submitting jobs needs, far below what hurts the control plane.
const DefaultAPIRate = 100

// New checks cfg and returns a server; Run starts it.
func New(cfg Config) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.applyDefaults()
	fence := controller.NewFencing(cfg.HeartbeatInterval, cfg.NodeTimeout, cfg.MaxOutage)
	closing, closeNow := context.WithCancel(context.Background())
	s := &Server{cfg: cfg, log: cfg.Log, catalog: planner.DefaultCatalog(), fence: fence,
		live:  controller.NewLiveness(time.Now()).SetStreakGap(fence.StreakGap),
		strag: newStragglers(), written: map[string]api.RankStatus{}, ready: make(chan struct{}), closing: closing, closeNow: closeNow,
		archive: openArchive(cfg.JobArchive)}
	if cfg.APIRate > 0 {
		s.limiter = ratelimit.New(ratelimit.Config{PerSecond: cfg.APIRate, Burst: cfg.APIBurst})
	}
	s.metrics = newMetrics(s)
	return s, nil
}

// Ready is closed once the server serves its API over TLS, with the admin
// token of a first start made (AdminConfig can then be read).
func (s *Server) Ready() <-chan struct{} { return s.ready }

// AdminConfigPath is where the first start wrote the admin's client
// configuration.
func (s *Server) AdminConfigPath() string { return filepath.Join(s.cfg.DataDir, AdminConfigFile) }

// AdminConfig is the client configuration of the admin token the server's
// first start wrote to DataDir/admin.conf.
func (s *Server) AdminConfig() (client.Config, error) {
	return client.ConfigFor(filepath.Join(s.cfg.DataDir, AdminConfigFile), client.Resolve{})
}

// Loopback is a server running in the background on a loopback port.
type Loopback struct {
	// URL is its base URL (https).
	URL string
	// Admin is the admin's client configuration.
	Admin client.Config
	// Stop ends it and returns Run's error.
	Stop func() error
}

// StartLoopback runs a server with cfg on a free loopback port in the
// background (benchmarks and demos in one process) and returns once it
// serves.
func StartLoopback(cfg Config) (*Loopback, error) {
	srv, err := New(cfg)
	if err != nil {
		return nil, fmt.Errorf("configure server: %w", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("listen on loopback: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx, ln) }()
	select {
	case <-srv.Ready():
	case err := <-done:
		cancel()
		return nil, err
	}
	admin, err := srv.AdminConfig()
	if err != nil {
		cancel()
		<-done
		return nil, err
	}
	return &Loopback{URL: "https://" + ln.Addr().String(), Admin: admin, Stop: func() error { cancel(); return <-done }}, nil
}

// Run opens the store, serves HTTP on ln and campaigns for leadership
// until ctx ends or serving fails; then it shuts everything down and
// returns, only after every goroutine it started has exited.
func (s *Server) Run(ctx context.Context, ln net.Listener) error {
	// Close the listeners whatever happens: a Run that fails before it
	// serves must not leave clients connected to a socket nobody reads.
	defer ln.Close()
	if s.cfg.Gateway != nil {
		defer s.cfg.Gateway.Close()
	}
	// TLS first: with other members, the embedded etcd's peers use the
	// cluster CA.
	tlsCfg, err := s.setupTLS(ln.Addr())
	if err != nil {
		return err
	}
	defer s.leaderOf.hc.CloseIdleConnections()
	defer s.agentHC.CloseIdleConnections()
	var cli *clientv3.Client
	var etcdStopped <-chan struct{} // the embedded member's; nil: never
	if len(s.cfg.EtcdEndpoints) > 0 {
		c, err := store.DialWith(ctx, store.DialConfig{Endpoints: s.cfg.EtcdEndpoints, TLS: s.cfg.EtcdTLS})
		if err != nil {
			return err
		}
		cli = c
	} else {
		ec := store.EmbeddedConfig{
			Dir: s.cfg.DataDir, ClientAddr: s.cfg.EtcdClientAddr, PeerAddr: s.cfg.EtcdPeerAddr,
			Name: s.cfg.EtcdName, InitialCluster: s.cfg.InitialCluster, ExistingCluster: s.cfg.ExistingCluster,
		}
		if s.cfg.InitialCluster != "" {
			ec.PeerTLS, ec.PeerCN = s.peerTLS, pki.ServerName
			s.log.Info("starting the embedded etcd member; it serves once a majority of --initial-cluster has started",
				"name", s.cfg.EtcdName, "initial_cluster", s.cfg.InitialCluster)
		}
		e, err := store.StartEmbedded(ctx, ec)
		if err != nil {
			return err
		}
		defer e.Close()
		cli, s.etcd, etcdStopped = e.Client(), e, e.Done()
		s.log.Info("embedded etcd ready", "endpoint", e.Endpoint, "dir", s.cfg.DataDir)
	}
	defer cli.Close()
	if err := os.MkdirAll(s.cfg.CheckpointRoot, 0o755); err != nil {
		return fmt.Errorf("server: checkpoint root: %w", err)
	}
	s.st = store.NewWith(cli, store.Options{CallTimeout: s.hooks.storeTimeout, OnTxn: s.metrics.txn, EventTTL: s.cfg.EventTTL})
	if s.clusterID, err = s.checkCluster(ctx); err != nil {
		return err
	}
	s.cache = store.NewCache(s.st, s.log)
	s.evlog = store.NewEventLog(s.cfg.MaxEvents)
	s.recorder = events.New(s.st, events.Config{MaxEvents: s.cfg.MaxEvents, Tick: s.cfg.RetentionTick}, s.log)
	s.cache.SetEvents(s.evlog)
	s.cache.SetTap(s.recorder)
	s.statuses.st = s.st
	s.advertised = s.advertiseURL(ln.Addr())
	if err := s.bootstrap(ctx, s.advertised); err != nil {
		return err
	}
	if s.cfg.OIDC.Issuer != "" {
		if s.oidc, err = newOIDC(ctx, s.cfg.OIDC); err != nil {
			return err
		}
	}
	if m, err := s.st.Revocations(ctx); err == nil {
		s.setRevoked(m)
	}
	ln = tls.NewListener(ln, tlsCfg)
	auditPath := s.cfg.AuditLog
	if auditPath == "-" {
		auditPath = ""
	}
	if s.audit, err = audit.Open(auditPath, s.cfg.AuditKeep); err != nil {
		return fmt.Errorf("server: audit log: %w", err)
	}
	defer s.audit.Close()

	srv := &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 10 * time.Second,
		ErrorLog: slog.NewLogLogger(s.log.Handler(), slog.LevelDebug)}
	// Every goroutine below is waited for, on every return: the deferred
	// cancels run first, then the wait.
	var wg sync.WaitGroup
	defer wg.Wait()
	errc := make(chan error, 4)
	cctx, ccancel := context.WithCancel(ctx)
	defer ccancel()
	wg.Add(2)
	go func() { defer wg.Done(); _ = s.cache.Run(cctx) }()
	go func() { defer wg.Done(); s.refreshRevocations(cctx) }()
	wg.Add(1)
	go func() { defer wg.Done(); s.watchLeader(cctx, cli) }()
	// The gateway always runs: it watches every deployment's replicas,
	// which the autoscaler needs; it serves requests only with a listener.
	gw, err := gateway.New(gateway.Config{Source: deploymentSource{c: s.cache}, Policy: s.cfg.GatewayPolicy, Logger: s.log, Keys: s.cfg.GatewayKeys,
		StreamHeaderTimeout: s.cfg.GatewayStreamHeaderTimeout, HeaderTimeout: s.cfg.GatewayHeaderTimeout})
	if err != nil {
		return fmt.Errorf("server: gateway: %w", err)
	}
	s.scaler, s.gw = newGatewayScaler(gw), gw
	gctx, gcancel := context.WithCancel(ctx)
	defer gcancel()
	wg.Add(1)
	go func() { defer wg.Done(); _ = gw.Run(gctx) }()
	var gwSrv *http.Server
	if s.cfg.Gateway != nil {
		gwSrv = &http.Server{Handler: gw, ReadHeaderTimeout: 10 * time.Second}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := gwSrv.Serve(s.cfg.Gateway); err != nil && !errors.Is(err, http.ErrServerClosed) {
				errc <- fmt.Errorf("server: gateway: %w", err)
			}
		}()
		s.log.Info("gateway serving the OpenAI API", "addr", s.cfg.Gateway.Addr().String())
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			errc <- fmt.Errorf("server: http: %w", err)
		}
	}()
	if err := s.serveAdmin(cctx, &wg, errc); err != nil {
		return err
	}
	close(s.ready)
	// Leadership: stopLead is its stop, leadDone its done. It ends before
	// anything it uses (the store, the cache, the gateway's scaler).
	lctx, stopLead := context.WithCancel(ctx)
	defer stopLead()
	leadDone := make(chan struct{})
	go func() {
		defer close(leadDone)
		s.lead(lctx, cli)
	}()
	err = nil
	select {
	case <-ctx.Done():
	case err = <-errc:
	case <-etcdStopped:
		// Its in-process clients would only fail from now on.
		err = errors.New("server: the embedded etcd stopped")
	}
	stopLead()
	<-leadDone
	s.closeNow()
	sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer scancel()
	_ = srv.Shutdown(sctx)
	if gwSrv != nil {
		_ = gwSrv.Shutdown(sctx)
	}
	gcancel()
	ccancel()
	wg.Wait()
	return err
}

func (s *Server) setLeader(v bool) {
	s.mu.Lock()
	s.leader = v
	s.mu.Unlock()
}

// controller is the controller this replica runs, nil unless it leads.
func (s *Server) controller() *controller.Controller {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ctl
}

func (s *Server) liveness() *controller.Liveness {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.live
}
