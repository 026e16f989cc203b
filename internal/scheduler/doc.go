// Package scheduler decides where gangs run. It is a pure function of its
// inputs: ScheduleWith reads an immutable Snapshot (free GPUs, topology,
// running jobs, queues) and a list of pending Requests and returns a Plan
// (placements, pending reasons, preemptions, a backfill reservation); it
// does no I/O, keeps no state between calls and draws no randomness, so
// the same inputs always give the same plan. The server's controller and
// the trace simulator call the same entry points.
//
// See README.md for the pipeline, the vocabulary and measured speed.
//
// It imports the standard library and internal/topology only.
package scheduler
