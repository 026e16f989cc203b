package policy

// Ranked is one job of a queue as Victims sees it.
type Ranked struct {
	// GPUs is what it holds, or asks for while it waits.
	GPUs int
	// Running: it holds its GPUs. Protected: running, and its policy
	// protects it now, so it keeps its GPUs whatever ranks above it.
	Running, Protected bool
	// Starving: waiting, and its policy lets it preempt any job ranked
	// below it (Policy.Starving).
	Starving bool
}

// MaxVictims bounds the running jobs Victims offers at once: the
// scheduler's victim search grows faster than linearly in candidates.
const MaxVictims = 24

// Victims is the rule by which running jobs are offered to the scheduler
// as victims under a preempting policy, the same in the simulator's
// passes (internal/sim: rank, lowest, below) and the controller's.
//
// jobs are a queue's waiting and running jobs in rank order, the first
// highest; gpus is how many GPUs they share. Protected running jobs keep
// their GPUs first; then each job in turn gets its GPUs while they last.
// Waiting jobs that get theirs are the starts; running jobs that do not
// lose their place. Nothing is offered when there is no start. When the
// first waiting job is starving, every unprotected running job ranked
// below it is offered; otherwise the lowest-ranked of the jobs that lose
// their place, holding about twice the GPUs the starts need, at most
// MaxVictims of them.
//
// offered[i] reports whether jobs[i] is offered; it is nil when nothing
// is.
func Victims(jobs []Ranked, gpus int) (offered []bool) {
	quota := gpus
	for _, j := range jobs {
		if j.Running && j.Protected {
			quota -= j.GPUs
		}
	}
	starts, need := 0, 0
	var lose []int // indices of running jobs that lose their place, in rank order
	for i, j := range jobs {
		if j.Running && j.Protected {
			continue
		}
		if quota <= 0 {
			// The sim stops walking here: waiting jobs get nothing, and
			// every running job left loses its place.
			if j.Running {
				lose = append(lose, i)
			}
			continue
		}
		switch {
		case j.GPUs <= quota:
			quota -= j.GPUs
			if !j.Running {
				starts, need = starts+1, need+j.GPUs
			}
		case j.Running:
			lose = append(lose, i)
		}
	}
	if starts == 0 {
		return nil
	}
	offered = make([]bool, len(jobs))
	head := -1
	for i, j := range jobs {
		if !j.Running {
			head = i
			break
		}
	}
	if head >= 0 && jobs[head].Starving {
		for i := head + 1; i < len(jobs); i++ {
			if jobs[i].Running && !jobs[i].Protected {
				offered[i] = true
			}
		}
		return offered
	}
	held, k := 0, len(lose)
	for k > 0 && len(lose)-k < MaxVictims && held < 2*need+8 {
		k--
		held += jobs[lose[k]].GPUs
	}
	for _, i := range lose[k:] {
		offered[i] = true
	}
	return offered
}
