package openai

import "unicode/utf8"

// Server-sent events, as OpenAI and vLLM stream an answer: one event per
// chunk, "data: " then a Chunk's JSON then a blank line, and a last
// event whose data is [DONE].
const (
	// EventStreamContentType is the Content-Type of a streamed answer.
	EventStreamContentType = "text/event-stream; charset=utf-8"
	// EventPrefix starts every event; counting it counts the events.
	EventPrefix = "data: "
	// EventEnd ends every event.
	EventEnd = "\n\n"
	// DoneEvent is the stream's last event.
	DoneEvent = EventPrefix + "[DONE]" + EventEnd
)

// AppendEvent appends the event carrying data (one JSON value) to dst.
func AppendEvent(dst, data []byte) []byte {
	dst = append(dst, EventPrefix...)
	dst = append(dst, data...)
	return append(dst, EventEnd...)
}

// AppendJSONString appends s as encoding/json.Marshal writes a string:
// HTML-safe escapes, \ufffd for invalid UTF-8, U+2028 and U+2029
// escaped.
func AppendJSONString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hex[r&0xf])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
