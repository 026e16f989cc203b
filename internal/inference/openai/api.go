package openai

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"unicode/utf8"
)

// API paths the engine serves.
const (
	PathCompletions     = "/v1/completions"
	PathChatCompletions = "/v1/chat/completions"
	PathModels          = "/v1/models"
	PathEmbeddings      = "/v1/embeddings"
	PathResponses       = "/v1/responses"
	PathTokenize        = "/tokenize" // vLLM's, outside /v1
	PathHealth          = "/health"
	PathMetrics         = "/metrics"
)

// ReadBody reads a request body of at most limit bytes, sized from its
// Content-Length when known.
func ReadBody(r io.Reader, contentLength, limit int64) ([]byte, error) {
	return ReadBodyInto(nil, r, contentLength, limit)
}

// ReadBodyInto is ReadBody reading into dst's backing array when it is
// large enough (dst's contents are overwritten), so that a caller can
// reuse one buffer across requests.
func ReadBodyInto(dst []byte, r io.Reader, contentLength, limit int64) ([]byte, error) {
	if contentLength > 0 && contentLength <= limit {
		b := slices.Grow(dst[:0], int(contentLength))[:contentLength]
		if _, err := io.ReadFull(r, b); err != nil {
			return nil, err
		}
		return b, nil
	}
	b := dst[:0]
	for {
		if len(b) == cap(b) {
			b = slices.Grow(b, max(512, len(b)))
		}
		n, err := r.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if int64(len(b)) > limit {
			return nil, fmt.Errorf("body over %d bytes", limit)
		}
		if err == io.EOF {
			return b, nil
		}
		if err != nil {
			return nil, err
		}
	}
}

// PromptRequest is what the engine and the gateway need from an OpenAI
// completions or chat-completions body.
type PromptRequest struct {
	Chat  bool
	Model string
	// Prompt is the prompt's text (chat: rendered with ChatPrompt); nil
	// when TokenIDs is set. It may alias the body it was parsed from, or
	// the scratch buffer given to ParsePromptInto.
	Prompt       []byte
	TokenIDs     []uint32 // a completions prompt given as token ids
	MaxTokens    int      // 0 when the client left it to the server
	Stream       bool
	IncludeUsage bool // stream_options.include_usage
	IgnoreEOS    bool // vLLM's ignore_eos
	// N is how many choices the client asked for (n), 1 when absent.
	// vLLM generates them all; the engine simulator refuses more than one.
	N int

	rendered bool // Prompt was appended to ParsePromptInto's scratch
}

// Scratch returns Prompt's buffer emptied, for the next ParsePromptInto,
// when the prompt was rendered into the scratch buffer (or a grown copy
// of it); otherwise nil: the prompt aliases the body or was allocated.
func (p PromptRequest) Scratch() []byte {
	if !p.rendered {
		return nil
	}
	return p.Prompt[:0]
}

// Tokens returns the prompt's tokens under a vocabulary of vocab.
func (p PromptRequest) Tokens(vocab int) []uint32 {
	if p.TokenIDs != nil {
		return p.TokenIDs
	}
	return Tokenize(p.Prompt, vocab)
}

// NumTokens is len(p.Tokens(v)) without tokenizing.
func (p PromptRequest) NumTokens() int {
	if p.TokenIDs != nil {
		return len(p.TokenIDs)
	}
	return CountTokens(len(p.Prompt))
}

type wireRequest struct {
	Model               string        `json:"model"`
	Prompt              rawLiteral    `json:"prompt"`
	Messages            []wireMessage `json:"messages"`
	MaxTokens           *int          `json:"max_tokens"`
	MaxCompletionTokens *int          `json:"max_completion_tokens"`
	Stream              bool          `json:"stream"`
	StreamOptions       *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
	IgnoreEOS bool `json:"ignore_eos"`
	N         *int `json:"n"`
}

type wireMessage struct {
	Role    string     `json:"role"`
	Content rawLiteral `json:"content"`
}

// rawLiteral keeps a JSON value's bytes, already validated by the outer
// Unmarshal, so that prompts (often hundreds of KB) are scanned once
// more at most rather than validated again.
type rawLiteral []byte

func (r *rawLiteral) UnmarshalJSON(b []byte) error {
	*r = append((*r)[:0], b...) // json.Unmarshaler must not keep b
	return nil
}

// quickString decodes a JSON string literal. Strings without escapes,
// the common case for prompts, are copied without a second scan by
// encoding/json.
func quickString(b []byte) (string, bool) {
	if len(b) < 2 || b[0] != '"' || b[len(b)-1] != '"' {
		return "", false
	}
	inner := b[1 : len(b)-1]
	if bytes.IndexByte(inner, '\\') < 0 && utf8.Valid(inner) {
		return string(inner), true
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return "", false
	}
	return s, true
}

