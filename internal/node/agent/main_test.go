package agent

import (
	"os"
	"testing"

	"github.com/gangway/gangway/internal/node/driver"
	"go.uber.org/goleak"
)

// TestMain fails the package's tests when one leaves a goroutine behind.
// It makes the test binary the rank supervisor too, as the gangway binary
// is in production, for the tests that start ranks.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == "supervise" {
		os.Exit(driver.SuperviseMain(os.Args[2:], os.Stderr))
	}
	goleak.VerifyTestMain(m)
}
