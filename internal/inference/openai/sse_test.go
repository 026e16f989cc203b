package openai

import (
	"bytes"
	"encoding/json"
	"testing"
)

func FuzzAppendJSONString(f *testing.F) {
	f.Add("plain")
	f.Add("<&>\"\\\b\f\n\r\t\x01\x7f\u2028\u2029\xff\xc3")
	f.Fuzz(func(t *testing.T, s string) {
		want, _ := json.Marshal(s)
		if got := AppendJSONString(nil, s); !bytes.Equal(got, want) {
			t.Fatalf("%q: got %s, encoding/json %s", s, got, want)
		}
	})
}
