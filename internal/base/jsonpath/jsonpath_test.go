package jsonpath

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

const doc = `{"kind":"list","items":[
 {"id":"1","spec":{"name":"a","ranks":2,"labels":{"team":"x"}},"ok":true},
 {"id":"2","spec":{"name":"b","ranks":4},"ok":false,"tags":["p","q"]}]}`

func decode(t *testing.T) any {
	t.Helper()
	d := json.NewDecoder(strings.NewReader(doc))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		t.Fatal(err)
	}
	return v
}

func TestExecute(t *testing.T) {
	for _, tc := range []struct{ name, tmpl, want string }{
		{"field", "{.kind}", "list"},
		{"text around", "kind={.kind}!", "kind=list!"},
		{"wildcard", "{.items[*].spec.name}", "a b"},
		{"index", "{.items[1].spec.ranks}", "4"},
		{"dollar root", "{$.items[0].id}", "1"},
		{"missing prints nothing", "{.items[*].spec.labels.team}|{.nope}", "x|"},
		{"object as JSON", "{.items[0].spec.labels}", `{"team":"x"}`},
		{"list as JSON", "{.items[1].tags}", `["p","q"]`},
		{"bool", "{.items[*].ok}", "true false"},
		{"range", `{range .items[*]}{.id}{"\t"}{.spec.name}{"\n"}{end}`, "1\ta\n2\tb\n"},
		{"range over a list", `{range .items}{.id},{end}`, "1,2,"},
		{"nested range", `{range .items[*]}{.id}:{range .tags[*]}{@}{end};{end}`, "1:;2:pq;"},
		{"index past the end", "{.items[5].id}", ""},
		{"plain text", "hello", "hello"},
		{"escaped brace in literal", `{"}"}`, "}"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tp, err := Parse(tc.tmpl)
			if err != nil {
				t.Fatalf("Parse(%q): %v", tc.tmpl, err)
			}
			var b bytes.Buffer
			if err := tp.Execute(&b, decode(t)); err != nil {
				t.Fatal(err)
			}
			if b.String() != tc.want {
				t.Errorf("%s = %q; want %q", tc.tmpl, b.String(), tc.want)
			}
		})
	}
}

func TestParseErrors(t *testing.T) {
	for _, tc := range []struct{ tmpl, want string }{
		{"{.kind", "unclosed {"},
		{"{}", "empty action"},
		{"{kind}", "want a path starting with ."},
		{"{.items[x]}", "index [x]"},
		{"{.items[?(@.a)]}", "index [?(@.a)]"},
		{"{.items[0}", "[ without ]"},
		{"{.a..b}", "empty field name"},
		{"{.a b}", `field name "a b"`},
		{"{end}", "{end} without a {range}"},
		{"{range .items[*]}{.id}", "{range} without an {end}"},
		{`{"abc}`, "unterminated string"},
		{`{"\q"}`, "bad string literal"},
		{"{.a{.b}}", "{ inside an action"},
	} {
		_, err := Parse(tc.tmpl)
		if !errors.Is(err, ErrSyntax) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Parse(%q) = %v; want an ErrSyntax naming %q", tc.tmpl, err, tc.want)
		}
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{"{.kind}", `{range .items[*]}{.id}{"\n"}{end}`, "{.a[0].b[*]}", "{end}", `{"x"}`, "a{"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		tp, err := Parse(s)
		if err != nil {
			if !errors.Is(err, ErrSyntax) {
				t.Fatalf("Parse(%q): %v does not wrap ErrSyntax", s, err)
			}
			return
		}
		var b bytes.Buffer
		if err := tp.Execute(&b, decode(t)); err != nil {
			t.Fatalf("Execute(%q): %v", s, err)
		}
	})
}
