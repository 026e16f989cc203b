package openai

import (
	"encoding/binary"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// scanPrompt is ParsePrompt's fast path: one validating pass over body
// that locates the fields the engine and the gateway read and skips the
// rest. It returns ok only for a body that encoding/json accepts and
// decodes to the same PromptRequest with no error; anything else
// (malformed JSON, a field of an unexpected type, a duplicate or
// case-folded key, token-id prompts, content parts, an error of any kind)
// makes it give up, and parsePromptJSON decides. Giving up is always
// safe; claiming ok is a promise.
func scanPrompt(scratch []byte, path string, body []byte) (PromptRequest, bool) {
	p := PromptRequest{N: 1}
	switch path {
	case PathCompletions:
	case PathChatCompletions:
		p.Chat = true
	default:
		return p, false
	}
	s := scanner{b: body}
	var (
		seen                       uint16
		maxTok, maxCmp, n          int64
		hasMaxTok, hasMaxCmp, hasN bool   // present and not null
		prompt                     []byte // the raw string literal's contents
		promptEsc                  bool
		msgs                       []scannedMessage
	)
	ok := s.object(func(key []byte) bool {
		bit, known := topKeys[string(key)]
		if !known {
			return s.unknownKey(key, topKeyNames) && s.skip(0)
		}
		if seen&bit != 0 {
			return false // duplicates: encoding/json keeps the last; let it
		}
		seen |= bit
		switch bit {
		case keyModel:
			v, isNull, ok := s.stringOrNull()
			if !ok {
				return false
			}
			if !isNull {
				p.Model = v
			}
		case keyPrompt:
			if !s.peek('"') {
				return false // token ids, lists of strings, null: the reference
			}
			prompt, promptEsc = s.str()
			return prompt != nil
		case keyMessages:
			if s.null() {
				return true
			}
			var ok bool
			msgs, ok = s.messages(msgs)
			return ok
		case keyMaxTokens:
			var ok bool
			maxTok, hasMaxTok, ok = s.intOrNull()
			return ok
		case keyMaxCompletionTokens:
			var ok bool
			maxCmp, hasMaxCmp, ok = s.intOrNull()
			return ok
		case keyN:
			var ok bool
			n, hasN, ok = s.intOrNull()
			return ok
		case keyStream:
			v, ok := s.boolOrNull()
			p.Stream = v
			return ok
		case keyIgnoreEOS:
			v, ok := s.boolOrNull()
			p.IgnoreEOS = v
			return ok
		case keyStreamOptions:
			if s.null() {
				return true
			}
			var seenUsage bool
			return s.object(func(key []byte) bool {
				if string(key) != "include_usage" {
					return !strings.EqualFold(string(key), "include_usage") && s.unknownKey(key, nil) && s.skip(1)
				}
				if seenUsage {
					return false
				}
				seenUsage = true
				v, ok := s.boolOrNull()
				p.IncludeUsage = v
				return ok
			}, 1)
		}
		return true
	}, 0)
	if !ok || !s.end() {
		return p, false
	}
	// The reference's checks, in its order; any failure is its to word.
	if p.Model == "" || (hasN && (n < 1 || n > int64(maxInt))) {
		return p, false
	}
	if hasN {
		p.N = int(n)
	}
	mt, hasMT := maxTok, hasMaxTok
	if hasMaxCmp {
		mt, hasMT = maxCmp, true
	}
	if hasMT {
		if mt < 1 || mt > int64(maxInt) {
			return p, false
		}
		p.MaxTokens = int(mt)
	}
	if p.Chat {
		if len(msgs) == 0 {
			return p, false
		}
		out := scratch[:0]
		for _, m := range msgs {
			if len(m.role) == 0 {
				return p, false
			}
			out = append(out, "<|im_start|>"...)
			out = appendJSONText(out, m.role, m.roleEsc)
			out = append(out, '\n')
			out = appendJSONText(out, m.content, m.contentEsc)
			out = append(out, "<|im_end|>\n"...)
		}
		p.Prompt, p.rendered = append(out, "<|im_start|>assistant\n"...), true
		return p, true
	}
	if len(prompt) == 0 {
		return p, false // absent, or "": the reference words it
	}
	if !promptEsc && utf8.Valid(prompt) {
		p.Prompt = prompt
	} else {
		p.Prompt, p.rendered = appendJSONText(scratch[:0], prompt, promptEsc), true
		if len(p.Prompt) == 0 {
			return p, false
		}
	}
	return p, true
}

const maxInt = int(^uint(0) >> 1)

// The top-level keys the scan reads, as bits of a seen-set.
const (
	keyModel uint16 = 1 << iota
	keyPrompt
	keyMessages
	keyMaxTokens
	keyMaxCompletionTokens
	keyStream
	keyStreamOptions
	keyIgnoreEOS
	keyN
)

var topKeys = map[string]uint16{
	"model": keyModel, "prompt": keyPrompt, "messages": keyMessages, "max_tokens": keyMaxTokens,
	"max_completion_tokens": keyMaxCompletionTokens, "stream": keyStream, "stream_options": keyStreamOptions,
	"ignore_eos": keyIgnoreEOS, "n": keyN,
}

var topKeyNames = func() []string {
	var out []string
	for k := range topKeys {
		out = append(out, k)
	}
	return out
}()

var messageKeyNames = []string{"role", "content"}

// scannedMessage is one chat message as raw string-literal contents.
type scannedMessage struct {
	role, content       []byte // nil content: absent or null
	roleEsc, contentEsc bool
}

// maxScanDepth bounds nesting in skipped values; deeper bodies go to
// encoding/json (whose own limit is 10,000).
const maxScanDepth = 512

// scanner is a validating JSON reader over a byte slice. Every method
// reports failure rather than erroring: the caller gives up.
type scanner struct {
	b []byte
	i int
}

func (s *scanner) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// end reports whether only whitespace is left.
func (s *scanner) end() bool {
	s.ws()
	return s.i == len(s.b)
}

func (s *scanner) peek(c byte) bool {
	s.ws()
	return s.i < len(s.b) && s.b[s.i] == c
}

func (s *scanner) lit(word string) bool {
	if len(s.b)-s.i >= len(word) && string(s.b[s.i:s.i+len(word)]) == word {
		s.i += len(word)
		return true
	}
	return false
}

// null consumes a null if one is next.
func (s *scanner) null() bool {
	s.ws()
	return s.lit("null")
}

// object reads an object, calling field with each key (the raw contents
// of a key without escapes) positioned at its value, which field must
// consume. A key with escapes fails.
func (s *scanner) object(field func(key []byte) bool, depth int) bool {
	if depth > maxScanDepth || !s.peek('{') {
		return false
	}
	s.i++
	if s.peek('}') {
		s.i++
		return true
	}
	for {
		if !s.peek('"') {
			return false
		}
		key, esc := s.str()
		if key == nil || esc {
			return false
		}
		if !s.peek(':') {
			return false
		}
		s.i++
		if !field(key) {
			return false
		}
		if done, ok := s.sep('}'); done || !ok {
			return ok
		}
	}
}

// array reads an array, calling elem positioned at each element, which
// elem must consume.
func (s *scanner) array(elem func() bool, depth int) bool {
	if depth > maxScanDepth || !s.peek('[') {
		return false
	}
	s.i++
	if s.peek(']') {
		s.i++
		return true
	}
	for {
		if !elem() {
			return false
		}
		if done, ok := s.sep(']'); done || !ok {
			return ok
		}
	}
}

// sep consumes what follows a member: a comma (more to come) or the
// closing bracket (done).
func (s *scanner) sep(closing byte) (done, ok bool) {
	s.ws()
	if s.i >= len(s.b) {
		return false, false
	}
	switch s.b[s.i] {
	case ',':
		s.i++
		return false, true
	case closing:
		s.i++
		return true, true
	}
	return false, false
}

// unknownKey accepts a key that no field of the decoded struct can match:
// encoding/json matches keys case-insensitively (with Unicode folding),
// so an ASCII key equal to a known one but for case, or any key with
// non-ASCII bytes, is left to it.
func (s *scanner) unknownKey(key []byte, known []string) bool {
	for _, c := range key {
		if c >= utf8.RuneSelf {
			return false
		}
	}
	for _, k := range known {
		if strings.EqualFold(string(key), k) {
			return false
		}
	}
	return true
}

// messages reads an array of {"role": string, "content": string|null}
// objects, appending to dst.
func (s *scanner) messages(dst []scannedMessage) ([]scannedMessage, bool) {
	ok := s.array(func() bool {
		var m scannedMessage
		var seenRole, seenContent bool
		ok := s.object(func(key []byte) bool {
			switch string(key) {
			case "role":
				if seenRole || !s.peek('"') {
					return false
				}
				seenRole = true
				m.role, m.roleEsc = s.str()
				return m.role != nil
			case "content":
				if seenContent {
					return false
				}
				seenContent = true
				if s.null() {
					return true
				}
				if !s.peek('"') {
					return false // content parts: the reference
				}
				m.content, m.contentEsc = s.str()
				return m.content != nil
			}
			return s.unknownKey(key, messageKeyNames) && s.skip(2)
		}, 1)
		dst = append(dst, m)
		return ok
	}, 1)
	return dst, ok
}

func (s *scanner) stringOrNull() (v string, isNull, ok bool) {
	if s.null() {
		return "", true, true
	}
	if !s.peek('"') {
		return "", false, false
	}
	raw, esc := s.str()
	if raw == nil {
		return "", false, false
	}
	if !esc && utf8.Valid(raw) {
		return string(raw), false, true
	}
	return string(appendJSONText(nil, raw, esc)), false, true
}

// intOrNull reads an integer literal (what encoding/json accepts for an
// *int: no fraction, no exponent) or null (present false).
func (s *scanner) intOrNull() (v int64, present, ok bool) {
	if s.null() {
		return 0, false, true
	}
	s.ws()
	start := s.i
	if !s.number() {
		return 0, false, false
	}
	v, err := strconv.ParseInt(string(s.b[start:s.i]), 10, 64)
	return v, true, err == nil
}

func (s *scanner) boolOrNull() (bool, bool) {
	s.ws()
	switch {
	case s.lit("true"):
		return true, true
	case s.lit("false"), s.lit("null"):
		return false, true
	}
	return false, false
}

// skip consumes any JSON value, validating it.
func (s *scanner) skip(depth int) bool {
	if depth > maxScanDepth {
		return false
	}
	s.ws()
	if s.i >= len(s.b) {
		return false
	}
	switch c := s.b[s.i]; {
	case c == '{':
		return s.object(func([]byte) bool { return s.skip(depth + 1) }, depth+1)
	case c == '[':
		return s.array(func() bool { return s.skip(depth + 1) }, depth+1)
	case c == '"':
		raw, _ := s.str()
		return raw != nil
	case c == '-' || c >= '0' && c <= '9':
		return s.number()
	}
	return s.lit("true") || s.lit("false") || s.lit("null")
}

// number consumes a JSON number: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func (s *scanner) number() bool {
	s.ws()
	b, i := s.b, s.i
	if i < len(b) && b[i] == '-' {
		i++
	}
	digits := func() int {
		n := 0
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
			n++
		}
		return n
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case digits() == 0:
		return false
	}
	if i < len(b) && b[i] == '.' {
		i++
		if digits() == 0 {
			return false
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if digits() == 0 {
			return false
		}
	}
	s.i = i
	return true
}

