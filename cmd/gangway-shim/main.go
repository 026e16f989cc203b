// Command gangway-shim is the node's rank supervisor alone: a small binary
// (the driver and cgroup packages only) that the agent runs once per node
// as `gangway-shim supervise`, and that runs `gangway-shim cg-exec` in
// front of ranks with resource limits, so neither pays for initialising
// the whole gangway program (etcd, gRPC, protobuf registries).
// $GANGWAY_CPUPROFILE works as for gangway.
package main

import (
	"fmt"
	"os"

	"github.com/gangway/gangway/internal/base/cpuprof"
	"github.com/gangway/gangway/internal/node/cgroup"
	"github.com/gangway/gangway/internal/node/driver"
)

func main() {
	args := os.Args[1:]
	if len(args) == 0 {
		fmt.Fprintln(os.Stderr, "usage: gangway-shim supervise --dir DIR | cg-exec [flags] -- CMD...")
		os.Exit(2)
	}
	switch args[0] {
	case "supervise":
		stop := cpuprof.Start(os.Getenv("GANGWAY_CPUPROFILE"), "supervise", os.Stderr)
		code := driver.SuperviseMain(args[1:], os.Stderr)
		stop()
		os.Exit(code)
	case "cg-exec":
		os.Exit(driver.CgExecMain(args[1:], os.Stderr, cgroup.ApplyLimits))
	}
	fmt.Fprintf(os.Stderr, "gangway-shim: unknown command %q\n", args[0])
	os.Exit(2)
}
