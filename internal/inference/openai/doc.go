// Package openai is the OpenAI wire format as gangway's inference tier
// speaks it: the API paths, the completions and chat-completions request
// bodies (parsed by one validating scan with encoding/json as the
// reference), usage and error bodies, and the approximate tokenizer
// (one token per 4 bytes, chained block hashes) on which the gateway's
// prefix index and the engine simulator agree.
//
// It does no I/O of its own beyond writing a response to the
// http.ResponseWriter it is handed.
//
// It imports only the standard library.
package openai
