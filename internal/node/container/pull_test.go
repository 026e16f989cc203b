package container

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestFollowPull: the pull's progress stream, in the engine's form, is
// summed over its layers into lines, and an error in it is the pull's.
func TestFollowPull(t *testing.T) {
	tests := []struct {
		name    string
		stream  string
		want    []string
		wantErr string
	}{{
		name: "two layers, one already there",
		stream: `{"status":"Pulling from x/y","id":"1"}
{"status":"Already exists","progressDetail":{},"id":"aaa"}
{"status":"Pulling fs layer","progressDetail":{},"id":"bbb"}
{"status":"Downloading","progressDetail":{"current":1000000,"total":4000000},"progress":"[=>   ]","id":"bbb"}
{"status":"Download complete","progressDetail":{},"id":"bbb"}
{"status":"Pull complete","progressDetail":{},"id":"bbb"}
{"status":"Digest: sha256:00"}
{"status":"Status: Downloaded newer image for x/y:1"}
`,
		want: []string{"p: 1 of 1 layers done", "p: 1 of 2 layers done", "p: 1 of 2 layers done, 1MB of 4MB downloaded",
			"p: 1 of 2 layers done, 4MB of 4MB downloaded", "p: 2 of 2 layers done, 4MB of 4MB downloaded"},
	}, {
		name: "an error in the stream",
		stream: `{"status":"Pulling fs layer","progressDetail":{},"id":"bbb"}
{"errorDetail":{"message":"unauthorized: authentication required"},"error":"unauthorized: authentication required"}
`,
		want:    []string{"p: 0 of 1 layers done"},
		wantErr: "unauthorized: authentication required",
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []string
			err := followPull(strings.NewReader(tt.stream), "p: ", 0, func(s string) {
				if len(got) == 0 || got[len(got)-1] != s {
					got = append(got, s)
				}
			})
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("lines (-want +got):\n%s", diff)
			}
			if (err == nil) != (tt.wantErr == "") || err != nil && err.Error() != tt.wantErr {
				t.Errorf("err = %v, want %q", err, tt.wantErr)
			}
		})
	}
}
