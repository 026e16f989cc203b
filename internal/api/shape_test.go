package api

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/gangway/gangway/internal/base/testenv"
	"github.com/goccy/go-yaml"
)

func TestCheckShape(t *testing.T) {
	deepJSON := strings.Repeat("[", 100_000) + strings.Repeat("]", 100_000)
	deepYAMLFlow := "ranks: 1\ncommand: " + strings.Repeat("[", 100_000)
	var deepBlock strings.Builder
	for i := range 100 {
		deepBlock.WriteString(strings.Repeat(" ", i) + "k:\n")
	}
	tests := []struct {
		name   string
		in     string
		errHas string // "" means accepted
		line   int
	}{
		{name: "flat yaml", in: "name: t\nranks: 2\ncommand: [python3, train.py]\n"},
		{name: "json", in: `{"ranks": 2, "command": ["x"], "env": {"A": "b"}}`},
		{name: "64 levels of flow", in: strings.Repeat("[", 63) + strings.Repeat("]", 63)},
		{name: "brackets inside quotes do not count", in: `command: [sh, -c, "` + strings.Repeat("[", 200) + `"]`},
		{name: "closing brackets inside quotes do not hide nesting", in: "a: " + strings.Repeat(`[ "]", `, 70), errHas: "nests 71 levels deep", line: 1},
		{name: "brackets in a block plain scalar are text", in: "name: a[1]{2}\nargs: x" + strings.Repeat("[", 100) + "\n"},
		{name: "a literal block is text", in: "script: |\n  if [[ -f x ]]; then\n    echo \"[[[[[[\n  fi\nranks: 1\n"},
		{name: "the measured attack, json", in: deepJSON, errHas: "nests 100001 levels deep; at most 64", line: 1},
		{name: "the measured attack, yaml", in: deepYAMLFlow, errHas: "nests 100001 levels deep; at most 64", line: 2},
		{name: "block indentation counts", in: deepBlock.String(), errHas: "nests more than 64 levels deep", line: 65},
		{name: "compact sequences count", in: strings.Repeat("- ", 70) + "x\n", errHas: "more than 64 levels deep"},
		{name: "aliases are refused", in: "a: [1, 2]\nb: *x\n", errHas: "aliases", line: 2},
		{name: "anchors are refused", in: "a: &x [1, 2]\n", errHas: "anchors", line: 1},
		{name: "tags are refused", in: "0: !\n0: !\n0: 1\n", errHas: "tags", line: 1},
		{name: "a bang inside a value is text", in: "name: hello!\ncommand: [echo, \"!x\", a&b, 2*3]\n"},
		{name: "indentation indicators are refused", in: "a: |2\n   x\n", errHas: "indentation indicator"},
		{name: "too many values", in: "command: [" + strings.Repeat("1,", MaxValues) + "1]", errHas: "holds 16387 values"},
		{name: "a plain scalar continued on more indented lines", in: "a: one\n  'two\nb: [" + strings.Repeat("[", 70), errHas: "nests"},
		{name: "raw control characters are refused", in: "a: 1\nname: \"x\x1b[2K\"\n", errHas: "U+001B; write it escaped (\\u001b)", line: 2},
		{name: "escaped ones are the validator's", in: "name: \"x\\u001b\"\n"},
		{name: "keys after keys on one line count", in: strings.Repeat("a: ", 70) + "b\n", errHas: "more than 64 levels deep"},
		{name: "complex keys are refused", in: "? [a]\n: b\n", errHas: "complex keys", line: 1},
		{name: "a line opening with a value is refused", in: "0\n: 0\n", errHas: "complex keys", line: 2},
		{name: "pairs in flow sequences count", in: strings.Repeat("[a: ", 40) + "b", errHas: "nests 81 levels deep"},
		{name: "pairs in flow mappings do not", in: "env: {" + strings.Repeat("a: b, ", 100) + "}\n"},
		{name: "comments are skipped", in: "# [[[[[[[[\nranks: 1 # {{{{\n"},
		{name: "crlf", in: "ranks: 1\r\ncommand:\r\n  - a\r\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := CheckShape([]byte(tt.in))
			if tt.errHas == "" {
				if err != nil {
					t.Fatalf("CheckShape = %v; want nil", err)
				}
				return
			}
			var ve *ValidationError
			if !errors.As(err, &ve) || !errors.Is(err, ErrInvalid) {
				t.Fatalf("CheckShape = %v; want a *ValidationError", err)
			}
			if !strings.Contains(err.Error(), tt.errHas) {
				t.Errorf("CheckShape = %v; want it to say %q", err, tt.errHas)
			}
			if tt.line > 0 && ve.Fields[0].Line != tt.line {
				t.Errorf("line %d; want %d", ve.Fields[0].Line, tt.line)
			}
		})
	}
}

