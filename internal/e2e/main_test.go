package e2e

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/gangway/gangway/internal/base/testenv"
	"go.uber.org/goleak"
)

// gangwayBin is the gangway binary TestMain built, or "" with buildErr
// saying why not.
var (
	gangwayBin string
	buildErr   error
)

func TestMain(m *testing.M) {
	testenv.QuickRaceExit()
	flag.Parse()
	code := runTests(m)
	if err := goleak.Find(); err != nil {
		fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
		if code == 0 {
			code = 1
		}
	}
	os.Exit(code)
}

func runTests(m *testing.M) int {
	if skipReason() != "" {
		return m.Run()
	}
	if bin := os.Getenv("GANGWAY_E2E_BIN"); bin != "" {
		// A binary built elsewhere (CI's, or one from a clean checkout).
		if _, err := os.Stat(bin); err != nil {
			buildErr = fmt.Errorf("GANGWAY_E2E_BIN: %w", err)
		}
		gangwayBin = bin
		return m.Run()
	}
	dir, err := os.MkdirTemp("", "gangway-e2e-bin-")
	if err != nil {
		buildErr = err
		return m.Run()
	}
	defer os.RemoveAll(dir)
	gangwayBin, buildErr = buildGangway(dir)
	return m.Run()
}

// buildGangway builds cmd/gangway into dir, once for the whole package: the
// server, the agents, their rank supervisors, the CLI and the Go trainer are all
// this binary. GANGWAY_E2E_BIN names a prebuilt one instead.
func buildGangway(dir string) (string, error) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		return "", fmt.Errorf("find the go tool to build gangway: %w", err)
	}
	bin := filepath.Join(dir, "gangway")
	start := time.Now()
	cmd := exec.Command(goTool, "build", "-o", bin, "github.com/gangway/gangway/cmd/gangway")
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go build cmd/gangway: %w\n%s", err, out)
	}
	fmt.Fprintf(os.Stderr, "e2e: built %s in %.1fs\n", bin, time.Since(start).Seconds())
	return bin, nil
}

// skipReason says why this machine cannot run the multi-host tests, or "".
func skipReason() string {
	if testing.Short() {
		return "multi-host tests start real processes in network namespaces; skipped with -short"
	}
	if os.Geteuid() != 0 {
		return "multi-host tests need root to create network namespaces (run the tests as root)"
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return "multi-host tests need iproute2's ip on PATH (apt-get install iproute2)"
	}
	return ""
}

// needCluster skips t where the multi-host tests cannot run, and fails it
// when the gangway binary did not build.
func needCluster(t *testing.T) {
	t.Helper()
	if r := skipReason(); r != "" {
		t.Skip(r)
	}
	if buildErr != nil {
		t.Fatal(buildErr)
	}
}
