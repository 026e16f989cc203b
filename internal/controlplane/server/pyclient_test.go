package server

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// TestPythonClient runs the Python client's tests (clients/python, with
// Debian's python3 and requests) against a live in-process server, which
// they find by GANGWAY_SERVER, GANGWAY_TOKEN and GANGWAY_CA_FILE.
func TestPythonClient(t *testing.T) {
	const python = "/usr/bin/python3"
	if _, err := os.Stat(python); err != nil {
		t.Skipf("%s is missing (apt-get install python3 python3-requests): the Python client is not tested", python)
	}
	if out, err := exec.Command(python, "-c", "import requests").CombinedOutput(); err != nil {
		t.Skipf("%s has no requests (apt-get install python3-requests): the Python client is not tested: %v: %s", python, err, out)
	}
	dir, err := filepath.Abs(filepath.Join("..", "..", "..", "clients", "python"))
	if err != nil {
		t.Fatal(err)
	}
	e := startAgentEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, python, "-m", "unittest", "discover", "-s", "tests", "-v")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(),
		"GANGWAY_SERVER="+e.url,
		"GANGWAY_TOKEN="+e.adm.Token,
		"GANGWAY_CA_FILE="+e.adm.CAFile,
		"PYTHONDONTWRITEBYTECODE=1",
	)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("python3 -m unittest in %s: %v\n%s", dir, err, out)
	}
	t.Logf("%s", out)
}
