package api

import (
	"fmt"
	"math/bits"
)

// This file holds CheckShape, the scan every body passes before a decoder
// sees it. goccy/go-yaml builds the whole document before it checks
// anything, at about 1 KB per value and far more per level of nesting: a
// 100 KB body of "[[[[…" took the server past 3 GiB, and 2 MB of
// "[1,1,1,…" past 1 GiB. The scan is linear and allocates nothing.

// Limits on a document's shape. A real spec nests under 10 levels and holds
// a few hundred values.
const (
	// MaxDepth bounds nesting: flow collections ([ {) and block
	// indentation levels together.
	MaxDepth = 64
	// MaxValues bounds the keys, scalars and collections of a document.
	MaxValues = 16384
)

// CheckShape refuses a JSON or YAML document that nests deeper than
// MaxDepth, holds more than MaxValues values, or uses an anchor, alias or
// tag (one alias can stand for a document many times its size, and goccy
// nests a tagged empty value over the lines that follow; a spec needs
// none of them). It reads the bytes
// once, as a YAML lexer would, counting conservatively: where it cannot
// tell, it counts a level or value more, never one less. The error is a
// *ValidationError with the line and column where the limit was passed.
func CheckShape(data []byte) error {
	s := shapeScan{data: data, line: 1, maxValues: MaxValues}
	return s.run()
}

// CheckNesting is CheckShape without the bound on values, for bodies that
// encoding/json or fastjson decode (agents' reports, which grow with a
// node's ranks): those cost memory in proportion to the body, which the
// server bounds, but nothing should decode 10,000 levels of nesting.
func CheckNesting(data []byte) error {
	s := shapeScan{data: data, line: 1}
	return s.run()
}

// shapeScan is CheckShape's state. block holds the open block levels (see
// level; at most MaxDepth+1 are kept); flow counts the open [ and {.
type shapeScan struct {
	data      []byte
	maxValues int // 0: no bound
	i         int
	line      int
	lineStart int

	block  [MaxDepth + 1]int
	nblock int
	flow   int
	values int

	// expect: the next non-blank byte begins a value. adjacent: the last
	// token was a quoted scalar or a closed flow collection, after which
	// ':' is a value indicator even without a blank.
	expect, adjacent bool
	// seqs and pairs have a bit for each of the first 64 flow levels:
	// the level is a sequence ([), and the entry now read at that level
	// is a key: value pair, which makes a mapping of its own ("[a: b]"
	// nests two levels).
	seqs, pairs uint64
	// valueCol is the column where the last value began; lineKeys counts
	// the block value indicators (':') on this line.
	valueCol, lineKeys int

	// deepest is the most levels seen; overLine and overCol where
	// MaxDepth was first passed (overLine 0: never); capped says the block
	// levels stopped being counted at the limit, so deepest is a floor.
	deepest, overLine, overCol int
	capped                     bool
	// manyLine and manyCol: where maxValues was first passed.
	manyLine, manyCol int
}

func (s *shapeScan) run() error {
	// Neither YAML nor JSON allows raw control characters but tab and line
	// breaks (a string holds them escaped); decoders differ on what they
	// make of them.
	for i, c := range s.data {
		if c < 0x20 && c != '\t' && c != '\n' && c != '\r' {
			s.i = i
			for j := range i {
				if s.data[j] == '\n' {
					s.line, s.lineStart = s.line+1, j+1
				}
			}
			return s.fail(fmt.Sprintf("the document holds the control character %U; write it escaped (\\u%04x) in a quoted string", rune(c), c))
		}
	}
	s.startLine()
	for s.i < len(s.data) {
		c := s.data[s.i]
		switch {
		case c == '\n' || c == '\r' && s.peek(1) != '\n':
			s.i++
			s.line++
			s.lineStart = s.i
			s.startLine()
			continue
		case c == ' ' || c == '\t' || c == '\r':
			s.i++
			continue
		case c == '#' && (s.i == 0 || blank(s.data[s.i-1])):
			s.skipLine()
			continue
		}
		if err := s.token(c); err != nil {
			return err
		}
	}
	if s.overLine > 0 {
		depth := "%d levels deep"
		if s.capped {
			depth = "more than %[1]d levels deep"
			s.deepest = MaxDepth
		}
		return &ValidationError{Fields: []*FieldError{{Line: s.overLine, Column: s.overCol,
			Msg: fmt.Sprintf("the document nests "+depth+"; at most %d", s.deepest, MaxDepth)}}}
	}
	if s.manyLine > 0 {
		return &ValidationError{Fields: []*FieldError{{Line: s.manyLine, Column: s.manyCol,
			Msg: fmt.Sprintf("the document holds %d values (keys, scalars and collections); at most %d", s.values, s.maxValues)}}}
	}
	return nil
}

