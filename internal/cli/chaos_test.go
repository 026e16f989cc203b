package cli

import (
	"testing"

	"github.com/gangway/gangway/examples/train-go/trainer"
	"github.com/gangway/gangway/internal/bench/chaos"
)

// TestChaosLossTolerance: the chaos harness, which may not import the
// example trainer, holds resumed runs to the trainer's own tolerance.
func TestChaosLossTolerance(t *testing.T) {
	if chaos.LossTolerance != trainer.Tolerance {
		t.Errorf("chaos.LossTolerance = %g, trainer.Tolerance = %g", chaos.LossTolerance, trainer.Tolerance)
	}
}
