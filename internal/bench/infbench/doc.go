// Package infbench is the inference benchmark harness behind `gangway
// bench inference`: workloads of requests with shared prefixes, a
// virtual-time simulation of engine replicas (enginesim.Engine) behind
// the gateway's Router and the autoscaler (Simulate), the scenarios that
// compare routing policies, bursts, autoscaling and the gateway's own
// overhead over real HTTP (Run), and the report they print.
//
// It imports the standard library, internal/hardware,
// internal/inference/autoscale, internal/inference/enginesim,
// internal/inference/gateway, internal/inference/openai and
// internal/base/stats.
package infbench
