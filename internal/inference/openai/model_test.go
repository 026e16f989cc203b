package openai

import (
	"bytes"
	"mime/multipart"
	"strings"
	"testing"
)

func TestParseModel(t *testing.T) {
	var form bytes.Buffer
	mw := multipart.NewWriter(&form)
	fw, _ := mw.CreateFormFile("file", "a.wav")
	fw.Write(bytes.Repeat([]byte{0xff}, 1000))
	mw.WriteField("model", "whisper-large-v3")
	mw.Close()
	tests := []struct {
		name, ctype, body, model, err string
		stream                        bool
	}{
		{"embeddings", "application/json", `{"model":"e5","input":"x"}`, "e5", "", false},
		{"responses streamed", "application/json", `{"model":"m","input":"hi","stream":true}`, "m", "", true},
		{"no content type", "", `{"model":"m"}`, "m", "", false},
		{"no model", "application/json", `{"input":"x"}`, "", `field "model": required`, false},
		{"null model", "application/json", `{"model":null}`, "", `field "model": required`, false},
		{"bad json", "application/json", `{"model":`, "", "request body", false},
		{"model not a string", "application/json", `{"model":3}`, "", "request body", false},
		{"audio form", mw.FormDataContentType(), form.String(), "whisper-large-v3", "", false},
		{"form without boundary", "multipart/form-data", form.String(), "", "boundary", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := ParseModel(tc.ctype, []byte(tc.body))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err %v, want one containing %q", err, tc.err)
				}
				return
			}
			if err != nil || p.Model != tc.model || p.Stream != tc.stream || p.N != 1 || p.Prompt != nil {
				t.Fatalf("%+v, %v; want model %q stream %v", p, err, tc.model, tc.stream)
			}
		})
	}
}

func FuzzParseModel(f *testing.F) {
	f.Add("application/json", `{"model":"m","stream":true}`)
	f.Add("multipart/form-data; boundary=x", "--x\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\nm\r\n--x--\r\n")
	f.Fuzz(func(t *testing.T, ctype, body string) {
		p, err := ParseModel(ctype, []byte(body))
		if err == nil && p.Model == "" {
			t.Fatalf("accepted %q (%s) without a model", body, ctype)
		}
	})
}
