// Package trainer is gangway's example training workload: a small
// data-parallel trainer that does real arithmetic (a two-layer MLP on a
// synthetic, seeded classification set, SGD with momentum) and averages
// gradients across ranks with a ring all-reduce over TCP.
//
// It is driven only by gangway's launch contract (RANK, WORLD_SIZE,
// MASTER_ADDR, MASTER_PORT, GANGWAY_NODE_ADDR, GANGWAY_CHECKPOINT_DIR,
// GANGWAY_RESUME_FROM, GANGWAY_PROGRESS_FILE, ...), so it exercises the
// same paths a PyTorch job does: rendezvous, checkpoints committed with a
// COMMITTED marker, resume after a failure, progress lines, SIGTERM and
// SIGUSR1. The gangway binary runs it as the hidden subcommand
// `gangway train-example`; examples/train-go/main.go is a standalone main.
//
// Training is deterministic: the batch of step s is a function of the seed
// and s only, and the all-reduce adds in a fixed order for a given world
// size, so a run killed and resumed from a checkpoint ends bitwise equal to
// an uninterrupted run with the same WORLD_SIZE.
//
// The package imports only the standard library;
// it must not import other gangway packages, so that it stays a faithful
// stand-in for a user's workload.
package trainer
