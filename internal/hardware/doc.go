// Package hardware is gangway's one catalog of accelerators and LLM
// shapes, and the formulas over them.
//
//   - GPUs (gpu.go): one canonical name each ("H100-SXM-80GB"), with the
//     aliases users type ("h100", "H100-SXM") and the product name NVML
//     reports ("NVIDIA H100 80GB HBM3"); memory as the data sheet and as
//     the driver give it, HBM bandwidth, dense FLOP/s per precision
//     (BF16/FP16, FP8, TF32, INT8), NVLink bandwidth and domain size, the
//     usual node shape. LookupGPU finds any of the names, ignoring case.
//   - Models (model.go): the shape of dense decoder-only transformers
//     (layers, hidden, heads, KV heads, head size, FFN, vocabulary, MLP
//     kind, ...) and their parameter counts.
//   - Formulas: weights and KV-cache bytes at a precision (precision.go),
//     and Config (serving.go), one engine replica, whose Capacity answers
//     "does model M fit on N×GPU, with how many KV-cache tokens" the way
//     vLLM's profiler does and whose StepTime is the roofline of one
//     engine step. The planner's `plan serve`, the engine simulator and
//     the inference gateway all ask Config; TestOneAnswer holds them to
//     one answer.
//
// The planner extends the catalog with the user's YAML (planner.Catalog);
// the agent's fake GPUs imitate the entries whose NVML name is known.
//
// It is pure: no I/O, no clock, no randomness. It imports only the
// standard library (TestImportsOnlyTheStandardLibrary).
package hardware