// str consumes a string literal (positioned at its opening quote) and
// returns its raw contents (non-nil, possibly empty) and whether they
// hold an escape; nil when the literal is malformed. Escape-free runs are
// scanned eight bytes at a time.
func (s *scanner) str() (raw []byte, esc bool) {
	b := s.b
	start := s.i + 1
	i := start
	const (
		ones  = 0x0101010101010101
		highs = 0x8080808080808080
	)
	for {
		for len(b)-i >= 8 {
			x := binary.LittleEndian.Uint64(b[i:])
			q := x ^ (ones * '"')
			bs := x ^ (ones * '\\')
			// A byte is '"', '\\' or below 0x20: the classic has-zero and
			// has-less-than tests, exact as to whether any byte matches.
			if ((q-ones)&^q|(bs-ones)&^bs|(x-ones*0x20)&^x)&highs != 0 {
				break
			}
			i += 8
		}
		if i >= len(b) {
			return nil, false
		}
		switch c := b[i]; {
		case c == '"':
			s.i = i + 1
			return b[start:i:i], esc
		case c == '\\':
			esc = true
			if i+1 >= len(b) {
				return nil, false
			}
			switch b[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if i+6 > len(b) || hex4(b[i+2:i+6]) < 0 {
					return nil, false
				}
				i += 6
			default:
				return nil, false
			}
		case c < 0x20:
			return nil, false
		default:
			i++
		}
	}
}

