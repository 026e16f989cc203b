// Package hardware is gangway's one catalog of accelerators and LLM
// shapes, and the formulas over them: weights and KV-cache memory of a
// model served on tensor-parallel GPUs, and the roofline time of one
// engine step.
//
// It is pure: no I/O, no clock, no randomness. It imports only the
// standard library.
package hardware
