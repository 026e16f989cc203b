package client

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestDefaultConfigPath(t *testing.T) {
	home := t.TempDir()
	env := func(kv ...string) func(string) string {
		m := map[string]string{}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return func(k string) string { return m[k] }
	}
	want := filepath.Join(home, ".config", "gangway", "config.yaml")
	if got := DefaultConfigPath(env("HOME", home)); got != want {
		t.Errorf("HOME: %q; want %q", got, want)
	}
	if got := DefaultConfigPath(env("HOME", home, "XDG_CONFIG_HOME", "/x")); got != "/x/gangway/config.yaml" {
		t.Errorf("XDG_CONFIG_HOME: %q", got)
	}
	if got := DefaultConfigPath(env("HOME", home, "GANGWAY_CONFIG", "/c.yaml", "XDG_CONFIG_HOME", "/x")); got != "/c.yaml" {
		t.Errorf("GANGWAY_CONFIG: %q", got)
	}
	if got := DefaultConfigPath(env()); got != "" {
		t.Errorf("nothing set: %q", got)
	}
	// An earlier version's config is used until a config.yaml is beside it.
	legacy := filepath.Join(home, ".config", "gangway", "config")
	os.MkdirAll(filepath.Dir(legacy), 0o700)
	os.WriteFile(legacy, nil, 0o600)
	if got := DefaultConfigPath(env("HOME", home)); got != legacy {
		t.Errorf("with only the old config: %q; want %q", got, legacy)
	}
	os.WriteFile(want, nil, 0o600)
	if got := DefaultConfigPath(env("HOME", home)); got != want {
		t.Errorf("with both: %q; want %q", got, want)
	}
}

func TestLoadConfigFileRefuses(t *testing.T) {
	for _, tc := range []struct{ name, yaml, want string }{
		{"unknown key", "contexts:\n- name: a\n  server: https://a\n  sever: x\n", "line 4"},
		{"no server", "contexts:\n- name: a\n", `context "a": no server`},
		{"not a URL", "contexts:\n- name: a\n  server: a:7070\n", "want an http:// or https:// URL"},
		{"twice", "contexts:\n- name: a\n  server: https://a\n- name: a\n  server: https://b\n", `a second context named "a"`},
		{"both tokens", "contexts:\n- name: a\n  server: https://a\n  token: t\n  token-file: /t\n", "token and token-file"},
		{"current unknown", "current-context: b\ncontexts:\n- name: a\n  server: https://a\n", `current-context "b"`},
		{"no name", "contexts:\n- server: https://a\n", "contexts[0]: no name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "config.yaml")
			os.WriteFile(p, []byte(tc.yaml), 0o600)
			_, err := LoadConfigFile(p)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("LoadConfigFile: %v; want an error containing %q", err, tc.want)
			}
		})
	}
}

func TestConfigForReadsTokenFile(t *testing.T) {
	dir := t.TempDir()
	tok := filepath.Join(dir, "token")
	os.WriteFile(tok, []byte("  s3cret\n"), 0o600)
	p := filepath.Join(dir, "config.yaml")
	if err := SaveContext(p, Context{Name: "a", Server: "https://a", TokenFile: tok}, true); err != nil {
		t.Fatal(err)
	}
	c, err := ConfigFor(p, Resolve{})
	if err != nil || c.Token != "s3cret" || c.Server != "https://a" {
		t.Fatalf("ConfigFor: %+v %v", c, err)
	}
	if c, _ := ConfigFor(p, Resolve{Token: "flag"}); c.Token != "flag" {
		t.Errorf("a flag's token does not win: %q", c.Token)
	}
	os.Remove(tok)
	if _, err := ConfigFor(p, Resolve{}); err == nil || !strings.Contains(err.Error(), "token-file") {
		t.Errorf("ConfigFor with its token file gone: %v", err)
	}
}
