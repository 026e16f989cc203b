package cli

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// gangway config as kubectl config: set-context makes a context (the
// first becomes current) and changes only what it is given; every client
// command then uses the current context, --context another, and the
// flags and $GANGWAY_* variables still win over it; the token may live in
// a file of its own; the config is decoded strictly, a wrong key named
// with its line; it lives where $GANGWAY_CONFIG or $XDG_CONFIG_HOME say.
func TestConfigContexts(t *testing.T) {
	cl := startCluster(t, 1, 1)
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "gangway.yaml")
	tokenFile := filepath.Join(dir, "token")
	os.WriteFile(tokenFile, []byte(cl.admin.Token+"\n"), 0o600)
	env := map[string]string{"GANGWAY_CONFIG": cfgPath}
	run := func(args ...string) (string, string, int) {
		var o, e bytes.Buffer
		code := Main(context.Background(), args, &Env{Stdout: &o, Stderr: &e, Getenv: func(k string) string { return env[k] }})
		return o.String(), e.String(), code
	}
	if _, errOut, code := run("config", "current-context"); code != 1 || !strings.Contains(errOut, "current-context is not set") {
		t.Errorf("current-context of no config: %d %q", code, errOut)
	}
	if out, errOut, code := run("config", "set-context", "prod", "--server", cl.admin.Server, "--token-file", tokenFile, "--ca", cl.admin.CAFile); code != 0 || !strings.Contains(out, `Context "prod" created`) {
		t.Fatalf("set-context prod: %d %q %q", code, out, errOut)
	}
	if out, _, _ := run("config", "current-context"); out != "prod\n" {
		t.Errorf("current-context after the first set-context: %q", out)
	}
	if out, errOut, code := run("whoami"); code != 0 || !strings.Contains(out, "admin") {
		t.Fatalf("whoami through context prod (token from its file): %d %q %q", code, out, errOut)
	}
	if b, _ := os.ReadFile(cfgPath); strings.Contains(string(b), cl.admin.Token) {
		t.Errorf("the config holds the token its context reads from a file:\n%s", b)
	}
	// A second context, of a server that is not there, made current.
	run("config", "set-context", "gone", "--server", "https://127.0.0.1:1", "--token-file", tokenFile, "--ca", cl.admin.CAFile)
	if out, errOut, code := run("config", "use-context", "gone"); code != 0 || !strings.Contains(out, `Switched to context "gone"`) {
		t.Fatalf("use-context gone: %d %q %q", code, out, errOut)
	}
	out, _, _ := run("config", "get-contexts")
	if !strings.Contains(out, "*        gone") || !strings.Contains(out, "prod") || !strings.Contains(out, tokenFile) {
		t.Errorf("get-contexts:\n%s", out)
	}
	if _, _, code := run("get", "jobs"); code == 0 {
		t.Errorf("get jobs through context gone (no server) succeeded")
	}
	if _, errOut, code := run("get", "jobs", "--context", "prod"); code != 0 {
		t.Errorf("get jobs --context prod: %d %q", code, errOut)
	}
	if _, errOut, code := run("get", "jobs", "--server", cl.admin.Server); code != 0 {
		t.Errorf("get jobs --server (the flag wins over the context's): %d %q", code, errOut)
	}
	env["GANGWAY_SERVER"] = cl.admin.Server
	if _, errOut, code := run("get", "jobs"); code != 0 {
		t.Errorf("get jobs with $GANGWAY_SERVER (it wins over the context's): %d %q", code, errOut)
	}
	delete(env, "GANGWAY_SERVER")
	// set-context of a context that exists changes what it is given.
	run("config", "set-context", "gone", "--server", cl.admin.Server)
	if _, errOut, code := run("get", "jobs"); code != 0 {
		t.Errorf("get jobs after set-context gone --server: %d %q", code, errOut)
	}
	if _, errOut, code := run("config", "use-context", "nope"); code != 1 || !strings.Contains(errOut, `no context "nope"`) || !strings.Contains(errOut, "prod, gone") {
		t.Errorf("use-context nope: %d %q", code, errOut)
	}
	if _, errOut, code := run("config", "set-context", "new"); code != 2 || !strings.Contains(errOut, "give its --server") {
		t.Errorf("set-context of a new context without --server: %d %q", code, errOut)
	}
	if _, errOut, code := run("config", "set-context", "x", "--server", "https://a", "--token-file", filepath.Join(dir, "none")); code != 2 || !strings.Contains(errOut, "--token-file") {
		t.Errorf("set-context --token-file of no file: %d %q", code, errOut)
	}

	// Strict: a misspelt key is named, with its line.
	os.WriteFile(cfgPath, []byte("current-context: prod\ncontexts:\n- name: prod\n  server: "+cl.admin.Server+"\n  tokn: x\n"), 0o600)
	if _, errOut, code := run("get", "jobs"); code != 1 || !strings.Contains(errOut, "tokn") || !strings.Contains(errOut, "line 5") {
		t.Errorf("get jobs with a misspelt key in the config: %d %q", code, errOut)
	}

	// $XDG_CONFIG_HOME: the config is gangway/config.yaml under it.
	xdg := t.TempDir()
	env = map[string]string{"XDG_CONFIG_HOME": xdg, "HOME": t.TempDir()}
	if _, errOut, code := run("config", "set-context", "prod", "--server", cl.admin.Server, "--token-file", tokenFile, "--ca", cl.admin.CAFile); code != 0 {
		t.Fatalf("set-context under XDG_CONFIG_HOME: %d %q", code, errOut)
	}
	if _, err := os.Stat(filepath.Join(xdg, "gangway", "config.yaml")); err != nil {
		t.Errorf("set-context under XDG_CONFIG_HOME: %v", err)
	}
	if _, errOut, code := run("get", "jobs"); code != 0 {
		t.Errorf("get jobs from the XDG config: %d %q", code, errOut)
	}
}
