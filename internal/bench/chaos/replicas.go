package chaos

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gangway/gangway/internal/api/client"
	"github.com/gangway/gangway/internal/base/pki"
	"github.com/gangway/gangway/internal/base/wait"
)

// ReplicaCounts are the control planes Replicas can start: one server, or
// an etcd cluster of three or five members (an odd number, so that a
// majority survives a minority's loss).
var ReplicaCounts = []int{1, 3, 5}

// ReplicasConfig is what NewReplicas needs.
type ReplicasConfig struct {
	// Bin is the gangway executable; Dir holds the data directories
	// (server, or s1…sN), the logs (server.log, or s1.log…) and, for
	// several replicas, their shared CA (ca/).
	Bin, Dir string
	// N is 1, 3 or 5.
	N int
	// Host is where the APIs (and gateways) listen; etcd listens on
	// loopback.
	Host string
	// NodeTimeout is each server's --node-timeout.
	NodeTimeout time.Duration
	// Gateway makes each replica serve the OpenAI gateway too, on a port
	// of its own on Host, a replica that sends no headers for
	// GatewayHeaderTimeout counting as failed (0: the server's default).
	Gateway              bool
	GatewayHeaderTimeout time.Duration
	// LogLevel is each server's --log-level; "" the server's default.
	LogLevel string
}

// Replicas is gangway's control plane as child processes: one `gangway
// server` with its embedded etcd, or N replicas each with an embedded etcd
// member of one cluster, sharing one cluster CA, as DESIGN.md's "several
// replicas, no load balancer" has them. Admin lists every replica's URL,
// as agents and clients are given them. Only the goroutine that started
// it uses it.
type Replicas struct {
	members  []*ServerProc
	gateways []string // each member's gateway URL; nil without gateways
	caFile   string   // the shared CA's certificate; "" for one server
	admin    client.Config
	api      *client.Client
}

// NewReplicas picks the ports and, for several replicas, makes their CA.
// It starts nothing.
func NewReplicas(cfg ReplicasConfig) (*Replicas, error) {
	if !slices.Contains(ReplicaCounts, cfg.N) {
		return nil, fmt.Errorf("%d replicas: want 1, 3 or 5", cfg.N)
	}
	hosts := []string{cfg.Host, "127.0.0.1", "127.0.0.1"}
	if cfg.Gateway {
		hosts = append(hosts, cfg.Host)
	}
	per := len(hosts)
	ports, err := FreePorts(slices.Repeat(hosts, cfg.N)...)
	if err != nil {
		return nil, err
	}
	r := &Replicas{}
	var shared []string
	if cfg.N > 1 {
		caDir := filepath.Join(cfg.Dir, "ca")
		if _, _, err := pki.LoadOrCreateCA(caDir); err != nil {
			return nil, fmt.Errorf("the replicas' CA: %w", err)
		}
		var members []string
		for i := range cfg.N {
			members = append(members, fmt.Sprintf("s%d=https://%s", i+1, ports[i*per+2]))
		}
		shared = []string{"--initial-cluster", strings.Join(members, ","),
			"--tls-ca", filepath.Join(caDir, pki.CAFile), "--tls-ca-key", filepath.Join(caDir, pki.CAKeyFile)}
		r.caFile = filepath.Join(caDir, pki.CAFile)
	}
	for i := range cfg.N {
		p := ports[i*per : (i+1)*per]
		s := &ServerProc{name: fmt.Sprintf("s%d", i+1), bin: cfg.Bin, listen: p[0], etcdClient: p[1], etcdPeer: p[2], nodeTimeout: cfg.NodeTimeout}
		if cfg.N == 1 {
			s.name = "server"
		} else {
			s.extra = append([]string{"--etcd-name", s.name}, shared...)
		}
		s.dataDir, s.log = filepath.Join(cfg.Dir, s.name), filepath.Join(cfg.Dir, s.name+".log")
		if cfg.Gateway {
			s.extra = append(s.extra, "--gateway-listen", p[3])
			if cfg.GatewayHeaderTimeout > 0 {
				s.extra = append(s.extra, "--gateway-stream-header-timeout", cfg.GatewayHeaderTimeout.String(),
					"--gateway-header-timeout", cfg.GatewayHeaderTimeout.String())
			}
			r.gateways = append(r.gateways, "http://"+p[3])
		}
		if cfg.LogLevel != "" {
			s.extra = append(s.extra, "--log-level", cfg.LogLevel)
		}
		r.members = append(r.members, s)
	}
	return r, nil
}

