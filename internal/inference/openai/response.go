package openai

import (
	"encoding/json"
	"net/http"
	"strconv"
)

// WriteJSON writes v as a JSON body with status code and its length.
func WriteJSON(w http.ResponseWriter, code int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(code)
	w.Write(b)
}

// WriteError writes vLLM's JSON error body.
func WriteError(w http.ResponseWriter, code int, msg string) {
	typ := "BadRequestError"
	switch code {
	case http.StatusNotFound:
		typ = "NotFoundError"
	case http.StatusTooManyRequests:
		typ = "RateLimitError"
	case http.StatusServiceUnavailable, http.StatusBadGateway:
		typ = "ServiceUnavailableError"
	case http.StatusInternalServerError:
		typ = "InternalServerError"
	}
	WriteJSON(w, code, APIError{Object: "error", Message: msg, Type: typ, Code: code})
}

// ResponseID is vLLM's id for answer number n.
func ResponseID(chat bool, n uint64) string {
	b := make([]byte, 0, 25)
	if chat {
		b = append(b, "chatcmpl-"...)
	} else {
		b = append(b, "cmpl-"...)
	}
	return string(AppendHex16(b, n))
}

// AppendHex16 appends n as 16 lower-case hex digits, as response ids
// carry it.
func AppendHex16(b []byte, n uint64) []byte {
	const digits = "0123456789abcdef"
	for shift := 60; shift >= 0; shift -= 4 {
		b = append(b, digits[n>>uint(shift)&0xf])
	}
	return b
}

// CompletionChoice is one choice of a completions answer or chunk.
type CompletionChoice struct {
	Index        int     `json:"index"`
	Text         string  `json:"text"`
	Logprobs     *string `json:"logprobs"`
	FinishReason *string `json:"finish_reason"`
	StopReason   *string `json:"stop_reason"`
}

// ChatDelta is a chat message, whole (ChatChoice.Message) or a streamed
// piece of one (ChatChoice.Delta).
type ChatDelta struct {
	Role    string `json:"role,omitempty"`
	Content string `json:"content"`
}

// ChatChoice is one choice of a chat-completions answer or chunk.
type ChatChoice struct {
	Index        int        `json:"index"`
	Delta        *ChatDelta `json:"delta,omitempty"`
	Message      *ChatDelta `json:"message,omitempty"`
	Logprobs     *string    `json:"logprobs"`
	FinishReason *string    `json:"finish_reason"`
}

// Chunk is an answer (object "text_completion" or "chat.completion") or,
// streamed, one event of it ("text_completion" or
// "chat.completion.chunk"). Choices holds []CompletionChoice or
// []ChatChoice.
type Chunk struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	Model   string `json:"model"`
	Choices any    `json:"choices"`
	Usage   *Usage `json:"usage,omitempty"`
}

// ErrorBody is OpenAI's own error body, {"error": {...}}, which the
// gateway sends for the refusals that OpenAI's clients act on by code:
// invalid_api_key (401), model_not_found (404) and rate_limit_exceeded
// (429). Engines' errors keep vLLM's flat APIError.
type ErrorBody struct {
	Error ErrorDetail `json:"error"`
}

// ErrorDetail is the inside of an ErrorBody. Param is null in every body
// gangway writes; Type is OpenAI's ("invalid_request_error", or
// "requests" and "tokens" for the two rate limits).
type ErrorDetail struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    string  `json:"code"`
}

// WriteOpenAIError writes OpenAI's error body with status code, error
// type typ and error code errCode.
func WriteOpenAIError(w http.ResponseWriter, code int, typ, errCode, msg string) {
	WriteJSON(w, code, ErrorBody{Error: ErrorDetail{Message: msg, Type: typ, Code: errCode}})
}
