// Package e2ebench is gangway's end-to-end throughput benchmark, the one
// `gangway bench e2e` runs and bench/e2e-vs-slurm.sh sets beside Slurm: a
// real server (embedded etcd, API, controllers) in this process, real agents
// as subprocesses of the gangway executable with fake GPUs, and real rank
// processes. It submits a mix of jobs through the HTTP API, waits for every
// one to finish, and reports jobs per second and submit→start latency per
// phase, with the CPU the server and the agents spent.
//
// Latency is measured the strict way: from the moment the client sends the
// submit request to the moment the last rank's process was started
// (api.RankStatus.StartedAt). Throughput is jobs completed over the wall
// time from the first submission to the last job's FinishedAt.
//
// With Driver docker every rank runs in a Docker container of an image
// made from the gangway executable (nothing pulled).
//
// It imports the standard library, api, api/client (its one way to the
// server), base/cpuprof, base/cmdkit, base/stats, base/wait,
// controlplane/server (the server runs in this process) and
// node/container (to make the docker driver's image).
package e2ebench
