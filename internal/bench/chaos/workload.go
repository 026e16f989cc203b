package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"

	"github.com/gangway/gangway/internal/api"
	"github.com/gangway/gangway/internal/api/client"
)

// Job kinds of a Submission.
const (
	KindTrainer   = "trainer"
	KindReference = "reference"
	KindGang      = "gang"
	KindArray     = "array"
	// KindBurst: one of the jobs submitted all at once as the server is
	// stopped (see runner.runPlan): some are in flight when it goes, and
	// are submitted again when unanswered.
	KindBurst = "burst"
)

// workload makes and submits the harness's jobs. Every rank runs under
// `gangway chaos-rank`, which records it in the ranks' log.
type workload struct {
	bin, rankLog string
	api          *client.Client
	steps        int
	stepDelay    time.Duration
	rnd          *rand.Rand // the submitter's own
	say          func(format string, a ...any)

	mu   sync.Mutex // guards subs
	subs []*Submission
}

// trainerShapes are the trainer's gang shapes, used in turn: world size
// and ranks per node.
var trainerShapes = []struct{ ranks, perNode int }{{4, 2}, {2, 1}}

func shapeKey(ranks, steps int) string { return fmt.Sprintf("w%d-steps%d", ranks, steps) }

// wrap puts the rank wrapper in front of a command.
func (w *workload) wrap(cmd ...string) []string {
	return append([]string{w.bin, "chaos-rank", "--log", w.rankLog, "--"}, cmd...)
}

func (w *workload) trainerSpec(name string, ranks, perNode int, delay time.Duration) api.JobSpec {
	return api.JobSpec{
		Name: name, Ranks: ranks, RanksPerNode: perNode, GPUsPerRank: 1,
		Command: w.wrap(w.bin, "train-example", "--steps", strconv.Itoa(w.steps), "--checkpoint-every", "20",
			"--log-every", "100", "--step-delay", delay.String()),
		MaxRestarts: ptr(1000), RestartBackoff: api.Duration(200 * time.Millisecond),
		TerminationGracePeriod: api.Duration(5 * time.Second),
	}
}

func gangSpec(w *workload, name string, ranks, perNode int, sleep time.Duration) api.JobSpec {
	return api.JobSpec{
		Name: name, Ranks: ranks, RanksPerNode: perNode, GPUsPerRank: 1,
		Command:     w.wrap("sleep", strconv.FormatFloat(sleep.Seconds(), 'f', 3, 64)),
		MaxRestarts: ptr(1000), RestartBackoff: api.Duration(200 * time.Millisecond),
		TerminationGracePeriod: api.Duration(2 * time.Second),
	}
}

func ptr[T any](v T) *T { return &v }

// references submits one uninterrupted trainer per shape.
func (w *workload) references(ctx context.Context) []*Submission {
	var out []*Submission
	for _, s := range trainerShapes {
		name := fmt.Sprintf("chaos-reference-w%d", s.ranks)
		sub := &Submission{Name: name, Kind: KindReference, Ranks: s.ranks, Tasks: 1, Shape: shapeKey(s.ranks, w.steps)}
		w.submit(ctx, sub, w.trainerSpec(name, s.ranks, s.perNode, 0))
		out = append(out, sub)
	}
	return out
}

// wave submits the i-th wave of jobs: a trainer (the shapes in turn), a
// gang of a size drawn from the submitter's seed and, every other wave, an
// array of short tasks.
func (w *workload) wave(ctx context.Context, i int) {
	s := trainerShapes[i%len(trainerShapes)]
	name := fmt.Sprintf("chaos-train-%d", i)
	w.submit(ctx, &Submission{Name: name, Kind: KindTrainer, Ranks: s.ranks, Tasks: 1, Shape: shapeKey(s.ranks, w.steps)},
		w.trainerSpec(name, s.ranks, s.perNode, w.stepDelay))

	sizes := []int{1, 2, 4, 8, 12}
	n := sizes[w.rnd.IntN(len(sizes))]
	perNode := max(n/2, 1)
	sleep := 3*time.Second + time.Duration(w.rnd.Int64N(int64(7*time.Second)))
	name = fmt.Sprintf("chaos-gang%d-%d", n, i)
	w.submit(ctx, &Submission{Name: name, Kind: KindGang, Ranks: n, Tasks: 1}, gangSpec(w, name, n, perNode, sleep))

	if i%2 == 0 {
		const tasks = 6
		name = fmt.Sprintf("chaos-array-%d", i)
		spec := gangSpec(w, name, 1, 0, 1500*time.Millisecond)
		spec.Array = "0-" + strconv.Itoa(tasks-1)
		w.submit(ctx, &Submission{Name: name, Kind: KindArray, Ranks: 1, Tasks: tasks}, spec)
	}
}

// burst submits n one-rank jobs at once, each from a goroutine of its own
// that wg tracks, named after the fault they precede.
func (w *workload) burst(ctx context.Context, fault, n int, wg *sync.WaitGroup) {
	for j := range n {
		name := fmt.Sprintf("chaos-burst-%d-%d", fault, j)
		wg.Add(1)
		go func() {
			defer wg.Done()
			w.submit(ctx, &Submission{Name: name, Kind: KindBurst, Ranks: 1, Tasks: 1}, gangSpec(w, name, 1, 0, 500*time.Millisecond))
		}()
	}
}

// submit posts spec until the server answers it with jobs, or refuses it,
// or ctx ends. An unanswered try is tried again with the same
// Idempotency-Key, as gangway's client does: if the server stored the job
// all the same, it answers with that job rather than storing it twice
// (what duplicated counts). It is safe for concurrent use.
func (w *workload) submit(ctx context.Context, sub *Submission, spec api.JobSpec) {
	body, err := json.Marshal(spec)
	if err != nil {
		panic(err) // a spec of plain values always encodes
	}
	sub.SubmittedAt = time.Now()
	w.mu.Lock()
	w.subs = append(w.subs, sub)
	w.mu.Unlock()
	for {
		w.mu.Lock()
		sub.Tries++
		w.mu.Unlock()
		j, arr, err := w.api.SubmitKeyed(ctx, body, "chaos-"+sub.Name)
		var ae *client.APIError
		switch {
		case err == nil:
			w.mu.Lock()
			if arr != nil {
				sub.IDs = append([]string(nil), arr.Jobs...)
			} else {
				sub.IDs = []string{j.ID}
			}
			w.mu.Unlock()
			return
		case errors.As(err, &ae) && ae.Status/100 == 4 && ae.Status != 429:
			w.say("submit %s refused: %v", sub.Name, err)
			return
		case !errors.As(err, &ae):
			w.mu.Lock()
			sub.Unanswered++
			w.mu.Unlock()
		}
		select {
		case <-ctx.Done():
			w.say("submit %s: gave up unanswered: %v", sub.Name, err)
			return
		case <-time.After(time.Second):
		}
	}
}

// submissions returns a copy of what was submitted so far.
func (w *workload) submissions() []Submission {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]Submission, len(w.subs))
	for i, s := range w.subs {
		out[i] = *s
	}
	return out
}
