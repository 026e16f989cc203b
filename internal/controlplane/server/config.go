package server

import (
	"cmp"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/gangway/gangway/internal/controlplane/controller"
	"github.com/gangway/gangway/internal/controlplane/jobarchive"
	"github.com/gangway/gangway/internal/inference/gateway"
	"github.com/gangway/gangway/internal/topology"
)

// Config configures a server.
type Config struct {
	// DataDir holds the embedded etcd and default checkpoints.
	DataDir string
	// EtcdEndpoints, if set, uses an external etcd cluster instead of the
	// embedded member.
	EtcdEndpoints []string
	// EtcdClientAddr and EtcdPeerAddr fix the embedded member's ports
	// (empty: free loopback ports).
	EtcdClientAddr string
	EtcdPeerAddr   string
	// EtcdName and InitialCluster make the embedded member one of several
	// (replicas, each with its own DataDir): InitialCluster lists every
	// member as name=https://host:port (etcd's --initial-cluster, the
	// peer addresses), this one as EtcdName at EtcdPeerAddr. Peers speak
	// TLS with certificates of the cluster CA, which every replica must
	// share (TLSCA and TLSCAKey). ExistingCluster joins a running cluster
	// (a replaced member) instead of forming a new one.
	EtcdName        string
	InitialCluster  string
	ExistingCluster bool
	// NodeTimeout: a node silent this long is lost, once one of its
	// witnesses has been heard long enough (controller.Fencing). Default
	// DefaultNodeTimeout.
	NodeTimeout time.Duration
	// HeartbeatInterval agents are told to keep. Default 1s.
	HeartbeatInterval time.Duration
	// MaxOutage is how long agents keep their ranks while no server
	// answers them or their witnesses; default controller.DefaultMaxOutage.
	MaxOutage time.Duration
	// HealthReturn: a GPU or node out of service for its health returns
	// once its checks have all passed this long; negative keeps it out
	// until an operator uncordons it. 0: DefaultHealthReturn.
	HealthReturn time.Duration
	// LemonFaults fatal findings within LemonWindow flag a node a lemon
	// (kept out of multi-node gangs until uncordoned); defaults 3 and 24h.
	LemonFaults int
	LemonWindow time.Duration
	// Straggler detection (straggler.go): what to do, and its factor and
	// window; defaults report, DefaultStragglerFactor and -Window.
	StragglerAction string
	StragglerFactor float64
	StragglerWindow time.Duration
	// Preflight tests wide gangs' placements before they run.
	Preflight controller.Preflight
	// Gateway, if set, serves the OpenAI API for every deployment on this
	// listener (routing policy GatewayPolicy, default prefix-affinity).
	Gateway       net.Listener
	GatewayPolicy string
	// GatewayStreamHeaderTimeout and GatewayHeaderTimeout bound how long a
	// replica may take to send response headers (streamed requests; the
	// rest) before the gateway tries the next; see gateway.Config. Zero
	// takes the gateway's defaults (60s; none), negative: no bound.
	GatewayStreamHeaderTimeout, GatewayHeaderTimeout time.Duration
	// TopologyFiles are Slurm topology.conf files (tree or block form)
	// describing the fabric.
	TopologyFiles []topology.File
	// CheckpointRoot is the shared parent of default checkpoint dirs.
	// Default DataDir/checkpoints.
	CheckpointRoot string
	// CheckpointDirRoots are the directories a spec's own checkpointDir
	// must lie under (agents create it, and retention deletes in it).
	// Default CheckpointRoot alone, made absolute.
	CheckpointDirRoots []string
	// JobRetention and MaxFinishedJobs bound the finished jobs the store
	// keeps: by age, and by count (the oldest go first). 0 keeps them.
	JobRetention    time.Duration
	MaxFinishedJobs int
	// JobArchive.Path, if set, is the file each job is appended to (a JSON
	// line) before retention deletes it; it rotates by size.
	JobArchive jobarchive.Config
	// RetentionTick is how often retention looks; default 10s.
	RetentionTick time.Duration
	// EventTTL is how long events are kept (default
	// store.DefaultEventTTL); MaxEvents how many at most, the oldest
	// deleted first, and how many each replica keeps in memory (default
	// store.DefaultMaxEvents).
	EventTTL  time.Duration
	MaxEvents int

	// TLS. The API is HTTPS only. By default the server makes a cluster CA
	// under DataDir/pki on its first start and issues its own certificate
	// from it; TLSCA and TLSCAKey give the operator's CA instead, and
	// TLSCert and TLSKey the operator's serving certificate.
	TLSCert, TLSKey, TLSCA, TLSCAKey string
	// TLSSANs are more names (host names, IPs) the server's own
	// certificate is valid for, besides this host's names and addresses.
	TLSSANs []string
	// NodeCertTTL is how long node certificates last (agents renew them
	// at two thirds). Default DefaultNodeCertTTL.
	NodeCertTTL time.Duration
	// ClientConfig, if set, is the client config file (contexts, as
	// kubeconfig) the first start adds the admin's context to, besides
	// DataDir/admin.conf.
	ClientConfig string
	// SecretsDir holds the files jobs' secretEnv names: DIR/USER/FILE.
	// "" keeps no secrets.
	SecretsDir string
	// AuditLog is the file every mutating request is appended to (JSON
	// lines; rotated at 100 MiB, 5 kept); default DataDir/audit.log, "-"
	// none (GET /v1/audit still shows the newest AuditKeep).
	AuditLog  string
	AuditKeep int
	// APIRate and APIBurst bound each user's (and each unauthenticated
	// address's) requests per second; admins and nodes are not limited.
	// 0: DefaultAPIRate; negative: no limit.
	APIRate  float64
	APIBurst int
	// OIDC, if its Issuer is set, accepts the provider's ID tokens.
	OIDC OIDCConfig
	// GatewayKeys, if set, makes the gateway require an API key from it.
	GatewayKeys gateway.Keys
	// EtcdTLS is the client TLS for an external etcd (EtcdEndpoints).
	EtcdTLS *tls.Config
	// MetricsListen, if set, serves /metrics in plain HTTP there, for a
	// Prometheus elsewhere; DebugListen, if set, serves /metrics and
	// pprof (loopback by default in `gangway server`). See admin.go.
	MetricsListen, DebugListen string
	// AdvertiseURL is the URL clients reach this server at, written into
	// the admin's client config; default https:// and the listener's
	// address (loopback for a wildcard one).
	AdvertiseURL string
	// Simulator, if set, answers POST /v1/simulate (simulate.go): the cli
	// tier's, as this tier may not import internal/sim. nil: 501.
	Simulator Simulator
	// TraceDir, if set, holds the traces a simulation may name; without
	// it, traces are uploaded.
	TraceDir string
	Log      *slog.Logger
}

