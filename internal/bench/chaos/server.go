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
// is appended to Log.
type ServerProc struct {
	bin, dataDir, log string
	// listen is the API's address; etcdClient and etcdPeer the embedded
	// etcd's, fixed so that every start has the same member.
	listen, etcdClient, etcdPeer string
	nodeTimeout                  time.Duration

	p     *proc
	api   *client.Client
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
	return &ServerProc{bin: bin, dataDir: dataDir, log: logPath, listen: ports[0], etcdClient: ports[1], etcdPeer: ports[2], nodeTimeout: nodeTimeout}, nil
}

// Start starts the server and waits (at most a minute) until it answers.
// The first start writes the admin's client config, DataDir/admin.conf;
// Client and Admin are set from then on.
func (s *ServerProc) Start(ctx context.Context) error {
	cmd := exec.Command(s.bin, "server", "--data-dir", s.dataDir, "--listen", s.listen,
		"--etcd-client-addr", s.etcdClient, "--etcd-peer-addr", s.etcdPeer,
		"--node-timeout", s.nodeTimeout.String(), "--client-config", "")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	p, err := startProc(cmd, s.log)
	if err != nil {
		return err
	}
	s.p = p
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	return wait.Until(ctx, 100*time.Millisecond, func() (bool, error) {
		if p.exited() {
			return false, fmt.Errorf("server exited: %v (log %s)", p.err, s.log)
		}
		if s.api == nil {
			cfg, err := client.ConfigFor(filepath.Join(s.dataDir, "admin.conf"), client.Resolve{})
			if err != nil || cfg.Token == "" {
				return false, nil
			}
			// Fail fast while the server is down: callers poll.
			cfg.Timeout, cfg.Retries = 5*time.Second, -1
			if s.api, err = client.New(cfg); err != nil {
				return false, err
			}
			s.admin = cfg
		}
		_, err := s.api.Health(ctx)
		return err == nil, nil
	})
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

// Client is the admin's API client, set once the first start answered. It
// keeps working across restarts: the address, the CA and the token stay.
func (s *ServerProc) Client() *client.Client { return s.api }

// Admin is the admin's client configuration (server URL, token, CA file).
func (s *ServerProc) Admin() client.Config { return s.admin }
