// Package enginesim is a stand-in for a vLLM server on machines without
// GPUs, faithful enough to judge routing and autoscaling.
//
// It has three layers:
//
//   - A capacity and roofline model (hardware.Config, Capacity, StepTime,
//     in internal/hardware, shared with the gateway and the planner):
//     weights and KV-cache memory from GPU memory × utilization, and the
//     time of one engine step from compute (prefill) and HBM traffic
//     (decode), divided by tensor parallelism, plus all-reduce and fixed
//     overheads.
//   - Engine: a step-level model of vLLM's V1 scheduler with continuous
//     batching, chunked prefill under a per-step token budget, a paged KV
//     cache of 16-token blocks, automatic prefix caching (hash-chained
//     blocks, LRU eviction of unreferenced blocks) and preemption by
//     recompute. It does no I/O and reads no clock: the caller passes the
//     time, so it runs in virtual time (benchmarks, a discrete-event loop)
//     or real time (Server).
//   - Server: vLLM's OpenAI-compatible HTTP API (/v1/completions,
//     /v1/chat/completions with SSE streaming, /v1/models, /health) and
//     /metrics with vLLM's metric names, over the wire format of
//     internal/inference/openai.
//
// Prompts are text; openai.Tokenize maps them to tokens deterministically
// (one token per 4 bytes) so that shared text prefixes become shared KV
// blocks.
//
// It imports the standard library, internal/hardware,
// internal/inference/openai and internal/inference/promtext.
package enginesim
