// Package openai is the OpenAI wire format as gangway's inference tier
// speaks it (vLLM's dialect):
//
//   - requests: the API paths and the completions and chat-completions
//     bodies, parsed by one validating scan with encoding/json as the
//     reference (ParsePromptInto, FuzzParsePromptAgrees);
//   - answers: Chunk with its completion and chat choices, usage, vLLM's
//     response ids and error bodies (vLLM's WriteError, and OpenAI's
//     WriteOpenAIError for authentication and rate limits);
//   - streaming: server-sent-event framing (AppendEvent, DoneEvent) and an
//     encoding/json-exact string encoder for hand-rendered events;
//   - the approximate tokenizer (one token per 4 bytes, chained block
//     hashes, the simulated model's output tokens) on which the gateway's
//     prefix index and the engine simulator agree.
//
// It does no I/O of its own beyond writing a response to the
// http.ResponseWriter it is handed.
//
// It imports only the standard library.
package openai
