// Package container runs a rank in a Docker container. The node's rank
// supervisor (internal/node/driver) starts, for such a rank, a shim (the
// hidden `gangway container-rank --spec FILE` command) as the rank's
// process: the shim creates the container through the Docker engine,
// copies its output to its own stdout and stderr (which the supervisor
// keeps, so `gangway logs -f` works unchanged), passes on the signals it
// gets (the checkpoint signal, SIGTERM), and exits with the container's
// exit code, having removed the container. Everything the exec driver
// gives a rank (re-attach after an agent restart, the lease's fence,
// bounded logs, exactly-once starts) comes with the shim being a rank.
//
// A container outlives its shim if nothing ends it, so three things do:
// the shim kills it at once when its parent, the supervisor, dies (its
// parent-death signal; the supervisor holds the ranks' lease, and bare
// ranks die with it too); the supervisor runs `gangway container-reap`
// (ReapMain) after the shim ends, however it ended (SIGKILL after the
// grace, the lease's fence), before it tells the rank's exit; and a
// supervisor that died before that runs it from its journal.
//
// A container gets host networking (or a bridge), the host's IPC
// namespace, an unlimited memlock ulimit, the rank's checkpoint, working
// and task directories bind-mounted at the same paths, the rank's
// environment, its CPU and memory limits, labels naming its job, attempt,
// rank, node and agent instance, the rank's GPUs (as an nvidia device
// request, or as CDI devices where the node has an nvidia CDI spec; none
// for fake GPUs) and /dev/infiniband when the node has it.
//
// It imports the standard library, github.com/docker/docker (the engine's
// own client), github.com/containerd/errdefs and golang.org/x/sys.
package container

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Spec is one rank's container, as the agent writes it for the shim.
type Spec struct {
	// Name is the container's name (NameFor): one container per task.
	Name       string `json:"name"`
	Image      string `json:"image"`
	PullPolicy string `json:"pullPolicy"` // api.PullIfNotPresent, PullAlways or PullNever
	Network    string `json:"network"`    // "host" or "bridge"
	// Command replaces the image's entrypoint (as a Kubernetes
	// container's command does); it is run with Env added to the
	// image's environment.
	Command    []string `json:"command"`
	Env        []string `json:"env"`
	WorkingDir string   `json:"workingDir,omitempty"`
	// Mounts are host directories bind-mounted at the same path; a
	// missing one is made first.
	Mounts []string `json:"mounts,omitempty"`
	// MemoryBytes and CPUMillis limit the container (0: none).
	MemoryBytes int64 `json:"memoryBytes,omitempty"`
	CPUMillis   int64 `json:"cpuMillis,omitempty"`
	// User is "uid:gid" to run as; "": the image's user.
	User   string            `json:"user,omitempty"`
	Labels map[string]string `json:"labels"`
	// GPUs are the UUIDs of the rank's real GPUs; empty: none passed
	// (fake GPUs, or none).
	GPUs []string `json:"gpus,omitempty"`
	// Node names the node in messages.
	Node string `json:"node"`
	// Engine is the Docker engine's address; "": $DOCKER_HOST, else its
	// default socket.
	Engine string `json:"engine,omitempty"`
	// AuthFile is a Docker client config (config.json) with the node's
	// registry credentials (RegistryAuth); "": pulls are anonymous.
	AuthFile string `json:"authFile,omitempty"`

	// dir is where the spec was read from (the task's directory): the
	// shim's PullFile goes there; "": nowhere.
	dir string
}

// Labels every container of gangway's carries.
const (
	LabelJob      = "gangway.job"
	LabelAttempt  = "gangway.attempt"
	LabelRank     = "gangway.rank"
	LabelTask     = "gangway.task"
	LabelNode     = "gangway.node"
	LabelInstance = "gangway.instance"
)

// NameFor is the container name of a task of the agent whose data
// directory has instance ID instance: unique per node (two agents on one
// machine have two instances) and per task, so that the engine itself
// refuses a second container for one rank.
func NameFor(instance, taskKey string) string {
	in := instance
	if len(in) > 12 {
		in = in[:12]
	}
	return "gangway-" + sanitize(in) + "-" + sanitize(taskKey)
}

// sanitize keeps what a container name may hold ([a-zA-Z0-9_.-]), every
// other byte as '_'.
func sanitize(s string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '_', r == '.', r == '-':
			return r
		}
		return '_'
	}, s)
}

// WriteSpec writes s as dir/container.json, for the shim, and returns
// its path.
func WriteSpec(dir string, s *Spec) (string, error) {
	b, err := json.Marshal(s)
	if err != nil {
		return "", fmt.Errorf("container spec: %w", err)
	}
	path := filepath.Join(dir, "container.json")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		return "", fmt.Errorf("container spec: %w", err)
	}
	return path, nil
}

func readSpec(path string) (*Spec, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var s Spec
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if s.Name == "" || s.Image == "" || len(s.Command) == 0 {
		return nil, fmt.Errorf("%s: needs a name, an image and a command", path)
	}
	s.dir = filepath.Dir(path)
	return &s, nil
}
