package api

import (
	"fmt"
	"strings"
)

// Dependency kinds, as Slurm's --dependency names them.
const (
	DepAfter      = "after"      // the job has started (or ended)
	DepAfterAny   = "afterany"   // the job has ended, however
	DepAfterOK    = "afterok"    // the job has succeeded
	DepAfterNotOK = "afternotok" // the job has failed or was cancelled
	DepSingleton  = "singleton"  // no earlier job of this name and user is unfinished
)

// Dependency is one term of a spec's dependency: kind and the jobs it
// names (none for singleton).
type Dependency struct {
	Kind string
	Jobs []string
}

// ParseDependency reads Slurm's dependency syntax, the terms all
// required: "afterok:12:13,afterany:14", "singleton". Errors say which
// term is wrong and what is accepted.
func ParseDependency(s string) ([]Dependency, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	if strings.Contains(s, "?") {
		return nil, fmt.Errorf("%q: gangway takes dependencies that must all hold (joined by ,), not any of them (?)", s)
	}
	var out []Dependency
	for _, term := range strings.Split(s, ",") {
		parts := strings.Split(strings.TrimSpace(term), ":")
		kind := parts[0]
		switch kind {
		case DepSingleton:
			if len(parts) > 1 {
				return nil, fmt.Errorf("%q: singleton names no job", term)
			}
		case DepAfter, DepAfterAny, DepAfterOK, DepAfterNotOK:
			if len(parts) < 2 {
				return nil, fmt.Errorf("%q: %s names jobs: %s:ID[:ID...]", term, kind, kind)
			}
			for _, id := range parts[1:] {
				if !validJobID(id) {
					return nil, fmt.Errorf("%q: %q is not a job ID", term, id)
				}
			}
		default:
			return nil, fmt.Errorf("%q: want after, afterany, afterok or afternotok with job IDs (afterok:12:13), or singleton", term)
		}
		out = append(out, Dependency{Kind: kind, Jobs: parts[1:]})
	}
	return out, nil
}

func validJobID(id string) bool {
	if id == "" || len(id) > 20 {
		return false
	}
	for i := 0; i < len(id); i++ {
		if id[i] < '0' || id[i] > '9' {
			return false
		}
	}
	return true
}

// DependencyState is what a dependency term makes of the job it names.
type DependencyState int

const (
	DepWaiting DependencyState = iota // not yet
	DepMet                            // satisfied
	DepNever                          // can no longer be satisfied
)

// Holds says what kind makes of a job in phase (started: it has run an
// attempt).
func (d Dependency) Holds(phase JobPhase, started bool) DependencyState {
	final := phase.Final()
	switch d.Kind {
	case DepAfter:
		if started || final {
			return DepMet
		}
	case DepAfterAny:
		if final {
			return DepMet
		}
	case DepAfterOK:
		switch {
		case phase == JobSucceeded:
			return DepMet
		case final:
			return DepNever
		}
	case DepAfterNotOK:
		switch {
		case phase == JobFailed || phase == JobCancelled:
			return DepMet
		case final:
			return DepNever
		}
	}
	return DepWaiting
}