// ParsePrompt decodes a request body for path (PathCompletions or
// PathChatCompletions). Errors name the offending field. The prompt may
// alias body.
func ParsePrompt(path string, body []byte) (PromptRequest, error) {
	return ParsePromptInto(nil, path, body)
}

// ParsePromptInto is ParsePrompt that renders a prompt which cannot alias
// body (a chat conversation, a string with escapes) by appending to
// scratch[:0], so that a caller can reuse one buffer across requests.
//
// Bodies of the usual shape (an object with string prompts or messages
// of string content, integer and boolean options) are decoded by a
// single validating scan that never copies an escape-free prompt; any
// other body, and every body that is in error, is decoded by
// encoding/json, which also words the errors. Both give the same result
// (FuzzParsePromptAgrees).
func ParsePromptInto(scratch []byte, path string, body []byte) (PromptRequest, error) {
	if p, ok := scanPrompt(scratch, path, body); ok {
		return p, nil
	}
	return parsePromptJSON(path, body)
}

// parsePromptJSON is ParsePrompt by encoding/json: the reference.
func parsePromptJSON(path string, body []byte) (PromptRequest, error) {
	var w wireRequest
	if err := json.Unmarshal(body, &w); err != nil {
		return PromptRequest{}, fmt.Errorf("request body: %w", err)
	}
	p := PromptRequest{Model: w.Model, Stream: w.Stream, IgnoreEOS: w.IgnoreEOS, N: 1}
	if w.StreamOptions != nil {
		p.IncludeUsage = w.StreamOptions.IncludeUsage
	}
	if w.Model == "" {
		return p, errors.New(`field "model": required`)
	}
	if w.N != nil {
		if *w.N < 1 {
			return p, fmt.Errorf(`field "n": %d, want at least 1`, *w.N)
		}
		p.N = *w.N
	}
	mt := w.MaxTokens
	if w.MaxCompletionTokens != nil {
		mt = w.MaxCompletionTokens
	}
	if mt != nil {
		if *mt < 1 {
			return p, fmt.Errorf(`field "max_tokens": %d, want at least 1`, *mt)
		}
		p.MaxTokens = *mt
	}
	switch path {
	case PathChatCompletions:
		p.Chat = true
		if len(w.Messages) == 0 {
			return p, errors.New(`field "messages": required and non-empty`)
		}
		msgs := make([]ChatMessage, len(w.Messages))
		for i, m := range w.Messages {
			if m.Role == "" {
				return p, fmt.Errorf(`field "messages[%d].role": required`, i)
			}
			c, err := messageContent(m.Content)
			if err != nil {
				return p, fmt.Errorf(`field "messages[%d].content": %w`, i, err)
			}
			msgs[i] = ChatMessage{Role: m.Role, Content: c}
		}
		p.Prompt = []byte(ChatPrompt(msgs))
	case PathCompletions:
		if err := p.setPrompt(w.Prompt); err != nil {
			return p, fmt.Errorf(`field "prompt": %w`, err)
		}
	default:
		return p, fmt.Errorf("path %q takes no prompt", path)
	}
	return p, nil
}

// setPrompt accepts a string, a one-string list, a token-id list, or a
// one-list list of token ids.
func (p *PromptRequest) setPrompt(raw []byte) error {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return errors.New("required")
	}
	if s, ok := quickString(raw); ok {
		if s == "" {
			return errors.New("empty")
		}
		p.Prompt = []byte(s)
		return nil
	}
	var ss []string
	if err := json.Unmarshal(raw, &ss); err == nil {
		if len(ss) != 1 || ss[0] == "" {
			return fmt.Errorf("a list of %d prompts; only one non-empty prompt per request is supported", len(ss))
		}
		p.Prompt = []byte(ss[0])
		return nil
	}
	var ids []uint32
	if err := json.Unmarshal(raw, &ids); err == nil {
		if len(ids) == 0 {
			return errors.New("empty token list")
		}
		p.TokenIDs = ids
		return nil
	}
	var idss [][]uint32
	if err := json.Unmarshal(raw, &idss); err == nil && len(idss) == 1 && len(idss[0]) > 0 {
		p.TokenIDs = idss[0]
		return nil
	}
	return errors.New("want a string, a list of one string, or a list of token ids")
}

func messageContent(raw []byte) (string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return "", nil
	}
	if s, ok := quickString(raw); ok {
		return s, nil
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", errors.New("want a string or a list of content parts")
	}
	var b strings.Builder
	for i, part := range parts {
		if part.Type != "text" {
			return "", fmt.Errorf("part %d has type %q; only \"text\" is supported", i, part.Type)
		}
		b.WriteString(part.Text)
	}
	return b.String(), nil
}

// Usage is the OpenAI usage block.
type Usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}
