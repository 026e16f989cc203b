// Package policy holds gangway's queue policies: which pending job goes
// first, at what priority it reaches the scheduler, and when a running job
// is protected from preemption. A policy knows no job durations; it reads
// only what the controller can compute from a job's status (Job: submit
// time, when its wait began, the GPU-seconds it has attained, its GPUs)
// and the time now. Where gangs run is the scheduler's decision.
//
// The server's controller and the trace simulator (its non-oracle
// policies, and `gangway simulate --policy live`) call the same
// functions, so a replay of a trace answers with what the cluster runs.
//
// A policy is chosen by name (New, Names); each lives in a file of its
// own and registers itself in an init function (Register). To add one,
// write a type that implements Policy, register it, and list it in
// docs/simulation.md. A queue may tune its policy (Settings: the lane's
// share, the overdue bound, the first level, the minimum run); ForQueue
// builds a queue's policy from its spec, for the controller and the
// simulator alike, and a policy with settings implements Tunable.
//
// It imports the standard library, internal/scheduler (the scheduler's
// Mode) and internal/api (queue specs).
package policy
