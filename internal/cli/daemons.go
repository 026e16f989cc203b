package cli

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/gangway/gangway/examples/train-go/trainer"
	"github.com/gangway/gangway/internal/api"
	"github.com/gangway/gangway/internal/api/client"
	"github.com/gangway/gangway/internal/base/cmdkit"
	"github.com/gangway/gangway/internal/cli/simcli"
	"github.com/gangway/gangway/internal/controlplane/controller"
	"github.com/gangway/gangway/internal/controlplane/jobarchive"
	"github.com/gangway/gangway/internal/controlplane/server"
	"github.com/gangway/gangway/internal/controlplane/store"
	"github.com/gangway/gangway/internal/inference/gateway"
	"github.com/gangway/gangway/internal/node/agent"
	"github.com/gangway/gangway/internal/node/cgroup"
	"github.com/gangway/gangway/internal/node/container"
	"github.com/gangway/gangway/internal/node/driver"
	"github.com/gangway/gangway/internal/node/gpu"
	"github.com/gangway/gangway/internal/node/health"
	"github.com/gangway/gangway/internal/node/health/gpucheck"
	"github.com/gangway/gangway/internal/node/health/xid"
	"github.com/gangway/gangway/internal/topology"
)

func runServer(ctx context.Context, e *Env, args []string) int {
	cfg, ln, code, ok := serverConfig(e, args)
	if !ok {
		return code
	}
	s, err := server.New(cfg)
	if err != nil {
		ln.Close()
		if cfg.Gateway != nil {
			cfg.Gateway.Close()
		}
		return fail(e, err)
	}
	cfg.Log.Info("gangway server listening", "addr", ln.Addr().String())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx, ln) }()
	select {
	case <-s.Ready():
		printJoinToken(ctx, e, s)
	case err := <-done:
		if err != nil {
			return fail(e, err)
		}
		return 0
	}
	if err := <-done; err != nil {
		return fail(e, err)
	}
	return 0
}

// printJoinToken prints, as kubeadm init does, a join token good for one
// agent and an hour, and the command that uses it.
func printJoinToken(ctx context.Context, e *Env, s *server.Server) {
	admin, err := s.AdminConfig()
	if err != nil {
		fmt.Fprintf(e.Stderr, "gangway server: no admin config to make a join token with: %v\n", err)
		return
	}
	c, err := newClient(admin)
	if err != nil {
		return
	}
	t, err := c.CreateToken(ctx, &api.TokenRequest{Kind: api.TokenJoin, Uses: 1, TTL: api.Duration(time.Hour), Description: "printed at start"})
	if err != nil {
		fmt.Fprintf(e.Stderr, "gangway server: make a join token: %v\n", err)
		return
	}
	fmt.Fprintf(e.Stdout, "Admin client config: %s (token and CA; also in ~/.config/gangway/config.yaml unless --client-config \"\")\n"+
		"Join a node (this token admits one, for an hour; more: gangway token create --kind join --uses N):\n"+
		"  gangway agent --server %s --ca-file %s --join %s\n", s.AdminConfigPath(), admin.Server, admin.CAFile, t.Secret)
}