// Start starts every replica and waits (at most a minute) until the
// admin's config exists (the replica that founds the cluster writes it)
// and every replica answers. On error, what started is left running: the
// caller stops it with Stop.
func (r *Replicas) Start(ctx context.Context) error {
	if len(r.members) == 1 {
		s := r.members[0]
		if err := s.Start(ctx); err != nil {
			return err
		}
		return r.useAdmin(s.admin)
	}
	for _, s := range r.members {
		if err := s.spawn(); err != nil {
			return err
		}
	}
	var admin client.Config
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := wait.Until(wctx, 100*time.Millisecond, func() (bool, error) {
		for _, s := range r.members {
			if cc, err := client.ConfigFor(filepath.Join(s.dataDir, "admin.conf"), client.Resolve{}); err == nil && cc.Token != "" {
				admin = cc
				return true, nil
			}
			if s.p.exited() {
				return false, fmt.Errorf("replica %s exited: %v (log %s)", s.name, s.p.err, s.log)
			}
		}
		return false, nil
	}); err != nil {
		return fmt.Errorf("waiting for the admin's config: %w", err)
	}
	// The founder's config names it alone; every replica's certificate
	// is of the shared CA.
	var urls []string
	for _, s := range r.members {
		urls = append(urls, s.URL())
	}
	admin.Server, admin.CAFile = strings.Join(urls, ","), r.caFile
	if err := r.useAdmin(admin); err != nil {
		return err
	}
	for _, s := range r.members {
		if err := s.useAdmin(admin); err != nil {
			return err
		}
	}
	return r.ready(ctx, r.indices())
}

func (r *Replicas) useAdmin(cfg client.Config) error {
	r.admin = cfg
	c := cfg
	// Fail fast while a replica is down: callers poll, and the next
	// request goes to the next replica.
	c.Timeout, c.Retries = 5*time.Second, -1
	api, err := client.New(c)
	if err != nil {
		return err
	}
	r.api = api
	return nil
}

func (r *Replicas) indices() []int {
	out := make([]int, len(r.members))
	for i := range out {
		out[i] = i
	}
	return out
}

// ready waits for the replicas is to answer, together: members of an etcd
// cluster that lost its quorum serve only once enough of them are back.
func (r *Replicas) ready(ctx context.Context, is []int) error {
	errs := make([]error, len(is))
	var wg sync.WaitGroup
	for k, i := range is {
		wg.Go(func() { errs[k] = r.members[i].ready(ctx) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// N is the number of replicas.
func (r *Replicas) N() int { return len(r.members) }

// Member is the i-th replica.
func (r *Replicas) Member(i int) *ServerProc { return r.members[i] }

// Client is the admin's API client of every replica: a request that
// cannot reach one is not retried, and the next goes to the next replica.
func (r *Replicas) Client() *client.Client { return r.api }

// Admin is the admin's client configuration; Server lists every
// replica's URL, separated by commas.
func (r *Replicas) Admin() client.Config { return r.admin }

// Gateways are the replicas' gateway URLs (http://), nil without.
func (r *Replicas) Gateways() []string { return r.gateways }

// Leader is the index of a running replica that answers that it leads
// (each asked within a second), or -1.
func (r *Replicas) Leader(ctx context.Context) int {
	for i, s := range r.members {
		if !s.Running() || s.api == nil {
			continue
		}
		hctx, cancel := context.WithTimeout(ctx, time.Second)
		h, err := s.api.Health(hctx)
		cancel()
		if err == nil && h.Leader {
			return i
		}
	}
	return -1
}

// Kill sends SIGKILL to the replicas is, all at once, and waits for them
// to end.
func (r *Replicas) Kill(is ...int) {
	for _, i := range is {
		if p := r.members[i].p; p != nil {
			_ = p.cmd.Process.Signal(syscall.SIGKILL)
		}
	}
	for _, i := range is {
		r.members[i].Kill()
	}
}

// Restart starts the replicas is again on their data directories and
// waits (at most a minute) until each answers.
func (r *Replicas) Restart(ctx context.Context, is ...int) error {
	for _, i := range is {
		if err := r.members[i].spawn(); err != nil {
			return err
		}
	}
	return r.ready(ctx, is)
}

// Running reports whether every replica's process is running.
func (r *Replicas) Running() bool {
	for _, s := range r.members {
		if !s.Running() {
			return false
		}
	}
	return true
}

// Exited lists the replicas whose process exited.
func (r *Replicas) Exited() []int {
	var out []int
	for i, s := range r.members {
		if s.p != nil && s.p.exited() {
			out = append(out, i)
		}
	}
	return out
}

// Names names the replicas is.
func (r *Replicas) Names(is []int) []string {
	var out []string
	for _, i := range is {
		out = append(out, r.members[i].name)
	}
	return out
}

// Stop stops every replica (SIGTERM, then SIGKILL after grace), together,
// and closes the clients' idle connections.
func (r *Replicas) Stop(grace time.Duration) {
	var wg sync.WaitGroup
	for _, s := range r.members {
		wg.Go(func() { s.Stop(grace) })
	}
	wg.Wait()
	for _, s := range r.members {
		if s.api != nil {
			s.api.CloseIdleConnections()
		}
	}
	if r.api != nil {
		r.api.CloseIdleConnections()
	}
}
