// Package fastjson decodes JSON that gangway's own code encoded with
// encoding/json: store values, the agent↔server and agent↔supervisor
// messages. Those decodes are most of the JSON work per job in every
// process. github.com/segmentio/encoding/json decodes them 2–3× faster
// than encoding/json (BenchmarkUnmarshal), with encoding/json's rules
// (keys matched without regard to case, invalid UTF-8 replaced, the same
// syntax). It is a decoder only here: encoding stays with encoding/json,
// which honours `omitzero`.
//
// Whatever the fast decoder does not decode cleanly (an error or a panic)
// is decoded again by encoding/json, so every error is encoding/json's,
// and FuzzUnmarshal holds the two to the same values. User-facing bodies
// that need errors with field names and lines (job specs) do not come
// through here.
//
// The fast decoder starts every slice with room for 10 elements, so what
// is kept for long (the store cache's jobs) is decoded by encoding/json.
//
// It imports the standard library and github.com/segmentio/encoding/json.
package fastjson

import (
	"encoding/json"
	"io"
	"reflect"

	segjson "github.com/segmentio/encoding/json"
)

// Unmarshal decodes data into v (a non-nil pointer) as json.Unmarshal
// would. The fast decoder runs only when *v is its zero value, so that a
// failed attempt is undone by zeroing it again; a value to merge into goes
// to encoding/json directly.
func Unmarshal(data []byte, v any) (err error) {
	rv := reflect.ValueOf(v)
	if rv.Kind() != reflect.Pointer || rv.IsNil() || !rv.Elem().IsZero() {
		return json.Unmarshal(data, v)
	}
	defer func() {
		if recover() != nil {
			err = slow(data, v)
		}
	}()
	if segjson.Unmarshal(data, v) == nil {
		return nil
	}
	return slow(data, v)
}

// slow undoes what the fast decoder wrote to v (zero before it started)
// and decodes data with encoding/json.
func slow(data []byte, v any) error {
	reflect.ValueOf(v).Elem().SetZero()
	return json.Unmarshal(data, v)
}

// Decode reads all of r and decodes it into v: for a response body that
// holds one document.
func Decode(r io.Reader, v any) error {
	b, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	return Unmarshal(b, v)
}
