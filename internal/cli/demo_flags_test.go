package cli

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// TestDemoRejectsBadFlags: a mistyped scenario or format is refused before
// anything starts (or any server is asked), with the choices named.
func TestDemoRejectsBadFlags(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"unknown scenario", []string{"demo", "--scenario", "meteor"}, `--scenario "meteor": want one of node-loss, server-restart`},
		{"unknown format", []string{"demo", "-o", "xml"}, `invalid value "xml" for flag -o: want table, json or yaml`},
		{"a user command's unknown format", []string{"describe", "job", "1", "-o", "xml"}, `invalid value "xml" for flag -o: want table, json or yaml`},
		{"a listing's unknown format", []string{"get", "jobs", "-o", "xml"}, `invalid value "xml" for flag -o: want table, json, yaml or csv`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := Main(context.Background(), tc.args, &Env{Stdout: &stdout, Stderr: &stderr, Getenv: func(string) string { return "" }})
			if code != 2 || !strings.Contains(stderr.String(), tc.want) || stdout.Len() != 0 {
				t.Errorf("exit %d, stdout %q, stderr %q; want exit 2 and %q", code, stdout.String(), stderr.String(), tc.want)
			}
		})
	}
}
