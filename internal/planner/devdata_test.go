package planner

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/gangway/gangway/internal/base/testenv"
)

// devVectors loads shared/data/planner/dev-vectors.json, found by walking up
// from the working directory to a directory with a shared/data sibling of
// the repository (or inside it). Tests skip when it is absent.
func devVectors(t testing.TB) []Vector {
	t.Helper()
	path := testenv.SharedData(t, filepath.Join("planner", "dev-vectors.json"))
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
