// Package health runs a node's health checks and keeps their latest
// results for the agent's heartbeats.
//
// A [Check] looks at one thing (Xids, ECC, temperature, NVLink, PCIe,
// InfiniBand, disk, memory, clock) and returns its findings as
// api.HealthCheck values, at most one per GPU and one for the node. The
// checks live one to a package below this one, as gpud lays out its
// components; [DefaultChecks] builds the usual set from [NodeOptions].
//
// A [Runner] calls every check each interval, each in its own goroutine
// with a deadline, so that a check that hangs (NVML stuck on a GPU that
// fell off the bus, a dead mount) or panics is reported as Status error
// without stopping the others. It keeps each finding's Since while its
// status, action and code stay the same, and signals on [Runner.Changed]
// when they change, so that the agent can send a heartbeat at once.
//
// [Fake] stands in for NVML and the kernel log on machines without GPUs:
// it reports healthy H100s until a fault is injected through a file or
// [Fake.Inject].
//
// The agent's use:
//
//	checks, xc, err := health.DefaultChecks(opts)
//	r := health.NewRunner(checks, health.Options{Logger: log})
//	go r.Run(ctx) // and wait for it on the way out
//	... heartbeat.Health = r.Results() after <-r.Changed() ...
//	xc.Clear(gpu) // after the GPU was reset or returned to service
//
// It imports internal/api and the check packages
// internal/node/health/xid, internal/node/health/gpucheck,
// internal/node/health/ib and internal/node/health/nodecheck.
package health

import (
	"context"

	"github.com/gangway/gangway/internal/api"
)

// Check is one health check.
//
// Name names the check's findings ("xid", "ecc", ...); it is constant.
// Run looks once and returns the findings: at most one per GPU (GPU the
// index) and one for the node (GPU -1), an "ok" one included where the
// check has nothing to report. Run blocks while it looks and must return
// soon after ctx ends; the Runner never runs one check twice at once.
// The Runner fills in Check, At and (unless the check set it) Since.
type Check interface {
	Name() string
	Run(ctx context.Context) []api.HealthCheck
}