// TestDeepBodyNeverDecoded feeds the measured attack (100 KB of "[[[[…",
// as JSON and as YAML) to the decoders and checks it is refused before
// either decoder ran: decoding it took over 3 GiB; the refusal must
// allocate under 1 MiB.
func TestDeepBodyNeverDecoded(t *testing.T) {
	for name, body := range map[string][]byte{
		"json": []byte(strings.Repeat("[", 100_000)),
		"yaml": []byte("ranks: 1\ncommand:\n  - " + strings.Repeat("[", 100_000)),
		"flat": []byte("ranks: 1\ncommand:\n" + strings.Repeat("- 1\n", 100_000)),
	} {
		t.Run(name, func(t *testing.T) { refusedCheaply(t, body, "at most") })
	}
}

// refusedCheaply checks that DecodeJobSpec refuses body, saying want,
// having allocated under 1 MiB: no decoder ran.
func refusedCheaply(t *testing.T, body []byte, want string) {
	t.Helper()
	var err error
	allocated := testenv.BytesAllocated(func() { _, err = DecodeJobSpec(body) })
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), want) {
		t.Fatalf("DecodeJobSpec = %v; want it refused, saying %q", err, want)
	}
	if allocated > 1<<20 {
		t.Errorf("refusing it allocated %d bytes; want under 1 MiB (did a decoder run?)", allocated)
	}
}

// TestBigYAMLNeverDecoded: goccy/go-yaml allocates 30 to 60 bytes a
// byte, so a document over MaxYAMLBytes is refused before it runs (a 2 MiB
// one cost over 100 MB); JSON as big that the quick path takes passes.
func TestBigYAMLNeverDecoded(t *testing.T) {
	arg := strings.Repeat("x", 100<<10)
	refusedCheaply(t, []byte("ranks: 1\ncommand:\n"+strings.Repeat("  - "+arg+"\n", 20)), "bytes of YAML")
	js := `{"ranks": 1, "command": ["x"` + strings.Repeat(`, "`+arg+`"`, 7) + `]}`
	if _, err := DecodeJobSpec([]byte(js)); err != nil {
		t.Errorf("DecodeJobSpec(700 KiB of JSON) = %v; want it decoded", err)
	}
	js = `{"ranks": 1, "command": ["x"` + strings.Repeat(`, "`+arg+`"`, 9) + `], "env": {"A": "` + arg + `", "B": "` + arg + `"}}`
	if _, err := DecodeJobSpec([]byte(js)); len(js) <= MaxYAMLBytes || err != nil {
		t.Errorf("DecodeJobSpec(%d bytes of JSON) = %v; want it decoded by the quick path", len(js), err)
	}
}

// FuzzCheckShape holds the scan to what the decoders do: it never counts
// fewer levels than goccy/go-yaml or encoding/json build, and never
// panics.
func FuzzCheckShape(f *testing.F) {
	for _, seed := range []string{
		"name: t\nranks: 2\ncommand: [python3, train.py]\n",
		`{"ranks": 2, "command": ["x"], "env": {"A": "b"}}`,
		"a:\n  b:\n    - c\n    - [d, {e: f}]\n",
		"- - - x\n",
		"script: |\n  echo [[\nb: [1]\n",
		"a: 'it''s [' \nb: \"\\\"[\"\n",
		"a: one\n  two\nb: [[1]]\n",
		"---\na: [1]\n...\n",
		"? [a]\n: b\n",
		"a: !!str [x]\n",
		"a: &x {b: [1]}\n",
		"x: [a:'b, [[c]], 'd]\n",
		`{"a":[{"b":{"c":[[1]]}}]}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 4096 {
			return
		}
		s := shapeScan{data: data, line: 1}
		if s.run() != nil {
			return
		}
		if json.Valid(data) {
			var v any
			if json.Unmarshal(data, &v) == nil && depthOf(v) > s.deepest {
				t.Fatalf("json nests %d deep; the scan counted %d", depthOf(v), s.deepest)
			}
		}
		var v any
		if yaml.Unmarshal(data, &v) == nil && depthOf(v) > s.deepest {
			t.Fatalf("yaml nests %d deep; the scan counted %d", depthOf(v), s.deepest)
		}
	})
}

// depthOf is how deeply maps and slices nest in v.
func depthOf(v any) int {
	d := 0
	switch v := v.(type) {
	case map[string]any:
		for _, e := range v {
			d = max(d, depthOf(e))
		}
		return d + 1
	case map[any]any:
		for k, e := range v {
			d = max(d, depthOf(k), depthOf(e))
		}
		return d + 1
	case []any:
		for _, e := range v {
			d = max(d, depthOf(e))
		}
		return d + 1
	}
	return 0
}
