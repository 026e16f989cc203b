package planner

import (
	"os"
	"path/filepath"
	"testing"
)

// devVectors loads shared/data/planner/dev-vectors.json, found by walking up
// from the working directory to a directory with a shared/data sibling of
// the repository (or inside it). Tests skip when it is absent.
func devVectors(t testing.TB) []Vector {
	t.Helper()
	path := findSharedData(t, filepath.Join("planner", "dev-vectors.json"))
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read %s: %v", path, err)
	}
	vs, err := ParseVectors(data)
	if err != nil {
		t.Fatalf("parse %s: %v", path, err)
	}
	return vs
}

func findSharedData(t testing.TB, rel string) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		for _, cand := range []string{
			filepath.Join(dir, "shared", "data", rel),
			filepath.Join(dir, "..", "shared", "data", rel),
		} {
			if _, err := os.Stat(cand); err == nil {
				return cand
			}
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Skipf("shared/data/%s not found above the working directory (expected at /work/shared/data/%s)", rel, rel)
		}
		dir = parent
	}
}
