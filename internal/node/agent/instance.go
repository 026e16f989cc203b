package agent

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/gangway/gangway/internal/api/client"
	"golang.org/x/sys/unix"
)

// lockDataDir takes the data directory for this agent alone: an exclusive
// flock on DataDir/agent.lock, held until release, which the kernel drops
// when the process dies, so an agent restarted after a crash takes it at
// once. A second agent on the same directory (the second of two started
// with the defaults on one machine: the host name, and a directory named
// after it) would share the first one's rank supervisor and node; it is
// refused, naming the flags that tell them apart.
func (a *Agent) lockDataDir() (release func(), err error) {
	path := filepath.Join(a.cfg.DataDir, "agent.lock")
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CREAT|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0o644)
	if err != nil {
		return nil, fmt.Errorf("agent: --data-dir %s: lock: %w", a.cfg.DataDir, err)
	}
	if err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB); err != nil {
		holder := "another agent"
		if b, rerr := os.ReadFile(path); rerr == nil && len(strings.TrimSpace(string(b))) > 0 {
			holder += " (pid " + strings.TrimSpace(string(b)) + ")"
		}
		unix.Close(fd)
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("agent: --data-dir %s is in use by %s; a second agent on this machine needs its own --name and --data-dir", a.cfg.DataDir, holder)
		}
		return nil, fmt.Errorf("agent: --data-dir %s: lock: %w", a.cfg.DataDir, err)
	}
	_ = unix.Ftruncate(fd, 0)
	_, _ = unix.Pwrite(fd, []byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	return func() { unix.Close(fd) }, nil
}

// instanceID is the data directory's instance ID, made (random) the first
// time: the server refuses a registration of a node whose live agent has
// another, and takes one with the same at once (the agent restarted).
func (a *Agent) instanceID() (string, error) {
	path := filepath.Join(a.cfg.DataDir, "instance-id")
	if b, err := os.ReadFile(path); err == nil {
		if id := strings.TrimSpace(string(b)); id != "" {
			return id, nil
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("agent: --data-dir %s: instance ID: %w", a.cfg.DataDir, err)
	}
	var b [12]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	id := hex.EncodeToString(b[:])
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(id+"\n"), 0o644); err != nil {
		return "", fmt.Errorf("agent: --data-dir %s: instance ID: %w", a.cfg.DataDir, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return "", fmt.Errorf("agent: --data-dir %s: instance ID: %w", a.cfg.DataDir, err)
	}
	return id, nil
}

// isNameHeld reports whether the server refused a registration because
// another live agent holds the node's name.
func isNameHeld(err error) bool {
	var ae *client.APIError
	return errors.As(err, &ae) && ae.Status == http.StatusConflict
}