func hex4(b []byte) rune {
	var r rune
	for _, c := range b[:4] {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c = c - 'a' + 10
		case c >= 'A' && c <= 'F':
			c = c - 'A' + 10
		default:
			return -1
		}
		r = r*16 + rune(c)
	}
	return r
}

// appendJSONText appends the text of a validated string literal's raw
// contents as encoding/json decodes it: escapes resolved, a surrogate
// pair joined, a lone surrogate and each byte of invalid UTF-8 replaced
// by U+FFFD.
func appendJSONText(dst, raw []byte, esc bool) []byte {
	if !esc && utf8.Valid(raw) {
		return append(dst, raw...)
	}
	for i := 0; i < len(raw); {
		c := raw[i]
		switch {
		case c == '\\':
			switch e := raw[i+1]; e {
			case 'b':
				dst = append(dst, '\b')
			case 'f':
				dst = append(dst, '\f')
			case 'n':
				dst = append(dst, '\n')
			case 'r':
				dst = append(dst, '\r')
			case 't':
				dst = append(dst, '\t')
			case 'u':
				r := hex4(raw[i+2:])
				i += 6
				if utf16.IsSurrogate(r) {
					r2 := rune(-1)
					if i+6 <= len(raw) && raw[i] == '\\' && raw[i+1] == 'u' {
						r2 = hex4(raw[i+2:])
					}
					if d := utf16.DecodeRune(r, r2); d != utf8.RuneError {
						i += 6
						r = d
					} else {
						r = utf8.RuneError
					}
				}
				dst = utf8.AppendRune(dst, r)
				continue
			default: // '"', '\\', '/'
				dst = append(dst, e)
			}
			i += 2
		case c < utf8.RuneSelf:
			dst = append(dst, c)
			i++
		default:
			r, size := utf8.DecodeRune(raw[i:])
			dst = utf8.AppendRune(dst, r)
			i += size
		}
	}
	return dst
}