// token handles the byte at s.i, which is not blank and starts no
// comment. The limits are checked at the end, so that the error can say
// how deep and how many; only what must not be read further fails here.
func (s *shapeScan) token(c byte) error {
	if s.expect {
		switch {
		case c == '"' || c == '\'':
			s.value()
			s.quoted(c)
			s.expect, s.adjacent = false, true
			return nil
		case c == '[' || c == '{':
			return s.open()
		case (c == ']' || c == '}') && s.flow > 0:
			s.close()
			return nil
		case c == ',' && s.flow > 0:
			s.endPair()
			s.i++
			return nil
		case c == '*' || c == '&' || c == '!':
			return s.fail("anchors (&name), aliases (*name) and tags (!tag) are not accepted; write the value out")
		case (c == '?' || c == ':') && s.flow == 0 && s.blankAt(1):
			return s.fail("complex keys (? key, then : value on a line of its own) are not accepted; write key: value")
		case c == '-' && s.flow == 0 && s.blankAt(1):
			s.value()
			if col := s.i - s.lineStart; s.top() == 2*col {
				s.level(2*col + 1) // a sequence under a key: "key:\n- a"
			}
			s.push(s.contentColumn())
			s.i++
			return nil
		case (c == '|' || c == '>') && s.flow == 0:
			s.value()
			return s.blockScalar()
		}
		s.value()
		s.expect = false
	}
	// Inside a plain scalar, or after a value.
	adjacent := s.adjacent
	s.adjacent = false
	switch {
	case c == ':' && (s.blankAt(1) || adjacent || s.flow > 0 && isFlowIndicator(s.peek(1))):
		s.expect = true
		s.beginPair()
		if s.flow == 0 {
			// A second key on one line ("a: b: c") is taken by goccy as
			// a mapping nested at that key.
			if s.lineKeys > 0 {
				s.push(s.valueCol)
			}
			s.lineKeys++
		}
	case s.flow > 0 && (c == '[' || c == '{'):
		return s.open()
	case s.flow > 0 && (c == ']' || c == '}'):
		s.close()
		return nil
	case s.flow > 0 && c == ',':
		s.endPair()
		s.expect = true
	}
	s.i++
	return nil
}

// startLine is called at the start of each line: in block context the
// line's indentation closes the levels deeper than it and may open one.
func (s *shapeScan) startLine() {
	if s.flow > 0 {
		return
	}
	j := s.i
	for j < len(s.data) && s.data[j] == ' ' {
		j++
	}
	if j == len(s.data) || s.data[j] == '\n' || s.data[j] == '\r' || s.data[j] == '#' {
		return // blank or comment only: changes nothing
	}
	indent := j - s.i
	s.lineKeys = 0
	if !s.expect && 2*indent > s.top() && s.nblock > 0 {
		// A more indented line after a plain scalar continues it.
		s.i = j
		return
	}
	if indent == 0 && (s.marker("---") || s.marker("...")) {
		s.nblock = 0 // a new document
		s.i += 3
		s.expect, s.adjacent = true, false
		return
	}
	if indent == 0 && s.data[j] == '%' {
		s.skipLine() // a directive
		return
	}
	s.push(indent)
	s.i = j
	s.expect, s.adjacent = true, false
}

// push closes the block levels deeper than column col and opens one at
// col if it is deeper than the innermost.
func (s *shapeScan) push(col int) { s.level(2 * col) }

// level is push for a level kept as 2×column, or 2×column+1 for one that
// shares its column with the level before (a sequence under a key, which
// the next line at that column closes).
func (s *shapeScan) level(l int) {
	for s.nblock > 0 && s.top() > l {
		s.nblock--
	}
	if s.nblock > 0 && s.top() == l {
		return
	}
	if s.nblock == len(s.block) {
		s.capped = true
		return
	}
	s.block[s.nblock] = l
	s.nblock++
	s.deeper()
}

// top is the innermost level (2×column, see level), -1 if none.
func (s *shapeScan) top() int {
	if s.nblock == 0 {
		return -1
	}
	return s.block[s.nblock-1]
}

func (s *shapeScan) open() error {
	s.value()
	s.flow++
	if s.flow <= 64 {
		if s.data[s.i] == '[' {
			s.seqs |= 1 << (s.flow - 1)
		} else {
			s.seqs &^= 1 << (s.flow - 1)
		}
	}
	s.deeper()
	s.i++
	s.expect, s.adjacent = true, false
	return nil
}

func (s *shapeScan) close() {
	s.endPair()
	s.flow--
	s.i++
	s.expect, s.adjacent = false, true
}

