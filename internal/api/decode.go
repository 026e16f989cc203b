package api

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"reflect"
	"regexp"
	"strconv"
	"strings"

	"github.com/goccy/go-yaml"
	"github.com/goccy/go-yaml/token"
)

// DecodeJobSpec parses a job spec from YAML or JSON (JSON is YAML), strictly:
// unknown fields, wrong types and trailing documents are errors carrying the
// line and column. The result is defaulted and validated; any failure is a
// *ValidationError wrapping ErrInvalid.
func DecodeJobSpec(data []byte) (JobSpec, error) {
	// An absent gpusPerRank defaults to 1, but an explicit 0 is an error;
	// the sentinel tells the two apart.
	s := JobSpec{GPUsPerRank: math.MinInt}
	if err := decodeStrict(data, &s); err != nil {
		return JobSpec{}, err
	}
	if s.GPUsPerRank == math.MinInt {
		s.GPUsPerRank = 1
	} else if s.GPUsPerRank == 0 {
		s.GPUsPerRank = -1 // reported as "must be at least 1 (got 0)" below
	}
	s.Default()
	if err := s.Validate(); err != nil {
		return JobSpec{}, err
	}
	return s, nil
}

// MaxYAMLBytes bounds the documents decodeStrict hands to goccy/go-yaml,
// which allocates 30 to 60 bytes for each byte it reads: a body of the
// server's 4 MiB cost over 200 MB. JSON that the quick path takes may be
// larger (it costs about 11 bytes a byte).
const MaxYAMLBytes = 1 << 20

// DecodeStrict decodes YAML or JSON into v with unknown fields rejected,
// after CheckShape. Errors are *ValidationError with line and column.
func DecodeStrict(data []byte, v any) error { return decodeStrict(data, v) }

func decodeStrict(data []byte, v any) error {
	if err := CheckShape(data); err != nil {
		return err
	}
	// The quick path decodes into a copy of *v (its initial value kept),
	// which replaces *v only when the quick path vouches for it.
	if rv := reflect.ValueOf(v); rv.Kind() == reflect.Pointer && !rv.IsNil() {
		tmp := reflect.New(rv.Elem().Type())
		tmp.Elem().Set(rv.Elem())
		if decodeJSONFast(data, tmp.Interface()) {
			rv.Elem().Set(tmp.Elem())
			return nil
		}
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return &ValidationError{Fields: []*FieldError{{Msg: "empty document"}}}
	}
	if len(data) > MaxYAMLBytes {
		return &ValidationError{Fields: []*FieldError{{Msg: fmt.Sprintf("%d bytes of YAML (or of JSON that does not match the spec); at most %d", len(data), MaxYAMLBytes)}}}
	}
	dec := yaml.NewDecoder(bytes.NewReader(data), yaml.DisallowUnknownField(), yaml.UseJSONUnmarshaler())
	if err := dec.Decode(v); err != nil {
		fe, key := yamlFieldError(err)
		typeErrorInWords(fe, reflect.TypeOf(v), key)
		if fe.Field == "" {
			// A value's own decoder (a duration's) knows no field: find it.
			var doc any
			if yaml.Unmarshal(data, &doc) == nil {
				if at := checkScalars(doc, reflect.TypeOf(v), ""); at != nil && at.Field != "" {
					fe.Field = at.Field
				}
			}
		}
		return &ValidationError{Fields: []*FieldError{fe}}
	}
	var extra any
	if err := dec.Decode(&extra); err == nil {
		return &ValidationError{Fields: []*FieldError{{Msg: "more than one document; submit one job per file"}}}
	}
	var doc any
	if err := yaml.Unmarshal(data, &doc); err == nil {
		if fe := checkScalars(doc, reflect.TypeOf(v), ""); fe != nil {
			return &ValidationError{Fields: []*FieldError{fe}}
		}
	}
	return nil
}

var posRE = regexp.MustCompile(`^\[(\d+):(\d+)\]\s*`)

// yamlFieldError turns goccy's "[3:5] unknown field "x"" plus its source
// excerpt into a one-line FieldError; key is the mapping key whose value
// the error is about, when known.
func yamlFieldError(err error) (fe *FieldError, key string) {
	var ye yaml.Error
	msg := err.Error()
	if errors.As(err, &ye) {
		msg = ye.GetMessage()
		if tok := ye.GetToken(); tok != nil && tok.Position != nil {
			fe := &FieldError{Line: tok.Position.Line, Column: tok.Position.Column, Msg: msg, Field: fieldFromMsg(msg)}
			key := keyOf(tok)
			if fe.Field == "" && sequenceRE.MatchString(msg) {
				fe.Field = key
			}
			return fe, key
		}
	}
	// Fall back to the first line of the formatted error.
	if i := bytes.IndexByte([]byte(msg), '\n'); i >= 0 {
		msg = msg[:i]
	}
	fe = &FieldError{Msg: msg}
	if m := posRE.FindStringSubmatch(msg); m != nil {
		fe.Line, _ = strconv.Atoi(m[1])
		fe.Column, _ = strconv.Atoi(m[2])
		fe.Msg = msg[len(m[0]):]
	}
	fe.Field = fieldFromMsg(fe.Msg)
	return fe, ""
}

