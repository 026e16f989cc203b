// Package e2e holds gangway's multi-host tests: a real server in the root
// network namespace and real agents, each in a network namespace of its own
// behind a virtual switch, running real training jobs (the example Go
// trainer and the PyTorch DDP example) while a test kills a host outright or
// unplugs its cable, and asserts what DESIGN.md's failure model promises:
// the node is found lost, the gang restarts elsewhere from its newest
// checkpoint, no rank of the old attempt is alive when the new one starts,
// and the job finishes.
//
// The tests need root and iproute2's `ip`, and skip with a message without
// them (and under -short); the PyTorch test also needs Debian's
// python3-torch. TestMain builds the gangway binary once (or uses the one
// GANGWAY_E2E_BIN names); every process under test is that binary, started
// the way an operator would, and on failure the test prints the server's,
// the agents' and every rank's logs. Run them with
//
//	sudo go test -race -v ./internal/e2e/
//
// TestChaosShort runs the chaos harness (`gangway chaos`) for a minute: five
// faults of as many kinds against a mix of jobs, judged from the ranks' own
// records. TestChaosReplicatedShort does the same against three server
// replicas, each with an embedded etcd member (the leader killed, a
// follower's etcd member killed and a rolling restart among its faults),
// with an inference deployment serving requests through the replicas'
// gateways.
//
// Agents run under `ip netns exec`, which mounts a fresh /sys: they see no
// cgroup hierarchy there, so per-rank limits are not exercised here.
//
// The package has no code but this doc; the tests build their networks
// with internal/bench/netns, and nothing imports the package.
//
// It imports only the standard library (its tests use the rest of gangway,
// bench/netns among it, and go.uber.org/goleak).
package e2e
