package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gangway/gangway/internal/api"
)

// TestSubmitCommandRunsLikeSbatch: a command submitted after -- starts in
// the submitter's directory, finds programs through the submitter's PATH,
// and gets --env's variables, so that "gangway submit -- python3
// train.py" runs train.py where the user is.
func TestSubmitCommandRunsLikeSbatch(t *testing.T) {
	cl := startCluster(t, 1, 8)
	proj, bin := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(proj, "train.sh"), []byte("echo cwd=$(pwd); mytool; echo lr=$LR\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bin, "mytool"), []byte("#!/bin/sh\necho found on the submitter\\'s PATH\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	var o, e bytes.Buffer
	env := &Env{Stdout: &o, Stderr: &e, Getenv: func(k string) string {
		switch k {
		case "GANGWAY_CONFIG":
			return cl.config
		case "PATH":
			return bin + ":" + os.Getenv("PATH")
		}
		return ""
	}, Getwd: func() (string, error) { return proj, nil }}
	if code := Main(context.Background(), []string{"submit", "--ranks", "1", "--env", "LR=0.1", "-o", "json", "--", "sh", "train.sh"}, env); code != 0 {
		t.Fatalf("submit: %d %s", code, e.String())
	}
	var j api.Job
	if err := json.Unmarshal(o.Bytes(), &j); err != nil {
		t.Fatal(err)
	}
	if j.Spec.WorkingDir != proj {
		t.Errorf("workingDir %q; want the submitter's %q", j.Spec.WorkingDir, proj)
	}
	cl.waitPhase(j.ID, api.JobSucceeded, 20*time.Second)
	out, errOut, _ := cl.run("logs", j.ID)
	if want := "cwd=" + proj + "\nfound on the submitter's PATH\nlr=0.1\n"; out != want {
		t.Errorf("rank printed %q (%s); want %q", out, errOut, want)
	}
}

// TestSubmitFlagErrors: a bad value of submit's flags is refused before
// anything is sent, naming the flag and what was wrong.
func TestSubmitFlagErrors(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--env", "LR"}, `invalid value "LR" for flag -env: want NAME=VALUE`},
		{[]string{"--launch", "mpirun"}, `--launch "mpirun": want per-rank, per-node, torchrun or deepspeed`},
		{[]string{"--export", "ALL"}, "--export ALL: name the variables"},
		{[]string{"--export", "LR=1"}, `--export "LR=1": want names of variables`},
		{[]string{"--max-restarts", "-1"}, `invalid value "-1" for flag -max-restarts: want a whole number, 0 or more`},
	} {
		var o, e bytes.Buffer
		env := &Env{Stdout: &o, Stderr: &e, Getenv: func(string) string { return "" }}
		args := append(append([]string{"submit", "--server", "https://127.0.0.1:1", "--ranks", "1"}, tt.args...), "--", "true")
		if code := Main(context.Background(), args, env); code != 2 || !strings.Contains(e.String(), tt.want) {
			t.Errorf("%v: code %d, stderr %q; want 2 and %q", tt.args, code, e.String(), tt.want)
		}
	}
	// A job file carries its own settings.
	var o, e bytes.Buffer
	env := &Env{Stdout: &o, Stderr: &e, Getenv: func(string) string { return "" }}
	if code := Main(context.Background(), []string{"submit", "--workdir", "/w", "job.yaml"}, env); code != 2 || !strings.Contains(e.String(), "--workdir applies to a command after --") {
		t.Errorf("a job file with --workdir: code %d, %q", code, e.String())
	}
}

// TestHelpShowsOneDefault: each flag of submit -h and queue set -h states
// one default.
func TestHelpShowsOneDefault(t *testing.T) {
	for _, args := range [][]string{{"submit", "-h"}, {"queue", "set", "-h"}} {
		var o, e bytes.Buffer
		Main(context.Background(), args, &Env{Stdout: &o, Stderr: &e, Getenv: func(string) string { return "" }})
		help := e.String() + o.String()
		for _, want := range []string{"(default 3; 0: never restart)", "(default unbounded)"} {
			if args[0] == "submit" == strings.Contains(want, "restart") && !strings.Contains(help, want) {
				t.Errorf("%v does not say %q:\n%s", args, want, help)
			}
		}
		for _, line := range strings.Split(help, "\n") {
			if strings.Count(line, "(default") > 1 {
				t.Errorf("%v: two defaults in %q", args, line)
			}
		}
	}
}
