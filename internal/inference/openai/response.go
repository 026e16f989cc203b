package openai

import (
	"encoding/json"
	"net/http"
	"strconv"
)

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