// serverConfig parses `gangway server`'s flags into the whole server
// configuration, with its API and gateway listeners open. The server is
// made from it only afterwards: New copies the configuration, so nothing
// may be added to it later.
func serverConfig(e *Env, args []string) (cfg server.Config, ln net.Listener, code int, ok bool) {
	fs := cmdkit.NewFlags(e.Stderr, "server", "--data-dir DIR [flags]")
	dataDir := fs.String("data-dir", "", "directory for the embedded etcd and default checkpoints (required unless --etcd-endpoints)")
	listen := fs.String("listen", ":7070", "address the API listens on; the default takes every interface, since agents on other machines reach it (TLS and tokens guard it); HOST:7070 takes one")
	endpoints := fs.String("etcd-endpoints", "", "comma-separated URLs of an external etcd cluster (default: embedded single member)")
	etcdClient := fs.String("etcd-client-addr", "", "embedded etcd's client address (default: a free loopback port)")
	etcdPeer := fs.String("etcd-peer-addr", "", "embedded etcd's peer address, where other members reach it (default: a free loopback port)")
	etcdName := fs.String("etcd-name", "", "this replica's member name in --initial-cluster")
	initialCluster := fs.String("initial-cluster", "", "run as one of several replicas, each with an embedded etcd member: every member as NAME=https://HOST:PEERPORT,... (etcd's --initial-cluster; 3 or 5 members; all replicas share --tls-ca/--tls-ca-key)")
	clusterState := fs.String("initial-cluster-state", "new", "new (the replicas form a cluster together) or existing (this member replaces one of a running cluster)")
	nodeTimeout := fs.Duration("node-timeout", server.DefaultNodeTimeout, "a node that misses heartbeats this long is lost (once one of its witnesses is heard; at least 4 heartbeat intervals for witnesses to keep ranks through a control-plane outage)")
	maxOutage := fs.Duration("max-outage", server.DefaultMaxOutage, "agents keep their ranks this long while no server answers them or their witnesses")
	hbInterval := fs.Duration("heartbeat-interval", time.Second, "how often agents heartbeat")
	healthReturn := fs.Duration("health-return", server.DefaultHealthReturn, "a GPU or node taken out of service by a health check returns once its checks have passed this long (negative: only `gangway uncordon` returns it)")
	lemonFaults := fs.Int("lemon-faults", 3, "a node with this many health faults within --lemon-window is a lemon: kept out of gangs that span nodes until uncordoned")
	lemonWindow := fs.Duration("lemon-window", 24*time.Hour, "see --lemon-faults")
	stragAction := fs.String("straggler-action", server.StragglerReport, "a rank whose own work per step (progress lines' computeS) stays --straggler-factor times the median of its gang's ranks on other nodes for --straggler-window: off, report (log it, list it in describe job) or cordon (also take its node out of service, so the gang restarts without it)")
	stragFactor := fs.Float64("straggler-factor", server.DefaultStragglerFactor, "see --straggler-action")
	stragWindow := fs.Duration("straggler-window", server.DefaultStragglerWindow, "see --straggler-action")
	pfNodes := fs.Int("preflight-min-nodes", 0, "test a gang placed on this many nodes or more before its command runs: each node's health findings, then a ring over its nodes timing every link and an all-reduce; a node that fails or whose links run below --preflight-min-ratio of the gang's median is kept out and the gang placed again (0: no preflight)")
	pfRatio := fs.Float64("preflight-min-ratio", controller.DefaultPreflightRatio, "see --preflight-min-nodes")
	ckRoot := fs.String("checkpoint-root", "", "shared directory for job checkpoints (default DATA_DIR/checkpoints)")
	var ckDirRoots stringList
	fs.Var(&ckDirRoots, "checkpoint-dir-root", "a directory under which a job's own checkpointDir may lie (repeatable; default: --checkpoint-root alone)")
	var topoFiles stringList
	fs.Var(&topoFiles, "topology-file", "Slurm topology.conf (tree or block form) describing leaves, spines and NVLink blocks (repeatable)")
	gwListen := fs.String("gateway-listen", "", "also serve the OpenAI API for every deployment here (e.g. :8080)")
	gwPolicy := fs.String("gateway-policy", "prefix-affinity", "gateway routing: prefix-affinity, least-request, power-of-two or round-robin")
	gwStreamHdr := fs.Duration("gateway-stream-header-timeout", 60*time.Second, "a replica that sends no response headers for a streamed request this long counts as failed and the gateway tries the next (0: no bound)")
	gwHdr := fs.Duration("gateway-header-timeout", 0, "the same for requests not streamed, whose headers come with the whole completion (0: no bound)")
	retention := fs.Duration("job-retention", 7*24*time.Hour, "delete a finished job this long after it ended, with its rank statuses, checkpoint records and progress (0 keeps them)")
	maxFinished := fs.Int("max-finished-jobs", 100000, "keep at most this many finished jobs, deleting the oldest first, so the store cannot fill up (0: no limit)")
	archive := fs.String("job-archive", "", "append every job retention deletes to this file first, one JSON line each as describe shows it, where describe and logs still find it (default: none)")
	var archiveMax byteSize
	fs.Var(&archiveMax, "job-archive-max-size", "rotate --job-archive FILE to FILE.1 (and FILE.1 to FILE.2, ...) before it would grow past `SIZE` (bytes, or 512M, 1G; default 0: never)")
	archiveKeep := fs.Int("job-archive-keep", 0, "keep this many rotated archive files, deleting older ones (default 0: keep every one)")
	eventTTL := fs.Duration("event-ttl", store.DefaultEventTTL, "keep events (gangway events, describe) this long")
	maxEvents := fs.Int("max-events", store.DefaultMaxEvents, "keep at most this many events, deleting the oldest first (each server replica also holds them in memory)")
	tlsCert := fs.String("tls-cert", "", "the server's own certificate, PEM (default: issued by the cluster CA at each start)")
	tlsKey := fs.String("tls-key", "", "its key, PEM")
	tlsCA := fs.String("tls-ca", "", "the operator's CA certificate, PEM, to use as the cluster CA (default: made under DATA_DIR/pki on the first start)")
	tlsCAKey := fs.String("tls-ca-key", "", "its key, PEM (it signs node certificates)")
	var sans stringList
	fs.Var(&sans, "tls-san", "another host name or IP the server's certificate is valid for (repeatable)")
	nodeCertTTL := fs.Duration("node-cert-ttl", server.DefaultNodeCertTTL, "how long node certificates last (agents renew them at two thirds)")
	secretsDir := fs.String("secrets-dir", "", "directory of the files jobs' secretEnv names, one directory per user: DIR/USER/FILE (default: none)")
	clientConfig := fs.String("client-config", client.DefaultConfigPath(e.Getenv), "client config the first start adds the admin's context to (\"\": only DATA_DIR/admin.conf)")
	auditLog := fs.String("audit-log", "", "file every mutating request is appended to, one JSON line each (default DATA_DIR/audit.log; \"-\": none)")
	apiRate := fs.Float64("api-rate", server.DefaultAPIRate, "requests a second each user (and each unauthenticated address) may make, twice that in a burst; admins and agents are not limited (negative: no limit)")
	gwKeys := fs.String("gateway-api-keys", "", "API key file the gateway requires a key from (as gangway gateway --api-keys; default: no keys)")
	oidcIssuer := fs.String("oidc-issuer", "", "also accept ID tokens from this OpenID Connect provider (its URL)")
	oidcClient := fs.String("oidc-client-id", "", "the audience its ID tokens must name")
	oidcUser := fs.String("oidc-user-claim", "email", "the claim that names the user")
	oidcGroups := fs.String("oidc-groups-claim", "groups", "the claim that lists the user's groups")
	oidcAdmins := fs.String("oidc-admin-groups", "", "comma-separated groups whose members are admins")
	oidcViewers := fs.String("oidc-viewer-groups", "", "comma-separated groups whose members are viewers (others are users)")
	etcdCA := fs.String("etcd-ca", "", "CA file of an external etcd's client TLS (with --etcd-endpoints https://...)")
	etcdCert := fs.String("etcd-cert", "", "client certificate for the external etcd")
	etcdKey := fs.String("etcd-key", "", "its key")
	advertise := fs.String("advertise-url", "", "URL clients reach this server at, written into the admin's client config (default https:// and the listen address)")
	metricsListen := fs.String("metrics-listen", "", "also serve Prometheus metrics at /metrics in plain HTTP here, for a Prometheus on another machine (e.g. :9464; default: none)")
	debugListen := fs.String("debug-listen", "127.0.0.1:0", "serve /metrics and Go's pprof (/debug/pprof/) in plain HTTP here; loopback by default, on a port logged at start (\"\": none)")
	traceDir := fs.String("trace-dir", "", "directory of traces the dashboard's Simulate page (POST /v1/simulate) may name by file name (default: none; traces are then uploaded)")
	logLevel := fs.String("log-level", "info", "debug, info, warn or error")
	if _, code, ok := cmdkit.ParseArgs(fs, args); !ok {
		return cfg, nil, code, false
	}
	if *gwStreamHdr < 0 || *gwHdr < 0 {
		return cfg, nil, fail(e, fmt.Errorf("--gateway-stream-header-timeout %s, --gateway-header-timeout %s: must not be negative (0: no bound)", *gwStreamHdr, *gwHdr)), false
	}
	if *clusterState != "new" && *clusterState != "existing" {
		return cfg, nil, fail(e, fmt.Errorf("--initial-cluster-state %q: want new or existing", *clusterState)), false
	}
	if *archive != "" {
		// Found out now, not at the first deletion days from now.
		f, err := os.OpenFile(*archive, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
		if err != nil {
			return cfg, nil, fail(e, fmt.Errorf("--job-archive: %w", err)), false
		}
		f.Close()
	}
	if *traceDir != "" {
		if fi, err := os.Stat(*traceDir); err != nil || !fi.IsDir() {
			return cfg, nil, fail(e, fmt.Errorf("--trace-dir %s: not a directory", *traceDir)), false
		}
	}
	log, err := newLogger(e.Stderr, *logLevel)
	if err != nil {
		return cfg, nil, fail(e, err), false
	}
	cfg = server.Config{
		Simulator: simcli.Service{}, TraceDir: *traceDir,
		DataDir: *dataDir, NodeTimeout: *nodeTimeout, HeartbeatInterval: *hbInterval, MaxOutage: *maxOutage,
		HealthReturn: *healthReturn, LemonFaults: *lemonFaults, LemonWindow: *lemonWindow,
		StragglerAction: *stragAction, StragglerFactor: *stragFactor, StragglerWindow: *stragWindow,
		Preflight:      controller.Preflight{MinNodes: *pfNodes, MinRatio: *pfRatio},
		CheckpointRoot: *ckRoot, EtcdClientAddr: *etcdClient, EtcdPeerAddr: *etcdPeer, Log: log,
		EtcdName: *etcdName, InitialCluster: *initialCluster, ExistingCluster: *clusterState == "existing",
		JobRetention: *retention, MaxFinishedJobs: *maxFinished, EventTTL: *eventTTL, MaxEvents: *maxEvents, JobArchive: jobarchive.Config{Path: *archive, MaxBytes: int64(archiveMax), Keep: *archiveKeep},
		TLSCert: *tlsCert, TLSKey: *tlsKey, TLSCA: *tlsCA, TLSCAKey: *tlsCAKey, TLSSANs: sans,
		NodeCertTTL: *nodeCertTTL, SecretsDir: *secretsDir, ClientConfig: *clientConfig, AdvertiseURL: *advertise,
		AuditLog: *auditLog, APIRate: *apiRate, MetricsListen: *metricsListen, DebugListen: *debugListen,
		OIDC: server.OIDCConfig{Issuer: *oidcIssuer, ClientID: *oidcClient, UserClaim: *oidcUser, GroupsClaim: *oidcGroups,
			AdminGroups: splitList(*oidcAdmins), ViewerGroups: splitList(*oidcViewers)},
	}
	if *gwKeys != "" {
		kf, err := gateway.LoadKeyFile(*gwKeys)
		if err != nil {
			return cfg, nil, fail(e, fmt.Errorf("--gateway-api-keys: %w", err)), false
		}
		cfg.GatewayKeys = kf
	}
	if *etcdCA != "" || *etcdCert != "" {
		tc, err := store.TLSFiles{CA: *etcdCA, Cert: *etcdCert, Key: *etcdKey}.ClientConfig()
		if err != nil {
			return cfg, nil, fail(e, fmt.Errorf("--etcd-ca, --etcd-cert, --etcd-key: %w", err)), false
		}
		cfg.EtcdTLS = tc
	}
	if *endpoints != "" {
		cfg.EtcdEndpoints = strings.Split(*endpoints, ",")
	}
	for _, r := range ckDirRoots {
		if !filepath.IsAbs(r) {
			return cfg, nil, fail(e, fmt.Errorf("--checkpoint-dir-root %q: want an absolute path", r)), false
		}
		cfg.CheckpointDirRoots = append(cfg.CheckpointDirRoots, filepath.Clean(r))
	}
	if err := cfg.Validate(); err != nil {
		return cfg, nil, fail(e, err), false
	}
	for _, f := range topoFiles {
		b, err := os.ReadFile(f)
		if err != nil {
			return cfg, nil, fail(e, fmt.Errorf("--topology-file: %w", err)), false
		}
		tf, err := topology.ParseFile(f, b)
		if err != nil {
			return cfg, nil, fail(e, fmt.Errorf("--topology-file: %w", err)), false
		}
		cfg.TopologyFiles = append(cfg.TopologyFiles, tf)
	}
	if *gwListen != "" {
		gl, err := net.Listen("tcp", *gwListen)
		if err != nil {
			return cfg, nil, fail(e, fmt.Errorf("--gateway-listen %s: %w", *gwListen, err)), false
		}
		cfg.Gateway, cfg.GatewayPolicy = gl, *gwPolicy
		cfg.GatewayStreamHeaderTimeout, cfg.GatewayHeaderTimeout = gateway.TimeoutFromFlag(*gwStreamHdr), gateway.TimeoutFromFlag(*gwHdr)
	}
	ln, err = net.Listen("tcp", *listen)
	if err != nil {
		if cfg.Gateway != nil {
			cfg.Gateway.Close()
		}
		return cfg, nil, fail(e, fmt.Errorf("listen on %s: %w", *listen, err)), false
	}
	return cfg, ln, 0, true
}

// The server's simulator is gangway simulate's replay.
var _ server.Simulator = simcli.Service{}

// stringList collects a repeated flag.
type stringList []string

func (l *stringList) String() string     { return strings.Join(*l, ",") }
func (l *stringList) Set(v string) error { *l = append(*l, v); return nil }

// labelFlags collects repeated --label k=v.
type labelFlags map[string]string

func (l labelFlags) String() string { return fmt.Sprint(map[string]string(l)) }
func (l labelFlags) Set(v string) error {
	k, val, ok := strings.Cut(v, "=")
	if !ok || k == "" {
		return fmt.Errorf("want key=value, got %q", v)
	}
	l[k] = val
	return nil
}

func runAgent(ctx context.Context, e *Env, args []string) int {
	fs := cmdkit.NewFlags(e.Stderr, "agent", "--server URL --join TOKEN --ca-file CA.crt [flags]")
	srv := serverFlag(fs, e)
	join := fs.String("join", "", "join token for the node's first start (gangway token create --kind join; default $GANGWAY_JOIN_TOKEN, else an admin's token from --token or the client config)")
	name := fs.String("name", "", "node name (default: host name)")
	addr := fs.String("address", "", "IP address other nodes reach this one at (default: the route to the server)")
	listen := fs.String("listen", "", "where the agent serves logs (default ADDRESS:0)")
	dataDir := fs.String("data-dir", "", "directory for rank logs and state (default /var/lib/gangway/agent-NAME)")
	fake := fs.Int("fake-gpus", 0, "pretend this node has N GPUs (for machines without NVIDIA GPUs)")
	model := fs.String("gpu-model", "H100-SXM-80GB", "model of the fake GPUs: "+strings.Join(gpu.Models(), ", "))
	nvmlLib := fs.String("nvml-library", "", "path to libnvidia-ml.so (default: the loader's search path)")
	labels := labelFlags{}
	fs.Var(labels, "label", "topology or selector label key=value (repeatable), e.g. --label leaf=l1")
	healthInterval := fs.Duration("health-interval", health.DefaultInterval, "how often the node's health checks (Xids, ECC, heat, NVLink, PCIe, InfiniBand, memory, disk) run; 0 turns them off")
	healthInject := fs.String("health-inject", "", "with --fake-gpus: read faults to inject into the fake GPUs from this file, one JSON object per appended line, e.g. {\"gpu\":2,\"xid\":79} (for tests and demos)")
	ckRoot := fs.String("checkpoint-root", "", "the shared checkpoint directory, whose free space and writability the disk check watches (default: not checked)")
	taskRetention := fs.Duration("task-retention", 7*24*time.Hour, "remove a finished rank's directory (its logs and progress) this long after it last changed (0 keeps them)")
	metricsListen := fs.String("metrics-listen", "", "serve Prometheus metrics at /metrics in plain HTTP here: each GPU in dcgm-exporter's names and labels with the rank using it, and the ranks' progress (e.g. :9400; default: none)")
	debugListen := fs.String("debug-listen", "127.0.0.1:0", "serve /metrics and Go's pprof (/debug/pprof/) in plain HTTP here; loopback by default, on a port logged at start (\"\": none)")
	gpuMetricsInterval := fs.Duration("gpu-metrics-interval", agent.DefaultGPUMetricsInterval, "how often the agent reads the GPUs (NVML, or the fake GPUs) for its metrics and for gangway top")
	registryAuth := fs.String("registry-auth", "", "a Docker client config (config.json, as docker login writes it) with the registry credentials to pull jobs' images with (default: anonymous pulls)")
	dockerHost := fs.String("docker-host", "", "the Docker engine that runs the ranks of jobs with an image (unix:///PATH or tcp://HOST:PORT; default $DOCKER_HOST, else /var/run/docker.sock)")
	logLevel := fs.String("log-level", "info", "debug, info, warn or error")
	if _, code, ok := cmdkit.ParseArgs(fs, args); !ok {
		return code
	}
	driver.LightRuntime()
	log, err := newLogger(e.Stderr, *logLevel)
	if err != nil {
		return fail(e, err)
	}
	var disc gpu.Discoverer
	var nvmlOpts []gpu.NVMLOption
	if *fake > 0 {
		if disc, err = gpu.NewFake(*fake, *model, gpu.WithSeed(*name)); err != nil {
			return fail(e, fmt.Errorf("--gpu-model: %w", err))
		}
	} else {
		if *nvmlLib != "" {
			nvmlOpts = append(nvmlOpts, gpu.WithLibraryPath(*nvmlLib))
		}
		disc = gpu.NewNVML(nvmlOpts...)
	}
	if *healthInject != "" && *fake == 0 {
		return fail(e, fmt.Errorf("--health-inject: faults are injected into fake GPUs only; add --fake-gpus N"))
	}
	n := *name
	if n == "" {
		n, _ = os.Hostname()
	}
	var checks agent.HealthChecks
	if *healthInterval > 0 {
		if checks, err = nodeHealthChecks(ctx, disc, nvmlOpts, *fake, *healthInject, *ckRoot, *healthInterval, log.With("node", n)); err != nil {
			return fail(e, err)
		}
	}
	dir := *dataDir
	if dir == "" {
		dir = "/var/lib/gangway/agent-" + n
	}
	cg := "none"
	var release func(string) error
	if m, err := cgroup.Detect("/sys/fs/cgroup"); err == nil {
		cg = m.Describe()
		release = m.Remove
	}
	// The small gangway-shim, when installed next to gangway, runs the
	// rank supervisor without initialising the whole gangway program.
	shim := ""
	if exe, err := os.Executable(); err == nil {
		if p := filepath.Join(filepath.Dir(exe), "gangway-shim"); fileExists(p) {
			shim = p
		}
	}
	cc, err := srv.config()
	if err != nil {
		return fail(e, err)
	}
	joinTok := *join
	if joinTok == "" {
		joinTok = e.Getenv("GANGWAY_JOIN_TOKEN")
	}
	if joinTok == "" {
		joinTok = cc.Token // an admin's token joins a node too
	}
	a, err := agent.New(agent.Config{
		ShimPath: shim, JoinToken: joinTok, CAFile: cc.CAFile,
		Server: cc.Server, Name: n, Address: *addr, Listen: *listen, DataDir: dir,
		Labels: labels, GPUs: disc, Cgroups: cg, ReleaseLimits: release, Log: log, TaskRetention: *taskRetention,
		Health: checks, MetricsListen: *metricsListen, DebugListen: *debugListen, GPUMetricsInterval: *gpuMetricsInterval,
		DockerHost: *dockerHost, RegistryAuth: *registryAuth,
	})
	if err != nil {
		return fail(e, err)
	}
	if err := a.Run(ctx); err != nil {
		return fail(e, err)
	}
	return 0
}

func runSupervise(ctx context.Context, e *Env, args []string) int {
	return driver.SuperviseMain(args, e.Stderr)
}

func runCgExec(ctx context.Context, e *Env, args []string) int {
	return driver.CgExecMain(args, e.Stderr, cgroup.ApplyLimits)
}

func runContainerRank(ctx context.Context, e *Env, args []string) int {
	return container.RunMain(args, e.Stdout, e.Stderr)
}

func runContainerReap(ctx context.Context, e *Env, args []string) int {
	return container.ReapMain(args, e.Stderr)
}

func runTrainExample(ctx context.Context, e *Env, args []string) int {
	return trainer.Main(ctx, args, e.Getenv, e.Stdout, e.Stderr)
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

// nodeHealthChecks is the agent's health-check runner: the GPU checks on
// the fake GPUs (with faults injected from the file inject) or, on GPUs
// NVML discovered, the Xids of the kernel log and NVML's counters and Xid
// events (the kernel log's Xids alone where NVML cannot be opened for
// them); InfiniBand, memory and, with a checkpoint root, disk always.
func nodeHealthChecks(ctx context.Context, disc gpu.Discoverer, nvmlOpts []gpu.NVMLOption, fake int, inject, ckRoot string, every time.Duration, log *slog.Logger) (*health.Runner, error) {
	inv, err := disc.Discover(ctx)
	if err != nil {
		return nil, fmt.Errorf("health checks: discover GPUs: %w", err)
	}
	o := health.NodeOptions{GPUs: len(inv.Devices), CheckpointRoot: ckRoot, GPUHealth: len(inv.Devices) > 0, Logger: log}
	if fake > 0 {
		o.Fake = health.NewFake(len(inv.Devices), inject)
	} else {
		o.KmsgPath = health.DefaultKmsgPath
		o.BusIDs = map[string]int{}
		for _, d := range inv.Devices {
			o.BusIDs[d.PCIBusID] = d.Index
		}
		if inv.Source == gpu.SourceNVML && len(inv.Devices) > 0 {
			o.Provider, o.Events = openNVMLHealth(len(inv.Devices), nvmlOpts, log)
		}
	}
	checks, _, err := health.DefaultChecks(o)
	if err != nil {
		if c, ok := o.Provider.(io.Closer); ok {
			c.Close()
		}
		return nil, err
	}
	return health.NewRunner(checks, health.Options{Interval: every, Logger: log}), nil
}

// openNVMLHealth opens NVML for the health checks of a node whose gpus
// GPUs NVML discovered. It returns nils, after logging why, when NVML
// cannot be opened or counts other GPUs than discovery kept (the checks
// ask by index): the node then runs the checks it ran before NVML read
// its health, the kernel log's Xids.
func openNVMLHealth(gpus int, opts []gpu.NVMLOption, log *slog.Logger) (gpucheck.Provider, xid.Source) {
	h, err := gpu.OpenNVMLHealth(opts...)
	if err != nil {
		log.Warn("gpu health: NVML readings unavailable; only the kernel log's Xids are checked", "err", err)
		return nil, nil
	}
	if h.GPUs() != gpus {
		log.Warn("gpu health: NVML counts other GPUs than discovery kept; only the kernel log's Xids are checked",
			"nvml_gpus", h.GPUs(), "gpus", gpus)
		h.Close()
		return nil, nil
	}
	ev := h.Events()
	if ev == nil {
		log.Info("gpu health: NVML gives no Xid events here; Xids come from the kernel log alone")
	}
	return h, ev
}

// runPreflightRank is the hidden `gangway preflight-rank`: the probe an
// agent runs for a gang's preflight test (trainer.Probe).
func runPreflightRank(ctx context.Context, e *Env, args []string) int {
	return trainer.Probe(ctx, args, e.Getenv, e.Stdout, e.Stderr)
}
