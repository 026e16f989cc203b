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

func TestAppendEvent(t *testing.T) {
	for _, tc := range []struct{ name, data, want string }{
		{"object", `{"id":"cmpl-1"}`, "data: {\"id\":\"cmpl-1\"}\n\n"},
		{"appends", `[]`, "data: []\n\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			prefix := []byte("before\n\n")
			got := AppendEvent(prefix, []byte(tc.data))
			if string(got) != string(prefix)+tc.want {
				t.Errorf("AppendEvent = %q, want %q", got, string(prefix)+tc.want)
			}
		})
	}
	if DoneEvent != "data: [DONE]\n\n" {
		t.Errorf("DoneEvent = %q", DoneEvent)
	}
}
