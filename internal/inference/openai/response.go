package openai

import (
	"encoding/json"
	"fmt"
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

// Error codes gangway writes in ErrorDetail.Code, beside those OpenAI's
// clients act on (invalid_api_key, model_not_found, rate_limit_exceeded).
const (
	CodeInvalidValue         = "invalid_value"
	CodeUnsupportedParameter = "unsupported_parameter"
	CodeModelNotFound        = "model_not_found"
	CodeUnknownURL           = "unknown_url"
	CodeMethodNotAllowed     = "method_not_allowed"
	CodeOverloaded           = "server_overloaded"
	CodeUnavailable          = "service_unavailable"
	CodeUpstream             = "upstream_error"
	CodeInternal             = "internal_error"
)

// WriteError writes OpenAI's error body for status with the code that
// status usually carries (ErrorType and DefaultCode).
func WriteError(w http.ResponseWriter, status int, msg string) {
	WriteErrorCode(w, status, DefaultCode(status), msg)
}

// WriteErrorCode writes OpenAI's error body for status with error code
// code. Both the gateway and the engine simulator answer so, as OpenAI
// and vLLM (0.10.1 on) do: {"error": {"message", "type", "param",
// "code"}}, which OpenAI's clients read the message from.
func WriteErrorCode(w http.ResponseWriter, status int, code, msg string) {
	WriteOpenAIError(w, status, ErrorType(status), code, msg)
}

// ErrorType is OpenAI's error type for an HTTP status:
// invalid_request_error for the client's mistakes, server_error for the
// rest, a 429 for want of capacity among them (the key rate limits'
// 429s carry their own types).
func ErrorType(status int) string {
	if status >= 400 && status < 500 && status != http.StatusTooManyRequests {
		return "invalid_request_error"
	}
	return "server_error"
}

// DefaultCode is the error code for status where the caller names none.
func DefaultCode(status int) string {
	switch status {
	case http.StatusNotFound:
		return CodeUnknownURL
	case http.StatusMethodNotAllowed:
		return CodeMethodNotAllowed
	case http.StatusTooManyRequests:
		return CodeOverloaded
	case http.StatusServiceUnavailable:
		return CodeUnavailable
	case http.StatusBadGateway, http.StatusGatewayTimeout:
		return CodeUpstream
	case http.StatusInternalServerError:
		return CodeInternal
	}
	return CodeInvalidValue
}

// WriteNoRoute answers a request no route took: 405 with an Allow
// header when allow (the method the path takes) is set, else 404; both
// in OpenAI's error shape, naming the method and path.
func WriteNoRoute(w http.ResponseWriter, r *http.Request, allow string) {
	if allow != "" && allow != r.Method {
		w.Header().Set("Allow", allow)
		WriteError(w, http.StatusMethodNotAllowed, fmt.Sprintf("%s %s: method not allowed; use %s", r.Method, r.URL.Path, allow))
		return
	}
	WriteError(w, http.StatusNotFound, fmt.Sprintf("Invalid URL (%s %s)", r.Method, r.URL.Path))
}

// AppendErrorEvent appends a server-sent event carrying OpenAI's error
// body, which a stream that breaks after its first bytes ends with (as
// vLLM's does): OpenAI's clients raise it from their stream iterators.
func AppendErrorEvent(b []byte, status int, code, msg string) []byte {
	j, _ := json.Marshal(ErrorBody{Error: ErrorDetail{Message: msg, Type: ErrorType(status), Code: code}})
	b = append(b, "data: "...)
	b = append(b, j...)
	return append(b, "\n\n"...)
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

// ErrorBody is OpenAI's error body, {"error": {...}}: every error the
// gateway and the engine simulator answer.
type ErrorBody struct {
	Error ErrorDetail `json:"error"`
}

// ErrorDetail is the inside of an ErrorBody. Param is null in every body
// gangway writes; Type is OpenAI's ("invalid_request_error",
// "server_error", or "requests" and "tokens" for the two rate limits);
// Code is a string, as OpenAI's (vLLM's own is the status number).
type ErrorDetail struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    string  `json:"code"`
}

// WriteOpenAIErrorParam is WriteErrorCode naming the request field at
// fault (OpenAI's param).
func WriteOpenAIErrorParam(w http.ResponseWriter, status int, code, param, msg string) {
	WriteJSON(w, status, ErrorBody{Error: ErrorDetail{Message: msg, Type: ErrorType(status), Param: &param, Code: code}})
}

// WriteOpenAIError writes OpenAI's error body with status code, error
// type typ and error code errCode.
func WriteOpenAIError(w http.ResponseWriter, code int, typ, errCode, msg string) {
	WriteJSON(w, code, ErrorBody{Error: ErrorDetail{Message: msg, Type: typ, Code: errCode}})
}
