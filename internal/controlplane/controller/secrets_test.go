package controller

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestReadSecret: a user's secret is read from their directory, without
// its trailing newline; names that leave the directory, links, and
// oversized files are refused.
func TestReadSecret(t *testing.T) {
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "alice"), 0o700)
	os.MkdirAll(filepath.Join(dir, "bob"), 0o700)
	os.WriteFile(filepath.Join(dir, "alice", "hf"), []byte("hf_abc\n"), 0o600)
	os.WriteFile(filepath.Join(dir, "bob", "hf"), []byte("bobs"), 0o600)
	os.WriteFile(filepath.Join(dir, "alice", "big"), make([]byte, maxSecretBytes+1), 0o600)
	os.Symlink(filepath.Join(dir, "bob", "hf"), filepath.Join(dir, "alice", "link"))
	if v, err := ReadSecret(dir, "alice", "hf"); err != nil || v != "hf_abc" {
		t.Errorf("alice's hf = %q, %v; want hf_abc", v, err)
	}
	for _, c := range []struct{ user, file, says string }{
		{"alice", "../bob/hf", "no secret"},
		{"..", "bob", "no secret"},
		{"alice", "link", "too many levels"},
		{"alice", "big", "over"},
		{"alice", "missing", "no such file"},
	} {
		if v, err := ReadSecret(dir, c.user, c.file); err == nil || !strings.Contains(err.Error(), c.says) {
			t.Errorf("ReadSecret(%q, %q) = %q, %v; want an error saying %q", c.user, c.file, v, err, c.says)
		}
	}
}
