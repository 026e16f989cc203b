package openai

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"strings"
)

// Model is one entry of /v1/models, as vLLM lists it.
type Model struct {
	ID          string `json:"id"`
	Object      string `json:"object"`
	Created     int64  `json:"created"`
	OwnedBy     string `json:"owned_by"`
	Root        string `json:"root,omitempty"`
	MaxModelLen int    `json:"max_model_len,omitempty"`
}

// ModelList is the body of /v1/models.
type ModelList struct {
	Object string  `json:"object"`
	Data   []Model `json:"data"`
}

// GenerationPath reports whether path is one whose prompt ParsePrompt
// reads (completions, chat completions).
func GenerationPath(path string) bool {
	return path == PathCompletions || path == PathChatCompletions
}

// ParseModel reads the model (and stream) of any other request a vLLM
// replica serves: a JSON body (embeddings, responses, score, rerank,
// tokenize, pooling) or a multipart form (audio transcriptions and
// translations). The prompt is not read: such requests are routed by
// model and load, not by prefix. Errors name the field.
func ParseModel(contentType string, body []byte) (PromptRequest, error) {
	p := PromptRequest{N: 1}
	mt, params, _ := mime.ParseMediaType(contentType)
	if mt == "multipart/form-data" {
		m, err := multipartField(body, params["boundary"], "model")
		if err != nil {
			return p, fmt.Errorf("request form: %w", err)
		}
		p.Model = m
	} else {
		var w struct {
			Model  *string `json:"model"`
			Stream bool    `json:"stream"`
		}
		if err := json.Unmarshal(body, &w); err != nil {
			return p, fmt.Errorf("request body: %w", err)
		}
		if w.Model != nil {
			p.Model = *w.Model
		}
		p.Stream = w.Stream
	}
	if p.Model == "" {
		return p, errors.New(`field "model": required`)
	}
	return p, nil
}

// multipartField is the value of the form field name, read from body
// without keeping the other parts (an audio file, say).
func multipartField(body []byte, boundary, name string) (string, error) {
	if boundary == "" {
		return "", errors.New("multipart content type without a boundary")
	}
	r := multipart.NewReader(bytes.NewReader(body), boundary)
	for {
		part, err := r.NextPart()
		if err == io.EOF {
			return "", nil
		}
		if err != nil {
			return "", err
		}
		if part.FormName() == name {
			v, err := io.ReadAll(io.LimitReader(part, 4096))
			if err != nil {
				return "", err
			}
			return strings.TrimSpace(string(v)), nil
		}
	}
}
