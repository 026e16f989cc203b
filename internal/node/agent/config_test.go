package agent

import (
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestConfigValidate(t *testing.T) {
	ok := Config{Server: "https://127.0.0.1:7070", DataDir: "/tmp/x", Name: "n1"}
	tests := []struct {
		name string
		edit func(*Config)
		want string // "" for valid
	}{
		{"valid", func(*Config) {}, ""},
		{"no name is the host name", func(c *Config) { c.Name = "" }, ""},
		{"no server", func(c *Config) { c.Server = "" }, "--server is required"},
		{"server not a URL", func(c *Config) { c.Server = "::nope" }, "--server"},
		{"no data dir", func(c *Config) { c.DataDir = "" }, "--data-dir is required"},
		{"bad name", func(c *Config) { c.Name = "a b" }, `--name "a b"`},
		{"retention too short", func(c *Config) { c.TaskRetention = time.Second }, "--task-retention 1s"},
		{"negative retention", func(c *Config) { c.TaskRetention = -time.Hour }, "--task-retention -1h0m0s"},
		{"retention 0 keeps", func(c *Config) { c.TaskRetention = 0 }, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := ok
			tc.edit(&c)
			err := c.Validate()
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("Validate() = %v, want nil", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("Validate() = %v, want an error naming %q", err, tc.want)
			}
		})
	}
}

// TestRelativeDataDirMadeAbsolute: a relative --data-dir is taken from
// the agent's working directory once, so the supervisor and the ranks,
// which run elsewhere, find the same files.
func TestRelativeDataDirMadeAbsolute(t *testing.T) {
	t.Chdir(t.TempDir())
	a, err := New(Config{Server: "https://127.0.0.1:7070", DataDir: "agent-data", Name: "n1"})
	if err != nil {
		t.Fatal(err)
	}
	want, _ := filepath.Abs("agent-data")
	if a.cfg.DataDir != want {
		t.Errorf("data dir %q, want %q", a.cfg.DataDir, want)
	}
}
