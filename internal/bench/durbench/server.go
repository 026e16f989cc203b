package durbench

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/gangway/gangway/internal/api/client"
	"github.com/gangway/gangway/internal/base/wait"
)

// adminConfigFile is where a server's first start writes the admin's
// client configuration, under its data directory (server.AdminConfigFile).
const adminConfigFile = "admin.conf"

// ErrCannotRun is wrapped by Run's error when the server executable could
// not be started at all (not a gangway binary, not executable): the run
// measured nothing, which is not a finding about the server.
var ErrCannotRun = errors.New("durbench: cannot run the server")

// serverProc is one `gangway server` child process.
type serverProc struct {
	cmd  *exec.Cmd
	log  *os.File
	done chan struct{} // closed once cmd.Wait returned
}

// startServer starts `exe server` on dataDir, listening at addr, its log
// appended to logPath.
func startServer(exe, dataDir, addr, logPath string) (*serverProc, error) {
	logf, err := os.OpenFile(logPath, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("server log: %w", err)
	}
	cmd := exec.Command(exe, "server", "--data-dir", dataDir, "--listen", addr,
		"--client-config", "", "--log-level", "warn")
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("%w: %s server: %w", ErrCannotRun, exe, err)
	}
	p := &serverProc{cmd: cmd, log: logf, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(p.done) }()
	return p, nil
}

// kill sends SIGKILL, as a crash would, and waits for the process to go.
func (p *serverProc) kill() {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
	p.log.Close()
}

// stop asks the server to stop (SIGTERM), kills it after 10s, and waits.
func (p *serverProc) stop() {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
	p.log.Close()
}

// waitLeader waits until the server has written its admin configuration
// and answers /healthz as leader, and returns that configuration; serving,
// if not nil, is called at its first answer. It gives up when the process
// exits or ctx ends.
func (p *serverProc) waitLeader(ctx context.Context, dataDir string, serving func()) (client.Config, error) {
	var cfg client.Config
	var c *client.Client
	defer func() {
		if c != nil {
			c.CloseIdleConnections()
		}
	}()
	err := wait.Until(ctx, 20*time.Millisecond, func() (bool, error) {
		select {
		case <-p.done:
			return false, fmt.Errorf("the server exited: %v (its log: %s)", p.cmd.ProcessState, p.log.Name())
		default:
		}
		if c == nil {
			var err error
			if cfg, err = client.ConfigFor(filepath.Join(dataDir, adminConfigFile), client.Resolve{}); err != nil || cfg.Token == "" {
				return false, nil // not written yet, or not whole
			}
			probe := cfg
			probe.Retries, probe.Timeout = -1, 2*time.Second
			if c, err = client.New(probe); err != nil {
				return false, err
			}
		}
		h, err := c.Health(ctx)
		if err == nil && serving != nil {
			serving()
			serving = nil
		}
		return err == nil && h.Leader, nil
	})
	return cfg, err
}

// freeAddr picks a free loopback port for the API; the restarted server
// listens on the same one, where the admin configuration points.
func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("pick a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().String(), nil
}
