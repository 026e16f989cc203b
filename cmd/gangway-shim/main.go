// Command gangway-shim is the task shim alone: a small binary the agent runs
// in front of every rank, so that starting a rank does not pay for
// initialising the whole gangway program (etcd, gRPC, protobuf registries).
package main

import (
	"os"

	"github.com/gangway/gangway/internal/agent/cgroup"
	"github.com/gangway/gangway/internal/agent/driver"
)

func main() {
	args := os.Args[1:]
	if len(args) > 0 && args[0] == "task-shim" {
		args = args[1:]
	}
	os.Exit(driver.ShimMain(args, os.Stderr, func(name string, pid int, mem, cpu int64) (string, error) {
		m, err := cgroup.Detect("/sys/fs/cgroup")
		if err != nil {
			return "", err
		}
		return m.Apply(name, pid, cgroup.Limits{MemoryBytes: mem, CPUMillis: cpu})
	}))
}