// applyDefaults fills what was left zero.
func (c *Config) applyDefaults() {
	if c.HealthReturn == 0 {
		c.HealthReturn = DefaultHealthReturn
	}
	if c.LemonFaults <= 0 {
		c.LemonFaults = 3
	}
	if c.LemonWindow <= 0 {
		c.LemonWindow = 24 * time.Hour
	}
	c.StragglerAction = cmp.Or(c.StragglerAction, StragglerReport)
	c.StragglerFactor = cmp.Or(c.StragglerFactor, DefaultStragglerFactor)
	c.StragglerWindow = cmp.Or(c.StragglerWindow, DefaultStragglerWindow)
	if c.NodeTimeout <= 0 {
		c.NodeTimeout = DefaultNodeTimeout
	}
	if c.HeartbeatInterval <= 0 {
		c.HeartbeatInterval = time.Second
	}
	if c.CheckpointRoot == "" && c.DataDir != "" {
		c.CheckpointRoot = filepath.Join(c.DataDir, "checkpoints")
	}
	// Absolute, as agents in other directories and the report screen
	// (which compares absolute paths) need it.
	if abs, err := filepath.Abs(c.CheckpointRoot); err == nil && c.CheckpointRoot != "" {
		c.CheckpointRoot = abs
	}
	if len(c.CheckpointDirRoots) == 0 && c.CheckpointRoot != "" {
		c.CheckpointDirRoots = []string{c.CheckpointRoot}
	}
	if c.Log == nil {
		c.Log = slog.New(slog.DiscardHandler)
	}
	if c.NodeCertTTL <= 0 {
		c.NodeCertTTL = DefaultNodeCertTTL
	}
	if c.AuditLog == "" && c.DataDir != "" {
		c.AuditLog = filepath.Join(c.DataDir, "audit.log")
	}
	if c.AuditKeep <= 0 {
		c.AuditKeep = 10000
	}
	if c.APIRate == 0 {
		c.APIRate = DefaultAPIRate
	}
	if c.APIBurst <= 0 {
		c.APIBurst = int(2 * max(c.APIRate, 1))
	}
}

