// Package sim is gangway's trace-driven simulator: a discrete-event replay
// of a GPU-cluster trace (arrivals, starts, completions, preemptions with a
// checkpoint-and-restore cost, node and GPU failures and repairs) in
// virtual time, placing every gang through internal/scheduler, the same
// code the server's controller runs. Policies (FIFO, backfill, SJF, SRTF,
// Tiresias, gangway's own) only order requests and choose preemptions;
// placement is the scheduler's. The ones that read no durations are
// internal/scheduler/policy's, the controller's own code. See README.md
// for the design, the trace formats and the validation against published
// runs.
//
// The studies built on it (parity with published runs, FGD's openb
// allocation experiment, goodput under failures, charts) live in
// internal/sim/experiments.
//
// Its summary's usage section accounts for GPU time as `gangway report
// usage` does for a live cluster (internal/goodput's attribution, with the
// causes of internal/api), so a replay and the live accounting compare.
//
// It imports the standard library, internal/scheduler,
// internal/scheduler/policy (the policies the controller runs) and
// internal/topology (only in schedule.go), internal/api (the causes),
// internal/goodput, internal/sim/trace, internal/base/stats and
// github.com/goccy/go-yaml.
package sim
