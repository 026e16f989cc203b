package gateway

import (
	"os/exec"
	"strings"
	"testing"
)

// TestDoesNotLinkTheSimulator holds the package doc's import sentence to
// `go list`: the production gateway speaks the wire format of
// internal/inference/openai and never links the engine simulator.
func TestDoesNotLinkTheSimulator(t *testing.T) {
	gotool, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("no go tool to list dependencies with: %v", err)
	}
	out, err := exec.Command(gotool, "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	deps := strings.Fields(string(out))
	for _, tc := range []struct {
		name, pkg string
		want      bool
	}{
		{"not the simulator", "github.com/gangway/gangway/internal/inference/enginesim", false},
		{"the wire format", "github.com/gangway/gangway/internal/inference/openai", true},
		{"the hardware catalog", "github.com/gangway/gangway/internal/hardware", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got bool
			for _, d := range deps {
				got = got || d == tc.pkg
			}
			if got != tc.want {
				t.Errorf("gateway links %s: %v, want %v", tc.pkg, got, tc.want)
			}
		})
	}
}
