package policy

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/gangway/gangway/internal/api"
)

// Settings are a queue's tuning of its policy (api.QueueSpec's laneShare,
// overdueAfter, levelBase, minRun and laneTurn). A zero field keeps the policy's
// default; a policy refuses a non-zero field it does not use.
type Settings struct {
	// LaneShare is the share of the GPUs the overdue lane may hold, (0, 1].
	LaneShare float64
	// OverdueAfter is the wait, in seconds, after which a job is overdue
	// (LanePolicy) or starving (GangwayPolicy).
	OverdueAfter float64
	// LevelBase is the first level's threshold in GPU-seconds; the
	// policy's levels double from it, as many as its default has.
	LevelBase float64
	// MinRun is how long, in seconds, a started job is protected.
	MinRun float64
	// LaneTurn is how long, in seconds, a job runs in the overdue lane
	// before it leaves it for its level.
	LaneTurn float64
}

// Tunable is a policy that takes Settings.
type Tunable interface {
	Policy
	// Settings are the policy's settings now, every field it uses set.
	Settings() Settings
	// Configure applies s's non-zero fields; it returns an error naming a
	// field the policy does not use or a value out of range, and then
	// changes nothing.
	Configure(s Settings) error
}

var (
	_ Tunable = (*LanePolicy)(nil)
	_ Tunable = (*GangwayPolicy)(nil)
)

// Configure returns the named policy ("" is Default) with s applied; an
// error names an unknown policy, or a setting the policy does not use or
// a value out of range.
func Configure(name string, s Settings) (Policy, error) {
	p, err := New(name)
	if err != nil {
		return nil, err
	}
	if t, ok := p.(Tunable); ok {
		if err := t.Configure(s); err != nil {
			return nil, fmt.Errorf("policy %s: %w", p.Name(), err)
		}
		return p, nil
	}
	if used := s.given(); len(used) > 0 {
		return nil, fmt.Errorf("policy %s has no settings (got %s)", p.Name(), strings.Join(used, ", "))
	}
	return p, nil
}

// ForQueue is the policy a queue's spec configures, as the controller
// runs it and the simulator's live replays it.
func ForQueue(q *api.QueueSpec) (Policy, error) {
	return Configure(q.Policy, Settings{
		LaneShare:    q.LaneShare,
		OverdueAfter: q.OverdueAfter.D().Seconds(),
		LevelBase:    q.LevelBase.D().Seconds(),
		MinRun:       q.MinRun.D().Seconds(),
		LaneTurn:     q.LaneTurn.D().Seconds(),
	})
}

// field is one setting, under api.QueueSpec's name.
type field struct {
	name string
	v    float64
}

// fields are s's settings, under api.QueueSpec's names.
func (s Settings) fields() []field {
	return []field{{"laneShare", s.LaneShare}, {"overdueAfter", s.OverdueAfter}, {"levelBase", s.LevelBase}, {"minRun", s.MinRun}, {"laneTurn", s.LaneTurn}}
}

// given names s's non-zero fields, as api.QueueSpec spells them.
func (s Settings) given() []string {
	var out []string
	for _, f := range s.fields() {
		if f.v != 0 {
			out = append(out, f.name)
		}
	}
	return out
}

// check refuses s's fields that uses (api.QueueSpec's names) leaves out,
// and values that are not positive and finite or a share above 1.
func (s Settings) check(uses ...string) error {
	for _, f := range s.given() {
		if !slices.Contains(uses, f) {
			return fmt.Errorf("%s: not used by this policy (it takes %s)", f, strings.Join(uses, ", "))
		}
	}
	for _, f := range s.fields() {
		if f.v < 0 || math.IsNaN(f.v) || math.IsInf(f.v, 0) {
			return fmt.Errorf("%s %g: want a positive number", f.name, f.v)
		}
	}
	if s.LaneShare > 1 {
		return fmt.Errorf("laneShare %g: want a share in (0, 1]", s.LaneShare)
	}
	return nil
}

// levels is n thresholds doubling from base GPU-seconds.
func levels(base float64, n int) []float64 {
	th := make([]float64, n)
	for i := range th {
		th[i] = base * math.Exp2(float64(i))
	}
	return th
}

func (p *LanePolicy) Settings() Settings {
	return Settings{LaneShare: p.LaneShare, OverdueAfter: p.OverdueAfter, LevelBase: first(p.Thresholds), MinRun: p.MinRun, LaneTurn: p.LaneTurn}
}

func (p *LanePolicy) Configure(s Settings) error {
	if err := s.check("laneShare", "overdueAfter", "levelBase", "minRun", "laneTurn"); err != nil {
		return err
	}
	if s.LaneShare > 0 {
		p.LaneShare = s.LaneShare
	}
	if s.OverdueAfter > 0 {
		p.OverdueAfter = s.OverdueAfter
	}
	if s.LevelBase > 0 {
		p.Thresholds = levels(s.LevelBase, len(p.Thresholds))
	}
	if s.MinRun > 0 {
		p.MinRun = s.MinRun
	}
	if s.LaneTurn > 0 {
		p.LaneTurn = s.LaneTurn
	}
	return nil
}

func (p *GangwayPolicy) Settings() Settings {
	return Settings{OverdueAfter: p.StarveAfter, LevelBase: first(p.Thresholds), MinRun: p.MinRun}
}

// Configure: OverdueAfter is the starvation bound (StarveAfter).
func (p *GangwayPolicy) Configure(s Settings) error {
	if err := s.check("overdueAfter", "levelBase", "minRun"); err != nil {
		return err
	}
	if s.OverdueAfter > 0 {
		p.StarveAfter = s.OverdueAfter
	}
	if s.LevelBase > 0 {
		p.Thresholds = levels(s.LevelBase, len(p.Thresholds))
	}
	if s.MinRun > 0 {
		p.MinRun = s.MinRun
	}
	return nil
}

func first(th []float64) float64 {
	if len(th) == 0 {
		return 0
	}
	return th[0]
}
