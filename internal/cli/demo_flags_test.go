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
		{"unknown driver", []string{"demo", "--driver", "podman"}, `--driver "podman": want exec or docker`},
		{"docker beyond node-loss", []string{"demo", "--driver", "docker", "--scenario", "gpu-fault"}, `--driver docker runs the node-loss scenario only`},
		{"a user command's unknown format", []string{"describe", "job", "1", "-o", "xml"}, `invalid value "xml" for flag -o: want table, json or yaml`},
		{"a listing's unknown format", []string{"get", "jobs", "-o", "xml"}, `invalid value "xml" for flag -o: want table, wide, json, yaml or csv`},
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

// TestDemoDockerWithoutEngine: without a Docker engine to reach, the
// docker demo fails at once and says what to start.
func TestDemoDockerWithoutEngine(t *testing.T) {
	t.Setenv("DOCKER_HOST", "unix://"+t.TempDir()+"/no-docker.sock")
	var stdout, stderr bytes.Buffer
	code := Main(context.Background(), []string{"demo", "--driver", "docker", "-o", "json"}, &Env{Stdout: &stdout, Stderr: &stderr, Getenv: func(string) string { return "" }})
	want := "--driver docker needs a Docker engine on this machine"
	if code != 1 || !strings.Contains(stderr.String(), want) || !strings.Contains(stderr.String(), "dockerd") {
		t.Errorf("exit %d, stderr %q; want exit 1 and %q, naming dockerd", code, stderr.String(), want)
	}
}