// Validate reports the first setting that cannot work, named by the flag
// of `gangway server` that sets it. Zero values are read as their
// defaults.
func (c Config) Validate() error {
	c.applyDefaults()
	switch {
	case c.DataDir == "" && len(c.EtcdEndpoints) == 0:
		return errors.New("server: --data-dir is required with the embedded store")
	case c.CheckpointRoot == "":
		return errors.New("server: --checkpoint-root is required with an external etcd")
	case c.HeartbeatInterval*2 > c.NodeTimeout:
		return fmt.Errorf("server: --node-timeout %s must be at least twice --heartbeat-interval %s", c.NodeTimeout, c.HeartbeatInterval)
	case c.MaxOutage < 0:
		return fmt.Errorf("server: --max-outage %s is negative", c.MaxOutage)
	case c.JobRetention < 0:
		return fmt.Errorf("server: --job-retention %s is negative (0 keeps finished jobs)", c.JobRetention)
	case c.MaxFinishedJobs < 0:
		return fmt.Errorf("server: --max-finished-jobs %d is negative (0: no limit)", c.MaxFinishedJobs)
	case c.EventTTL < 0:
		return fmt.Errorf("server: --event-ttl %s is negative", c.EventTTL)
	case c.MaxEvents < 0:
		return fmt.Errorf("server: --max-events %d is negative", c.MaxEvents)
	case c.RetentionTick < 0:
		return fmt.Errorf("server: retention tick %s is negative", c.RetentionTick)
	case (c.TLSCert == "") != (c.TLSKey == ""):
		return errors.New("server: give --tls-cert and --tls-key together")
	case (c.TLSCA == "") != (c.TLSCAKey == ""):
		return errors.New("server: give --tls-ca and --tls-ca-key together (the CA key signs node certificates)")
	case c.InitialCluster != "" && len(c.EtcdEndpoints) > 0:
		return errors.New("server: --initial-cluster forms an embedded etcd of several members; with --etcd-endpoints there is none")
	case c.InitialCluster != "" && (c.EtcdName == "" || c.EtcdPeerAddr == ""):
		return errors.New("server: --initial-cluster needs --etcd-name (this member's name in it) and --etcd-peer-addr (where the others reach it)")
	case c.InitialCluster != "" && c.TLSCA == "":
		return errors.New("server: replicas must share one cluster CA: give each --tls-ca and --tls-ca-key (make one with: gangway ca create DIR)")
	case c.DataDir == "" && c.TLSCA == "":
		return errors.New("server: --data-dir (where the cluster CA is made) or --tls-ca is required")
	case c.Preflight.MinNodes < 0:
		return fmt.Errorf("server: --preflight-min-nodes %d: want 0 (no preflight) or more", c.Preflight.MinNodes)
	case c.Preflight.MinRatio < 0 || c.Preflight.MinRatio >= 1:
		return fmt.Errorf("server: --preflight-min-ratio %g: want a fraction of the median between 0 and 1", c.Preflight.MinRatio)
	case !slices.Contains(stragglerActions, c.StragglerAction):
		return fmt.Errorf("server: --straggler-action %q: want one of %s", c.StragglerAction, strings.Join(stragglerActions, ", "))
	case c.StragglerFactor <= 1 || c.StragglerWindow < 0:
		return fmt.Errorf("server: --straggler-factor %g must be above 1 and --straggler-window %s not negative", c.StragglerFactor, c.StragglerWindow)
	}
	return c.JobArchive.Validate()
}
