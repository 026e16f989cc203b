package planner

import "github.com/gangway/gangway/internal/hardware"

// Model is the hardware catalog's transformer shape.
type Model = hardware.Model

// MLPKind is the feed-forward block's shape.
type MLPKind = hardware.MLPKind

// The feed-forward blocks the planner knows.
const (
	MLPGELU   = hardware.MLPGELU
	MLPSwiGLU = hardware.MLPSwiGLU
)

// ErrInvalidModel is wrapped by Model.Validate's errors.
var ErrInvalidModel = hardware.ErrInvalidModel
