// Package chaos is gangway's fault-injection harness, the one `gangway
// chaos` runs: gangway's control plane as child processes (one `gangway
// server`, or three or five replicas each with an embedded etcd member of
// one cluster: Replicas) and K agents with fake GPUs, each in a network
// namespace host of its own (bench/netns), a mix of jobs (the example Go
// trainer with checkpoints, gangs of several sizes, arrays of short tasks,
// and a burst of submissions in flight as the control plane is hit,
// retried when unanswered), optionally an inference deployment of the
// engine simulator that a client sends requests to through the replicas'
// gateways all along (infer.go), and faults drawn from a seed: agent kill
// -9 (its rank supervisor left alive), agent and supervisor kill -9, host
// partition, frozen agent; with one server, server kill -9 with a restart
// on the same data directory 2–30 s later, and server graceful restart;
// with replicas, the leader's kill -9 (the time to a new leader measured),
// a follower's kill -9 (its etcd member with it), a majority's kill -9
// (quorum lost for a few seconds), and a rolling restart.
//
// Every rank runs under `gangway chaos-rank` (RankMain), which appends its
// own start and exit records to a log the whole cluster shares; a rank
// killed too hard to write its exit is seen going by the harness, which
// polls /proc (watch.go). Check judges a run from those records, not from
// the server's view: no acknowledged job lost, none duplicated, no two
// attempts of a job alive at once, no rank of an attempt started twice,
// every job completed, and every resumed trainer's final loss equal to an
// uninterrupted reference run's; and no inference request failed within
// its budget. Detection (fault → node marked lost) and recovery (fault →
// the interrupted gang's next attempt running) are measured from the
// server's API (timing.go), failover (leader killed → another leads and
// the store takes a write) as the leader-kill is injected (faults.go).
//
// The files: record.go (the records and the rank wrapper), check.go (the
// invariants), plan.go (fault kinds and the seeded plan), server.go (the
// server as a restartable child process, which the server-restart demo
// uses too), replicas.go (one server, or three or five replicas each with
// an embedded etcd member of one cluster, which the leader-failover demo
// uses too), cluster.go (them and the agents), faults.go (injecting and
// healing), workload.go (the jobs), infer.go (the deployment and its
// client),
// watch.go (processes and nodes), timing.go, run.go (Run, Result) and
// main.go (the command line).
//
// It imports the standard library, golang.org/x/sys/unix, api, api/client,
// base/cmdkit, base/pki (the replicas' shared CA), base/stats, base/wait,
// bench/netns and node/driver (its
// KillAll tears the nodes' ranks down).
package chaos
