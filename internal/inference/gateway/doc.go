// Package gateway is gangway's OpenAI-compatible inference gateway: a
// reverse proxy that routes each completion request to the engine replica
// that will answer it fastest.
//
// Router is the routing core, with no I/O: it holds each replica's load as
// the gateway counts it (in-flight requests and tokens, estimated pending
// prefill) and as the engine reports it (scraped vLLM metrics), a prefix
// index of which replica recently saw which prompt blocks, and a Policy
// that picks. The HTTP Gateway and the virtual-time benchmarks drive the
// same Router, so what the benchmark measures is what production routes.
//
// Policies: round-robin, random, least-request, power-of-two-choices, the
// llm-d style weighted scorers (load, approx-prefix, precise-prefix) kept
// for comparison, and the default prefix-affinity: pick the replica with
// the lowest estimated time to first token, counting the prompt blocks it
// already caches and the prefill work queued on it, never a replica whose
// KV cache or sequence slots the request would overflow. Each replica's
// saturation point comes from its GPU, TP and quantization through
// internal/hardware's capacity and roofline model, not from hand-tuned
// thresholds.
//
// API keys (Config.Keys, keys.go, keyauth.go) are optional: with them,
// each request names a key (Authorization: Bearer, or x-api-key), is held
// to the key's models and to its requests and tokens per minute, and is
// counted in Usage and /metrics by key name. KeyFile reads them from a
// YAML or JSON file that holds the keys' SHA-256, not the keys.
//
// It imports the standard library, internal/inference/openai (wire
// parsing, error bodies, tokenizer), internal/hardware (capacity model),
// internal/inference/autoscale, internal/inference/promtext (to parse
// engines' vLLM metrics), prometheus/client_golang (its own /metrics),
// golang.org/x/time/rate (the keys' rate limits) and github.com/goccy/go-yaml
// (key files), internal/base/yamlpos (their errors' positions). It never links the engine simulator
// (TestDoesNotLinkTheSimulator).
package gateway
