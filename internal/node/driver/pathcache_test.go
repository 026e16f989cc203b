package driver

import (
	"os"
	"path/filepath"
	"testing"
)

// A command found through an absolute $PATH is remembered for every
// working directory (each rank has its own); through a relative entry it
// is looked up again in each.
func TestPathCacheSharesLookupsAcrossWorkingDirs(t *testing.T) {
	bin := t.TempDir()
	exe := filepath.Join(bin, "tool")
	if err := os.WriteFile(exe, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	var c pathCache
	env := []string{"PATH=" + bin}
	if got, err := c.look("tool", env, t.TempDir()); err != nil || got != exe {
		t.Fatalf("first look: %q, %v; want %s", got, err, exe)
	}
	// Gone now: only the remembered answer can still name it.
	if err := os.Remove(exe); err != nil {
		t.Fatal(err)
	}
	if got, err := c.look("tool", env, t.TempDir()); err != nil || got != exe {
		t.Errorf("from another working directory: %q, %v; want the remembered %s", got, err, exe)
	}

	a, b := t.TempDir(), t.TempDir()
	if err := os.Mkdir(filepath.Join(a, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(a, "bin", "tool"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	rel := []string{"PATH=bin"}
	if got, err := c.look("tool", rel, a); err != nil || got != filepath.Join(a, "bin", "tool") {
		t.Fatalf("relative PATH from %s: %q, %v", a, got, err)
	}
	if got, err := c.look("tool", rel, b); err == nil {
		t.Errorf("relative PATH from %s, which has no bin/tool: found %q", b, got)
	}
}

func TestRelativeLookup(t *testing.T) {
	for _, tc := range []struct {
		file, path string
		want       bool
	}{
		{"true", "/usr/bin:/bin", false},
		{"true", "/usr/bin::/bin", true}, // an empty entry is "."
		{"true", "bin:/usr/bin", true},
		{"./run.sh", "/usr/bin", true},
		{"/usr/bin/true", "bin", false},
		{"scripts/run.sh", "/usr/bin", true},
	} {
		if got := relativeLookup(tc.file, tc.path); got != tc.want {
			t.Errorf("relativeLookup(%q, %q) = %v, want %v", tc.file, tc.path, got, tc.want)
		}
	}
}
