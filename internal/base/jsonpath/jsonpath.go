// Package jsonpath is the small part of kubectl's JSONPath templates that
// `gangway get -o jsonpath=TEMPLATE` takes: text with actions in braces,
// each a path ({.field.sub}, {.items[*].name}, {.items[0]}), a quoted
// literal ({"\n"}), or a {range PATH}...{end} loop whose body's paths are
// taken from each element in turn. A path that finds nothing prints
// nothing, as kubectl's does; several values found print space-separated.
//
// It imports the standard library only.
package jsonpath

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
)

// ErrSyntax is what every Parse error wraps.
var ErrSyntax = errors.New("jsonpath")

// Template is a parsed template.
type Template struct{ nodes []node }

type node struct {
	text  string // kind text or literal
	path  []step // kind path or range
	body  []node // kind range
	kind  int
	start int // the action's offset in the template, for messages
}

const (
	kindText = iota
	kindPath
	kindRange
)

// step is one step of a path: a field, an index, or every element (*).
type step struct {
	field string
	index int
	all   bool
	isIdx bool
}

func errAt(off int, format string, args ...any) error {
	return fmt.Errorf("%w: at offset %d: %s", ErrSyntax, off, fmt.Sprintf(format, args...))
}

// Parse reads a template. Its errors wrap ErrSyntax and name the offset
// and what is wrong there.
func Parse(s string) (*Template, error) {
	nodes, _, end, err := parseNodes(s, 0, false)
	if err != nil {
		return nil, err
	}
	if end >= 0 {
		return nil, errAt(end, "{end} without a {range} to close")
	}
	return &Template{nodes: nodes}, nil
}

// parseNodes parses from off until the end of s or, inRange, an {end};
// it returns the offset after what it read and that {end}'s offset (-1 if
// it stopped at the end of s).
func parseNodes(s string, off int, inRange bool) ([]node, int, int, error) {
	var nodes []node
	for off < len(s) {
		i := strings.IndexByte(s[off:], '{')
		if i < 0 {
			nodes = append(nodes, node{kind: kindText, text: s[off:], start: off})
			off = len(s)
			break
		}
		if i > 0 {
			nodes = append(nodes, node{kind: kindText, text: s[off : off+i], start: off})
		}
		start := off + i
		close, err := actionEnd(s, start)
		if err != nil {
			return nil, 0, 0, err
		}
		act := strings.TrimSpace(s[start+1 : close])
		off = close + 1
		switch {
		case act == "end":
			if !inRange {
				return nil, 0, start, nil
			}
			return nodes, off, start, nil
		case strings.HasPrefix(act, "range ") || act == "range":
			p, err := parsePath(strings.TrimSpace(strings.TrimPrefix(act, "range")), start)
			if err != nil {
				return nil, 0, 0, err
			}
			body, next, end, err := parseNodes(s, off, true)
			if err != nil {
				return nil, 0, 0, err
			}
			if end < 0 {
				return nil, 0, 0, errAt(start, "{range} without an {end}")
			}
			nodes = append(nodes, node{kind: kindRange, path: p, body: body, start: start})
			off = next
		case strings.HasPrefix(act, `"`):
			lit, err := strconv.Unquote(act)
			if err != nil {
				return nil, 0, 0, errAt(start, "bad string literal %s", act)
			}
			nodes = append(nodes, node{kind: kindText, text: lit, start: start})
		default:
			p, err := parsePath(act, start)
			if err != nil {
				return nil, 0, 0, err
			}
			nodes = append(nodes, node{kind: kindPath, path: p, start: start})
		}
	}
	return nodes, off, -1, nil
}

// actionEnd is the offset of the } that closes the action opened at start,
// skipping quoted strings.
func actionEnd(s string, start int) (int, error) {
	for i := start + 1; i < len(s); i++ {
		switch s[i] {
		case '"':
			for i++; i < len(s) && s[i] != '"'; i++ {
				if s[i] == '\\' {
					i++
				}
			}
			if i >= len(s) {
				return 0, errAt(start, "unterminated string literal")
			}
		case '{':
			return 0, errAt(i, "{ inside an action")
		case '}':
			return i, nil
		}
	}
	return 0, errAt(start, "unclosed { (want a } to end the action)")
}

