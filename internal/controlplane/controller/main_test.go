package controller

import (
	"testing"

	"github.com/gangway/gangway/internal/base/testenv"
	"go.uber.org/goleak"
)

// TestMain fails the package's tests if any goroutine outlives them: the
// controller's Run, readiness probes and retention must all stop with
// their context.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, testenv.EtcdLeaks()...)
}