// keyOf is the mapping key whose value is tok ("command" for the "a" of
// "command: a"), or "" when tok is not a mapping's value.
func keyOf(tok *token.Token) string {
	if tok.Prev == nil || tok.Prev.Type != token.MappingValueType || tok.Prev.Prev == nil {
		return ""
	}
	return tok.Prev.Prev.Value
}

var unknownRE = regexp.MustCompile(`unknown field "([^"]+)"`)

func fieldFromMsg(msg string) string {
	if m := unknownRE.FindStringSubmatch(msg); m != nil {
		return m[1]
	}
	return ""
}

// typeMismatchRE matches the decoders' type errors, which speak of Go:
// goccy's "cannot unmarshal string into Go struct field JobSpec.Ranks of
// type int" and encoding/json's (from an UnmarshalJSON method) "... Go
// struct field plain.tp of type int".
var typeMismatchRE = regexp.MustCompile(`^(?:(\w+): json: )?cannot unmarshal (.+?) into Go (?:struct field ([\w.]+)|value) of type (\S+)`)

// sequenceRE matches goccy's "string was used where sequence is expected".
var sequenceRE = regexp.MustCompile(`^(\w+) was used where (\w+) is expected`)

// typeErrorInWords rewrites a decoder's type error on fe in the user's
// words: the field's name as the spec spells it and what was wanted and
// given ("ranks: want an integer, got a string"). root is the type
// decoded into, key the YAML key holding the value (goccy names only the
// top-level field: "resources" for resources.memoryBytes); other errors
// are left as they are.
func typeErrorInWords(fe *FieldError, root reflect.Type, key string) {
	if m := typeMismatchRE.FindStringSubmatch(fe.Msg); m != nil {
		fe.Msg = fmt.Sprintf("want %s, got %s", goTypeInWords(m[4]), goTypeInWords(m[2]))
		switch {
		case m[1] != "" && m[3] != "": // from a field's own UnmarshalJSON
			fe.Field = m[1] + "." + specPath(root, m[3])
		case m[3] != "":
			fe.Field = specPath(root, m[3])
			if key != "" && key != fe.Field && !strings.HasSuffix(fe.Field, "."+key) {
				fe.Field += "." + key
			}
		}
		return
	}
	if m := sequenceRE.FindStringSubmatch(fe.Msg); m != nil {
		fe.Msg = fmt.Sprintf("want %s, got %s", yamlKindInWords(m[2]), yamlKindInWords(m[1]))
	}
}

// goTypeInWords names a Go type as a spec's author knows it.
func goTypeInWords(t string) string {
	t = strings.TrimPrefix(t, "*")
	switch {
	case strings.HasPrefix(t, "[]"):
		return "a list"
	case strings.HasPrefix(t, "map["), strings.HasPrefix(t, "api."), t == "interface {}":
		return "a mapping"
	case t == "string":
		return "a string"
	case t == "bool":
		return "true or false"
	case strings.HasPrefix(t, "int"), strings.HasPrefix(t, "uint"):
		return "an integer"
	case strings.HasPrefix(t, "float"):
		return "a number"
	}
	return "a mapping" // a struct of the spec
}

func yamlKindInWords(k string) string {
	switch k {
	case "sequence":
		return "a list"
	case "mapping":
		return "a mapping"
	case "string":
		return "a string"
	}
	return k
}

// specPath turns a decoder's Go path ("JobSpec.Ranks",
// "JobSpec.Resources.MemoryBytes") into the spec's dotted JSON names
// ("ranks", "resources.memoryBytes"), following the fields from root; a
// path it cannot follow is given as its last part (encoding/json writes
// JSON names there already).
func specPath(root reflect.Type, goPath string) string {
	parts := strings.Split(goPath, ".")
	t := root
	var out []string
	for i, p := range parts {
		for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Map || t.Kind() == reflect.Array {
			t = t.Elem()
		}
		if i == 0 {
			if t.Name() != p {
				return parts[len(parts)-1]
			}
			continue
		}
		f, ok := t.FieldByName(p)
		if t.Kind() != reflect.Struct || !ok {
			return parts[len(parts)-1]
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "" {
			name = f.Name
		}
		out = append(out, name)
		t = f.Type
	}
	return strings.Join(out, ".")
}
