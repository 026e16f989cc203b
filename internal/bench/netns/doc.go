// Package netns makes throwaway switched networks of Linux network
// namespaces: one namespace per host, each with its own address and its own
// cable into a bridge that sits in a namespace of its own, reachable from
// the root namespace through an uplink. A harness starts a process on a host
// (Command), kills everything on it (KillHost), or pulls its cable (Unplug,
// Plug) while its processes keep running. The multi-host tests
// (internal/e2e) and the chaos harness (internal/bench/chaos) build their
// clusters on it.
//
// It needs root and iproute2's `ip`.
//
// It imports only the standard library.
package netns
