package chaos

import (
	"bytes"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestParseFlags: the replicas, the kinds "all" stands for, the engines'
// default and every refusal, as `gangway chaos` sees its flags.
func TestParseFlags(t *testing.T) {
	for _, tt := range []struct {
		name string
		args []string
		// want checks a configuration that parsed; nil when refused.
		want    func(t *testing.T, c Config)
		wantErr string
	}{
		{name: "defaults: three replicas, two engines", args: nil, want: func(t *testing.T, c Config) {
			if c.Replicas != 3 || c.Engines != 2 || c.RequestBudget != 30*time.Second || c.Faults != 20 {
				t.Errorf("replicas %d, engines %d, budget %s, faults %d; want 3, 2, 30s, 20", c.Replicas, c.Engines, c.RequestBudget, c.Faults)
			}
			want := []Kind{AgentKill, AgentSupervisorKill, Partition, Freeze, GPUFault, ServerRestart, LeaderKill, EtcdMemberKill, QuorumLoss}
			if diff := cmp.Diff(want, c.Kinds); diff != "" {
				t.Errorf("kinds (-want +got):\n%s", diff)
			}
			if c.Plan.ReplicaDown != DefaultPlan.ReplicaDown || c.Plan.QuorumLoss != DefaultPlan.QuorumLoss {
				t.Errorf("plan %+v", c.Plan)
			}
		}},
		{name: "one server: its own kinds, no engines", args: []string{"--replicas", "1", "--netns=false"}, want: func(t *testing.T, c Config) {
			want := []Kind{AgentKill, AgentSupervisorKill, Freeze, GPUFault, ServerKill, ServerRestart}
			if diff := cmp.Diff(want, c.Kinds); diff != "" {
				t.Errorf("kinds (-want +got):\n%s", diff)
			}
			if c.Engines != 0 {
				t.Errorf("engines %d; want 0 with one server", c.Engines)
			}
		}},
		{name: "five replicas, engines asked for", args: []string{"--replicas", "5", "--engines", "3", "--kinds", "leader-kill", "--quorum-loss", "1s-2s"}, want: func(t *testing.T, c Config) {
			if c.Replicas != 5 || c.Engines != 3 || len(c.Kinds) != 1 || c.Plan.QuorumLoss != (Span{time.Second, 2 * time.Second}) {
				t.Errorf("%+v", c)
			}
		}},
		{name: "engines off", args: []string{"--engines", "0"}, want: func(t *testing.T, c Config) {
			if c.Engines != 0 {
				t.Errorf("engines %d", c.Engines)
			}
		}},
		{name: "two replicas", args: []string{"--replicas", "2"}, wantErr: "--replicas: 2 is not one of 1, 3, 5 (etcd needs an odd number)"},
		{name: "no replica", args: []string{"--replicas", "0"}, wantErr: "--replicas: 0 is not one of 1, 3, 5"},
		{name: "leader-kill with one server", args: []string{"--replicas", "1", "--kinds", "agent-kill,leader-kill"}, wantErr: "leader-kill faults need several replicas"},
		{name: "quorum-loss with one server", args: []string{"--replicas", "1", "--kinds", "quorum-loss"}, wantErr: "quorum-loss faults need several replicas"},
		{name: "unknown kind", args: []string{"--kinds", "leader-kill,meteor"}, wantErr: `fault kind "meteor"`},
		{name: "partition without namespaces", args: []string{"--netns=false", "--kinds", "partition"}, wantErr: "partition faults need network namespaces"},
		{name: "bad span", args: []string{"--replica-down", "9s-1s"}, wantErr: "want 0 <= MIN <= MAX"},
		{name: "too many engines", args: []string{"--agents", "2", "--engines", "9"}, wantErr: "engines 9: want 0 to 8"},
		{name: "negative budget", args: []string{"--request-budget", "-1s"}, wantErr: "request budget -1s"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var stderr bytes.Buffer
			c, _, code, ok := parseFlags(tt.args, &stderr)
			if tt.want == nil {
				if ok || code != 2 || !strings.Contains(stderr.String(), tt.wantErr) {
					t.Errorf("ok %v, code %d, stderr %q; want refused (2) with %q", ok, code, stderr.String(), tt.wantErr)
				}
				return
			}
			if !ok {
				t.Fatalf("refused (%d): %s", code, stderr.String())
			}
			tt.want(t, c)
		})
	}
}

// TestReadmeExamples: every `gangway chaos` command line in the README's
// shell examples parses and passes validation, as `gangway chaos` would
// take it before starting anything.
func TestReadmeExamples(t *testing.T) {
	b, err := os.ReadFile("../../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	inShell := false
	for line := range strings.Lines(string(b)) {
		line = strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(line, "```"):
			inShell = line == "```sh"
			continue
		case !inShell:
			continue
		}
		cmd, _, _ := strings.Cut(line, " #")
		rest, ok := strings.CutPrefix(strings.TrimPrefix(cmd, "sudo "), "gangway chaos")
		if !ok {
			continue
		}
		n++
		var stderr bytes.Buffer
		if _, _, code, ok := parseFlags(strings.Fields(rest), &stderr); !ok {
			t.Errorf("README: %q: refused (%d): %s", line, code, stderr.String())
		}
	}
	if n < 3 {
		t.Errorf("found %d `gangway chaos` examples in the README; it has three", n)
	}
}
