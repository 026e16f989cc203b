// Package planner answers "how should this model be split over these GPUs?"
// before a job starts: it models per-GPU memory (weights, gradients,
// optimizer states, activations, KV cache), FLOPs, communication and the
// pipeline bubble of a dense decoder-only transformer, predicts step time,
// tokens/s per GPU and MFU for a tensor/pipeline/data-parallel layout, and
// searches the layouts for the best few.
//
// The model is analytic (see README.md for the equations and their
// sources). What the equations cannot know, how close a software stack
// (Megatron-LM, DeepSpeed, PyTorch FSDP) gets to the hardware, is a named
// Stack parameter fitted only on the development vectors (Fit) and printed
// with every prediction.
//
// The package is pure: no I/O beyond the io.Reader handed to the catalog and
// vector parsers, no clock, no randomness. Its GPUs, models and
// precisions are internal/hardware's (type aliases), and Serve is a
// front-end over hardware's replica memory model. It imports the standard
// library, github.com/goccy/go-yaml, internal/base/yamlpos (its errors'
// positions) and internal/hardware.
package planner
