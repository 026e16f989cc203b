package api

import (
	"encoding"
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"strings"
)

// The YAML decoder converts scalars where a spec's author meant none:
// "2" (quoted) into the integer 2, and 1.5 into 1 for an integer field.
// checkScalars walks the decoded document beside the type it went into
// and refuses both, naming the field as the spec spells it.

var (
	jsonUnmarshaler = reflect.TypeFor[json.Unmarshaler]()
	textUnmarshaler = reflect.TypeFor[encoding.TextUnmarshaler]()
)

// checkScalars reports the first scalar of doc (a YAML document decoded
// into any) whose type t would take only by conversion; nil if none. A
// type with its own unmarshaling (durations, quantities) judges itself.
var durationType, byteSizeType = reflect.TypeOf(Duration(0)), reflect.TypeOf(ByteSize(0))

func checkScalars(doc any, t reflect.Type, path string) *FieldError {
	if doc == nil {
		return nil
	}
	if t == durationType || t == byteSizeType {
		// Its own decoder words the error; this names the field.
		b, err := json.Marshal(doc)
		if err == nil {
			err = reflect.New(t).Interface().(json.Unmarshaler).UnmarshalJSON(b)
		}
		if err != nil {
			return &FieldError{Field: path, Msg: err.Error()}
		}
		return nil
	}
	if p := reflect.PointerTo(t); p.Implements(jsonUnmarshaler) || p.Implements(textUnmarshaler) {
		return nil
	}
	at := func(name string) string {
		if path == "" {
			return name
		}
		return path + "." + name
	}
	switch t.Kind() {
	case reflect.Pointer:
		return checkScalars(doc, t.Elem(), path)
	case reflect.Struct:
		m, ok := doc.(map[string]any)
		if !ok {
			return nil // the decoder said so already
		}
		for i := range t.NumField() {
			f := t.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if name == "-" || !f.IsExported() {
				continue
			}
			if name == "" {
				name = f.Name
			}
			if v, ok := m[name]; ok {
				if fe := checkScalars(v, f.Type, at(name)); fe != nil {
					return fe
				}
			}
		}
	case reflect.Map:
		if m, ok := doc.(map[string]any); ok {
			for k, v := range m {
				if fe := checkScalars(v, t.Elem(), at(k)); fe != nil {
					return fe
				}
			}
		}
	case reflect.Slice, reflect.Array:
		if s, ok := doc.([]any); ok {
			for i, v := range s {
				if fe := checkScalars(v, t.Elem(), fmt.Sprintf("%s[%d]", path, i)); fe != nil {
					return fe
				}
			}
		}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		switch v := doc.(type) {
		case string:
			return &FieldError{Field: path, Msg: fmt.Sprintf("want an integer, got a string (%q): write it without quotes", v)}
		case float64:
			if v != math.Trunc(v) {
				return &FieldError{Field: path, Msg: fmt.Sprintf("want an integer, got %g", v)}
			}
		}
	case reflect.Float32, reflect.Float64:
		if v, ok := doc.(string); ok {
			return &FieldError{Field: path, Msg: fmt.Sprintf("want a number, got a string (%q): write it without quotes", v)}
		}
	case reflect.Bool:
		if v, ok := doc.(string); ok {
			return &FieldError{Field: path, Msg: fmt.Sprintf("want true or false, got a string (%q)", v)}
		}
	}
	return nil
}
