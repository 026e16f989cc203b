package policy

import (
	"math"

	"github.com/gangway/gangway/internal/scheduler"
)

func init() {
	Register("fifo", func() Policy { return submitOrder{name: "fifo", mode: scheduler.Strict} })
	Register("backfill", func() Policy { return submitOrder{name: "backfill", mode: scheduler.Backfill} })
	Register("greedy", func() Policy { return submitOrder{name: "greedy", mode: scheduler.Greedy} })
}

// submitOrder runs jobs in submit order and never preempts: fifo stops at
// the first gang that does not fit, backfill lets later gangs pass it only
// where they cannot delay it (by their time limits), greedy lets any gang
// that fits pass.
type submitOrder struct {
	name string
	mode scheduler.Mode
}

func (p submitOrder) Name() string                  { return p.name }
func (p submitOrder) Mode() scheduler.Mode          { return p.mode }
func (submitOrder) Key(j *Job, _ float64) Key       { return Key{A: j.Submit} }
func (submitOrder) NextRekey(*Job, float64) float64 { return math.Inf(1) }
func (submitOrder) Rekey(*Job, float64)             {}
func (submitOrder) Preempts() bool                  { return false }
func (submitOrder) Levels() int                     { return 0 }
func (submitOrder) Priority(*Job, float64) int      { return 0 }
func (submitOrder) Protected(*Job, float64) bool    { return false }
func (submitOrder) Starving(*Job, float64) bool     { return false }

var _ Policy = submitOrder{}
