package enginesim

import (
	"strconv"

	"github.com/gangway/gangway/internal/inference/openai"
)

// sseAnswer renders a whole streamed answer at once, byte for byte what
// responder writes event by event through encoding/json
// (TestSSEAnswerMatchesResponder), without reflection or a buffer per
// event: TimeZero's hot path.
type sseAnswer struct {
	chat    bool
	model   string
	created int64
	id      uint64
}

// appendAll appends every event of an answer of n tokens for seed, the
// usage event when asked, and [DONE].
func (a sseAnswer) appendAll(b []byte, seed uint64, n int, reason string, usage bool, promptTokens int) []byte {
	if a.chat {
		b = a.appendHead(b)
		b = append(b, `[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}`...)
		b = append(b, "\n\n"...)
	}
	for i := range n {
		b = a.appendHead(b)
		text := openai.TokenText(openai.GeneratedToken(seed, i))
		if a.chat {
			b = append(b, `[{"index":0,"delta":{"content":`...)
			b = openai.AppendJSONString(b, text)
			b = append(b, `},"logprobs":null,"finish_reason":`...)
		} else {
			b = append(b, `[{"index":0,"text":`...)
			b = openai.AppendJSONString(b, text)
			b = append(b, `,"logprobs":null,"finish_reason":`...)
		}
		if i == n-1 {
			b = openai.AppendJSONString(b, reason)
		} else {
			b = append(b, "null"...)
		}
		if !a.chat {
			b = append(b, `,"stop_reason":null`...)
		}
		b = append(b, "}]}\n\n"...)
	}
	if usage {
		b = a.appendHead(b)
		b = append(b, `[],"usage":{"prompt_tokens":`...)
		b = strconv.AppendInt(b, int64(promptTokens), 10)
		b = append(b, `,"completion_tokens":`...)
		b = strconv.AppendInt(b, int64(n), 10)
		b = append(b, `,"total_tokens":`...)
		b = strconv.AppendInt(b, int64(promptTokens+n), 10)
		b = append(b, "}}\n\n"...)
	}
	return append(b, openai.DoneEvent...)
}

// appendHead appends an event up to its choices' value.
func (a sseAnswer) appendHead(b []byte) []byte {
	b = append(b, openai.EventPrefix...)
	b = append(b, `{"id":"`...)
	if a.chat {
		b = append(b, "chatcmpl-"...)
	} else {
		b = append(b, "cmpl-"...)
	}
	b = openai.AppendHex16(b, a.id)
	if a.chat {
		b = append(b, `","object":"chat.completion.chunk","created":`...)
	} else {
		b = append(b, `","object":"text_completion","created":`...)
	}
	b = strconv.AppendInt(b, a.created, 10)
	b = append(b, `,"model":`...)
	b = openai.AppendJSONString(b, a.model)
	return append(b, `,"choices":`...)
}
