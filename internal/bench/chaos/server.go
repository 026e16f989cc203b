package chaos

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/gangway/gangway/internal/api/client"
	"github.com/gangway/gangway/internal/base/wait"
)

// ServerProc is `gangway server` as a child process that can be killed and
// started again on the same data directory, API address and etcd
// addresses, as an operator restarting the control plane would. Its output
// is appended to Log. It is one server alone (NewServerProc) or one of
// several replicas (Replicas).
type ServerProc struct {
	// name is the replica's etcd member name; "server" when alone.
	name              string
	bin, dataDir, log string
	// listen is the API's address; etcdClient and etcdPeer the embedded
	// etcd's, fixed so that every start has the same member.
	listen, etcdClient, etcdPeer string
	nodeTimeout                  time.Duration
	// extra are further flags: the replicas' member list and shared CA,
	// the gateway's listener, the log level.
	extra []string

	p   *proc
	api *client.Client // this server alone
	// admin is the admin's client configuration; alone, read from the
	// first start's DataDir/admin.conf; among replicas, set by Replicas.
	admin client.Config
}

// NewServerProc picks free ports (the API's on host) for a server with
// data directory dataDir, its output appended to logPath. It starts
// nothing.
func NewServerProc(bin, dataDir, logPath, host string, nodeTimeout time.Duration) (*ServerProc, error) {
	ports, err := FreePorts(host, "127.0.0.1", "127.0.0.1")
	if err != nil {
		return nil, err
	}
	return &ServerProc{name: "server", bin: bin, dataDir: dataDir, log: logPath, listen: ports[0], etcdClient: ports[1], etcdPeer: ports[2], nodeTimeout: nodeTimeout}, nil
}

// Start starts the server and waits (at most a minute) until it answers.
// A server alone's first start writes the admin's client config,
// DataDir/admin.conf; Client and Admin are set from then on.
func (s *ServerProc) Start(ctx context.Context) error {
	if err := s.spawn(); err != nil {
		return err
	}
	return s.ready(ctx)
}

// spawn starts the process and returns.
func (s *ServerProc) spawn() error {
	args := append([]string{"server", "--data-dir", s.dataDir, "--listen", s.listen,
		"--etcd-client-addr", s.etcdClient, "--etcd-peer-addr", s.etcdPeer,
		"--node-timeout", s.nodeTimeout.String(), "--client-config", ""}, s.extra...)
	cmd := exec.Command(s.bin, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	p, err := startProc(cmd, s.log)
	if err != nil {
		return err
	}
	s.p = p
	return nil
}

// ready waits, at most a minute, until the process answers; a server
// alone reads the admin's config from its data directory first.
func (s *ServerProc) ready(ctx context.Context) error {
	p := s.p
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	return wait.Until(ctx, 100*time.Millisecond, func() (bool, error) {
		if p.exited() {
			return false, fmt.Errorf("server %s exited: %v (log %s)", s.name, p.err, s.log)
		}
		if s.api == nil {
			cfg, err := client.ConfigFor(filepath.Join(s.dataDir, "admin.conf"), client.Resolve{})
			if err != nil || cfg.Token == "" {
				return false, nil
			}
			if err := s.useAdmin(cfg); err != nil {
				return false, err
			}
		}
		_, err := s.api.Health(ctx)
		return err == nil, nil
	})
}

// useAdmin sets the admin's configuration and, from it, this server's own
// client.
func (s *ServerProc) useAdmin(cfg client.Config) error {
	s.admin = cfg
	own := cfg
	own.Server = "https://" + s.listen
	// Fail fast while the server is down: callers poll.
	own.Timeout, own.Retries = 5*time.Second, -1
	api, err := client.New(own)
	if err != nil {
		return err
	}
	s.api = api
	return nil
}

// Kill sends SIGKILL and waits for the process to end.
func (s *ServerProc) Kill() {
	if s.p != nil {
		s.p.kill()
	}
}

// Stop sends SIGTERM, waits up to grace, then kills.
func (s *ServerProc) Stop(grace time.Duration) {
	if s.p != nil && !s.p.exited() {
		s.p.stop(syscall.SIGTERM, grace)
	}
}

// Running reports whether the process started and has not exited.
func (s *ServerProc) Running() bool { return s.p != nil && !s.p.exited() }

// PID is the running process's pid.
func (s *ServerProc) PID() int { return s.p.pid() }

// Name is the server's etcd member name ("server" when alone).
func (s *ServerProc) Name() string { return s.name }

// URL is the server's API base URL.
func (s *ServerProc) URL() string { return "https://" + s.listen }

// Log is the file the server's output is appended to.
func (s *ServerProc) Log() string { return s.log }

// Client is the admin's API client of this server alone, set once the
// first start answered. It keeps working across restarts: the address,
// the CA and the token stay.
func (s *ServerProc) Client() *client.Client { return s.api }

// Admin is the admin's client configuration (server URL, token, CA file).
func (s *ServerProc) Admin() client.Config { return s.admin }
