package api

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"reflect"
	"regexp"
	"strconv"

	"github.com/goccy/go-yaml"
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
		return &ValidationError{Fields: []*FieldError{yamlFieldError(err)}}
	}
	var extra any
	if err := dec.Decode(&extra); err == nil {
		return &ValidationError{Fields: []*FieldError{{Msg: "more than one document; submit one job per file"}}}
	}
	return nil
}

var posRE = regexp.MustCompile(`^\[(\d+):(\d+)\]\s*`)

// yamlFieldError turns goccy's "[3:5] unknown field "x"" plus its source
// excerpt into a one-line FieldError.
func yamlFieldError(err error) *FieldError {
	var ye yaml.Error
	msg := err.Error()
	if errors.As(err, &ye) {
		msg = ye.GetMessage()
		if tok := ye.GetToken(); tok != nil && tok.Position != nil {
			return &FieldError{Line: tok.Position.Line, Column: tok.Position.Column, Msg: msg, Field: fieldFromMsg(msg)}
		}
	}
	// Fall back to the first line of the formatted error.
	if i := bytes.IndexByte([]byte(msg), '\n'); i >= 0 {
		msg = msg[:i]
	}
	fe := &FieldError{Msg: msg}
	if m := posRE.FindStringSubmatch(msg); m != nil {
		fe.Line, _ = strconv.Atoi(m[1])
		fe.Column, _ = strconv.Atoi(m[2])
		fe.Msg = msg[len(m[0]):]
	}
	fe.Field = fieldFromMsg(fe.Msg)
	return fe
}

var unknownRE = regexp.MustCompile(`unknown field "([^"]+)"`)

func fieldFromMsg(msg string) string {
	if m := unknownRE.FindStringSubmatch(msg); m != nil {
		return m[1]
	}
	return ""
}