// beginPair notes a ':' inside a flow sequence: its entry is a mapping.
func (s *shapeScan) beginPair() {
	if s.flow == 0 || s.flow > 64 {
		return
	}
	bit := uint64(1) << (s.flow - 1)
	if s.seqs&bit != 0 && s.pairs&bit == 0 {
		s.pairs |= bit
		s.deeper()
	}
}

// endPair ends the entry of the innermost flow level.
func (s *shapeScan) endPair() {
	if s.flow > 0 && s.flow <= 64 {
		s.pairs &^= 1 << (s.flow - 1)
	}
}

// deeper notes the depth now, and where it first passed MaxDepth.
func (s *shapeScan) deeper() {
	d := s.nblock + s.flow + bits.OnesCount64(s.pairs)
	if d > s.deepest {
		s.deepest = d
	}
	if d > MaxDepth && s.overLine == 0 {
		s.overLine, s.overCol = s.line, s.i-s.lineStart+1
	}
}

// value counts a value, and notes where the count first passed the
// bound.
func (s *shapeScan) value() {
	s.valueCol = s.i - s.lineStart
	s.values++
	if s.maxValues > 0 && s.values > s.maxValues && s.manyLine == 0 {
		s.manyLine, s.manyCol = s.line, s.i-s.lineStart+1
	}
}

// quoted skips a quoted scalar opening at s.i, counting its lines.
func (s *shapeScan) quoted(q byte) {
	s.i++
	for s.i < len(s.data) {
		c := s.data[s.i]
		switch {
		case c == '\\' && q == '"':
			s.i++
		case c == q && q == '\'' && s.peek(1) == '\'':
			s.i++
		case c == q:
			s.i++
			return
		case c == '\n' || c == '\r' && s.peek(1) != '\n':
			s.line++
			s.lineStart = s.i + 1
		}
		s.i++
	}
}

// blockScalar skips a literal (|) or folded (>) scalar: its header line,
// then every line more indented than the first of its content.
func (s *shapeScan) blockScalar() error {
	parent := s.top()
	for s.i++; s.i < len(s.data) && !blank(s.data[s.i]); s.i++ {
		if c := s.data[s.i]; c >= '1' && c <= '9' {
			return s.fail("block scalars with an indentation indicator (|2) are not accepted")
		}
	}
	s.skipLine()
	s.skipBreak()
	content := -1
	for s.i < len(s.data) {
		j := s.i
		for j < len(s.data) && s.data[j] == ' ' {
			j++
		}
		end := j
		for end < len(s.data) && s.data[end] != '\n' && s.data[end] != '\r' {
			end++
		}
		if end > j { // not an empty line
			if content < 0 {
				content = j - s.i
			}
			if j-s.i < content || 2*content <= parent {
				break // the scalar has ended; this line is structure
			}
		}
		s.i = end
		s.skipBreak()
	}
	s.expect, s.adjacent = true, false // what follows is structure
	s.startLine()
	return nil
}

// contentColumn is the column of the first value after the indicator at
// s.i (-) on its line, or the next column if none follows.
func (s *shapeScan) contentColumn() int {
	k := s.i + 1
	for k < len(s.data) && s.data[k] == ' ' {
		k++
	}
	if k == len(s.data) || s.data[k] == '\n' || s.data[k] == '\r' || s.data[k] == '#' {
		return s.i - s.lineStart + 1
	}
	return k - s.lineStart
}

// skipLine moves to the next line break (the main loop counts it).
func (s *shapeScan) skipLine() {
	for s.i < len(s.data) && s.data[s.i] != '\n' && s.data[s.i] != '\r' {
		s.i++
	}
}

// skipBreak steps over one line break, counting it.
func (s *shapeScan) skipBreak() {
	if s.i >= len(s.data) {
		return
	}
	if s.data[s.i] == '\r' && s.peek(1) == '\n' {
		s.i++
	}
	s.i++
	s.line++
	s.lineStart = s.i
}

func (s *shapeScan) marker(m string) bool {
	return len(s.data)-s.i >= len(m) && string(s.data[s.i:s.i+len(m)]) == m && (s.blankAt(len(m)))
}

func (s *shapeScan) peek(k int) byte {
	if s.i+k < len(s.data) {
		return s.data[s.i+k]
	}
	return 0
}

// blankAt: the byte k ahead is a blank, a line break or the end.
func (s *shapeScan) blankAt(k int) bool {
	return s.i+k >= len(s.data) || blank(s.data[s.i+k])
}

func (s *shapeScan) fail(msg string) error {
	return &ValidationError{Fields: []*FieldError{{Line: s.line, Column: s.i - s.lineStart + 1, Msg: msg}}}
}

func blank(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

func isFlowIndicator(c byte) bool { return c == ',' || c == '[' || c == ']' || c == '{' || c == '}' }
