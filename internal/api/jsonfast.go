package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"reflect"
	"strings"
	"sync"
)

// decodeJSONFast decodes a JSON document into v the quick way, and says
// whether it could vouch for the result: encoding/json with unknown fields
// refused, plus a walk over the tokens that every object key of a struct
// names one of its fields exactly (encoding/json alone would take "Ranks"
// for "ranks"), that no key repeats and that no value is null. When it
// cannot vouch (any doubt at all), v must be decoded again by the strict
// YAML path, which also gives the error its line and column. API clients'
// bodies take the quick path, six times cheaper than the YAML decoder
// (17 µs against 100 µs for a typical job spec).
func decodeJSONFast(data []byte, v any) bool {
	d := bytes.TrimSpace(data)
	if len(d) == 0 || d[0] != '{' {
		return false
	}
	dec := json.NewDecoder(bytes.NewReader(d))
	dec.DisallowUnknownFields()
	if dec.Decode(v) != nil {
		return false
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return false // trailing data
	}
	t := reflect.TypeOf(v)
	if t.Kind() != reflect.Pointer {
		return false
	}
	tok := json.NewDecoder(bytes.NewReader(d))
	tok.UseNumber()
	return exactValue(tok, t.Elem())
}

// exactValue reads one value from dec and checks it against type t.
func exactValue(dec *json.Decoder, t reflect.Type) bool {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	tk, err := dec.Token()
	if err != nil || tk == nil {
		return false // nulls leave fields as they were; YAML zeroes them
	}
	delim, isDelim := tk.(json.Delim)
	if !isDelim {
		return true
	}
	switch delim {
	case '[':
		elem := t
		if t.Kind() == reflect.Slice || t.Kind() == reflect.Array {
			elem = t.Elem()
		}
		for dec.More() {
			if !exactValue(dec, elem) {
				return false
			}
		}
		_, err = dec.Token()
		return err == nil
	case '{':
		var fields map[string]reflect.Type
		if t.Kind() == reflect.Struct && !implementsUnmarshaler(t) {
			fields = jsonFields(t)
		}
		seen := map[string]bool{}
		for dec.More() {
			k, err := dec.Token()
			key, ok := k.(string)
			if err != nil || !ok || seen[key] {
				return false
			}
			seen[key] = true
			ft := t
			switch {
			case fields != nil:
				if ft, ok = fields[key]; !ok {
					return false // a field by another case, or unknown
				}
			case t.Kind() == reflect.Map:
				ft = t.Elem()
			}
			if !exactValue(dec, ft) {
				return false
			}
		}
		_, err = dec.Token()
		return err == nil
	}
	return false
}

var unmarshalerType = reflect.TypeFor[json.Unmarshaler]()

func implementsUnmarshaler(t reflect.Type) bool {
	return t.Implements(unmarshalerType) || reflect.PointerTo(t).Implements(unmarshalerType)
}

var fieldCache sync.Map // reflect.Type → map[string]reflect.Type

// jsonFields maps a struct's JSON keys to their types, embedded structs
// flattened, as encoding/json sees them.
func jsonFields(t reflect.Type) map[string]reflect.Type {
	if m, ok := fieldCache.Load(t); ok {
		return m.(map[string]reflect.Type)
	}
	m := map[string]reflect.Type{}
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() && !f.Anonymous {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" {
			continue
		}
		if f.Anonymous && name == "" {
			ft := f.Type
			if ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				for k, v := range jsonFields(ft) {
					m[k] = v
				}
				continue
			}
		}
		if name == "" {
			name = f.Name
		}
		m[name] = f.Type
	}
	fieldCache.Store(t, m)
	return m
}
