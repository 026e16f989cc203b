package agent

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gangway/gangway/internal/api"
)

// TestStderrTail: a failed rank's exit carries the last line of its
// stderr, which says what went wrong, bounded in bytes.
func TestStderrTail(t *testing.T) {
	long := strings.Repeat("é", api.MaxStderrTailBytes)
	tests := []struct {
		name    string
		files   map[string]string
		want    string
		wantLen int // if set, instead of want: the length in bytes
	}{
		{"a Python traceback: its last line", map[string]string{"stderr.log": "Traceback (most recent call last):\n  File \"train.py\", line 3, in <module>\n    model.step()\nAttributeError: 'NoneType' object has no attribute 'step'\n"},
			"AttributeError: 'NoneType' object has no attribute 'step'", 0},
		{"blank lines and no final newline", map[string]string{"stderr.log": "boom: out of memory\n\n  \n"}, "boom: out of memory", 0},
		{"nothing written: none", map[string]string{"stderr.log": ""}, "", 0},
		{"output discarded: no file", nil, "", 0},
		{"rotated just before the end: the file before", map[string]string{"stderr.log": "", "stderr.log.1": "older\nlast words\n"}, "last words", 0},
		{"a long line is cut at a character", map[string]string{"stderr.log": long + "\n"}, "", api.MaxStderrTailBytes},
		{"a line longer than the window read is not half shown", map[string]string{"stderr.log": strings.Repeat("x", 2*tailWindow) + "\n"}, "", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			for name, body := range tt.files {
				if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			got := stderrTail(dir)
			if tt.wantLen > 0 {
				if len(got) > tt.wantLen || len(got) < tt.wantLen-4 || !strings.HasSuffix(got, "…") || !strings.HasPrefix(got, "é") {
					t.Errorf("tail of %d bytes %q...; want at most %d, cut with an ellipsis", len(got), got[:min(len(got), 20)], tt.wantLen)
				}
				return
			}
			if got != tt.want {
				t.Errorf("tail %q, want %q", got, tt.want)
			}
		})
	}
}
