package enginesim

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// API paths the engine serves.
const (
	PathCompletions     = "/v1/completions"
	PathChatCompletions = "/v1/chat/completions"
	PathModels          = "/v1/models"
	PathHealth          = "/health"
	PathMetrics         = "/metrics"
)

// PromptRequest is what the engine and the gateway need from an OpenAI
// completions or chat-completions body.
type PromptRequest struct {
	Chat         bool
	Model        string
	Text         string   // the prompt (chat: rendered with ChatPrompt); "" when TokenIDs is set
	TokenIDs     []uint32 // a completions prompt given as token ids
	MaxTokens    int      // 0 when the client left it to the server
	Stream       bool
	IncludeUsage bool // stream_options.include_usage
	IgnoreEOS    bool // vLLM's ignore_eos
}

// Tokens returns the prompt's tokens under a vocabulary of vocab.
func (p PromptRequest) Tokens(vocab int) []uint32 {
	if p.TokenIDs != nil {
		return p.TokenIDs
	}
	return Tokenize(p.Text, vocab)
}

// NumTokens is len(p.Tokens(v)) without tokenizing.
func (p PromptRequest) NumTokens() int {
	if p.TokenIDs != nil {
		return len(p.TokenIDs)
	}
	return CountTokens(p.Text)
}

type wireRequest struct {
	Model               string          `json:"model"`
	Prompt              json.RawMessage `json:"prompt"`
	Messages            []wireMessage   `json:"messages"`
	MaxTokens           *int            `json:"max_tokens"`
	MaxCompletionTokens *int            `json:"max_completion_tokens"`
	Stream              bool            `json:"stream"`
	StreamOptions       *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
	IgnoreEOS bool `json:"ignore_eos"`
	N         *int `json:"n"`
}

type wireMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

// ParsePrompt decodes a request body for path (PathCompletions or
// PathChatCompletions). Errors name the offending field.
func ParsePrompt(path string, body []byte) (PromptRequest, error) {
	var w wireRequest
	if err := json.Unmarshal(body, &w); err != nil {
		return PromptRequest{}, fmt.Errorf("request body: %w", err)
	}
	p := PromptRequest{Model: w.Model, Stream: w.Stream, IgnoreEOS: w.IgnoreEOS}
	if w.StreamOptions != nil {
		p.IncludeUsage = w.StreamOptions.IncludeUsage
	}
	if w.Model == "" {
		return p, errors.New(`field "model": required`)
	}
	if w.N != nil && *w.N != 1 {
		return p, fmt.Errorf(`field "n": %d, only 1 is supported`, *w.N)
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
		p.Text = ChatPrompt(msgs)
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
func (p *PromptRequest) setPrompt(raw json.RawMessage) error {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return errors.New("required")
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		if s == "" {
			return errors.New("empty")
		}
		p.Text = s
		return nil
	}
	var ss []string
	if err := json.Unmarshal(raw, &ss); err == nil {
		if len(ss) != 1 || ss[0] == "" {
			return fmt.Errorf("a list of %d prompts; only one non-empty prompt per request is supported", len(ss))
		}
		p.Text = ss[0]
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

func messageContent(raw json.RawMessage) (string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
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

// APIError is vLLM's error body.
type APIError struct {
	Object  string  `json:"object"`
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    int     `json:"code"`
}