// parsePath reads .a.b[0].c[*] (a leading $ or @ is the same as none).
func parsePath(p string, off int) ([]step, error) {
	orig := p
	p = strings.TrimPrefix(strings.TrimPrefix(p, "$"), "@")
	if p == "" {
		if orig == "" {
			return nil, errAt(off, "empty action {}")
		}
		return nil, nil
	}
	var steps []step
	for len(p) > 0 {
		switch p[0] {
		case '.':
			p = p[1:]
			j := strings.IndexAny(p, ".[")
			if j < 0 {
				j = len(p)
			}
			name := p[:j]
			if name == "" {
				return nil, errAt(off, "%q: empty field name", orig)
			}
			for _, c := range name {
				if !(c == '_' || c == '-' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9') {
					return nil, errAt(off, "%q: field name %q has %q (this subset takes letters, digits, _ and -)", orig, name, c)
				}
			}
			steps = append(steps, step{field: name})
			p = p[j:]
		case '[':
			j := strings.IndexByte(p, ']')
			if j < 0 {
				return nil, errAt(off, "%q: [ without ]", orig)
			}
			in := p[1:j]
			if in == "*" {
				steps = append(steps, step{all: true})
			} else if n, err := strconv.Atoi(in); err == nil && n >= 0 {
				steps = append(steps, step{index: n, isIdx: true})
			} else {
				return nil, errAt(off, "%q: index [%s]: want a number 0 or more, or * (filters and slices are not taken)", orig, in)
			}
			p = p[j+1:]
		default:
			return nil, errAt(off, "%q: want a path starting with . (as .items[*].name), a \"literal\", range or end", orig)
		}
	}
	return steps, nil
}

// Execute writes the template applied to data, a value as encoding/json
// decodes into any (numbers best as json.Number).
func (t *Template) Execute(w io.Writer, data any) error {
	var b bytes.Buffer
	if err := run(&b, t.nodes, data); err != nil {
		return err
	}
	_, err := w.Write(b.Bytes())
	return err
}

func run(b *bytes.Buffer, nodes []node, data any) error {
	for _, n := range nodes {
		switch n.kind {
		case kindText:
			b.WriteString(n.text)
		case kindPath:
			for i, v := range eval(n.path, data) {
				if i > 0 {
					b.WriteByte(' ')
				}
				if err := format(b, v); err != nil {
					return err
				}
			}
		case kindRange:
			vals := eval(n.path, data)
			if len(vals) == 1 {
				if l, ok := vals[0].([]any); ok {
					vals = l // {range .items}: each element
				}
			}
			for _, v := range vals {
				if err := run(b, n.body, v); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// eval is every value path finds from data.
func eval(path []step, data any) []any {
	cur := []any{data}
	for _, s := range path {
		var next []any
		for _, v := range cur {
			switch {
			case s.all:
				switch x := v.(type) {
				case []any:
					next = append(next, x...)
				case map[string]any:
					for _, k := range slices.Sorted(maps.Keys(x)) {
						next = append(next, x[k])
					}
				}
			case s.isIdx:
				if l, ok := v.([]any); ok && s.index < len(l) {
					next = append(next, l[s.index])
				}
			default:
				if m, ok := v.(map[string]any); ok {
					if e, ok := m[s.field]; ok {
						next = append(next, e)
					}
				}
			}
		}
		cur = next
	}
	return cur
}

// format writes a value as kubectl does: strings and numbers bare, null
// as nothing, objects and lists as JSON.
func format(b *bytes.Buffer, v any) error {
	switch x := v.(type) {
	case nil:
	case string:
		b.WriteString(x)
	case json.Number:
		b.WriteString(x.String())
	case bool, float64:
		fmt.Fprint(b, x)
	default:
		j, err := json.Marshal(x)
		if err != nil {
			return err
		}
		b.Write(j)
	}
	return nil
}
