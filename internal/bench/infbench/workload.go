package infbench

import (
	"math"
	"math/rand/v2"
	"time"

	"github.com/gangway/gangway/internal/inference/openai"
)

// Workload describes open-loop traffic: requests over shared prefixes (or
// none), optionally in multi-turn conversations, arriving as a Poisson
// process, in bursts, or with a step in rate.
type Workload struct {
	Requests     int
	Rate         float64 // mean arrivals per second
	Prefixes     int     // distinct shared prefixes (customers); 0 means none
	PrefixTokens int     // tokens of each prefix (a multiple of the block size)
	// Users > 0 gives each prefix that many conversations: a request
	// continues one, its prompt carrying the earlier questions and the
	// answers the engine generated, until Turns turns, when the user
	// starts a new conversation.
	Users        int
	Turns        int
	SuffixTokens int // mean tokens of the new question (±50%)
	OutputTokens int // mean output tokens (±50%)
	// Burst, when > 1, makes arrivals bursty: ON periods at Burst × the
	// base rate alternate with OFF periods at a rate that keeps the mean
	// at Rate. BurstOn and BurstPeriod set the cycle.
	Burst       float64
	BurstOn     time.Duration
	BurstPeriod time.Duration
	// StepAt/StepFactor multiply the rate by StepFactor from StepAt on.
	StepAt     time.Duration
	StepFactor float64
	Seed       uint64
}

type session struct {
	hist  []uint32 // append-only; a new conversation starts a new slice
	turns int
}

// Generate draws the arrivals, deterministically from Seed.
func (w Workload) Generate(blockSize int) []Arrival {
	rng := rand.New(rand.NewPCG(w.Seed, 0xda3e39cb94b95bdb))
	randToks := func(n int) []uint32 {
		t := make([]uint32, n)
		for i := range t {
			t[i] = uint32(rng.IntN(1 << 24))
		}
		return t
	}
	prefixes := make([][]uint32, w.Prefixes)
	hashes := make([][]uint64, w.Prefixes)
	for p := range prefixes {
		prefixes[p] = randToks(w.PrefixTokens)
		hashes[p] = openai.BlockHashes(prefixes[p], blockSize)
	}
	var sessions []session
	if w.Prefixes > 0 && w.Users > 0 {
		sessions = make([]session, w.Prefixes*w.Users)
	}
	out := make([]Arrival, 0, w.Requests)
	var t time.Duration
	for i := 0; i < w.Requests; i++ {
		t += time.Duration(rng.ExpFloat64() / w.rateAt(t) * float64(time.Second))
		a := Arrival{At: t, MaxTokens: max(1, spread(rng, w.OutputTokens)), Seed: uint64(i) + 1}
		question := randToks(max(1, spread(rng, w.SuffixTokens)))
		switch {
		case sessions != nil:
			s := rng.IntN(len(sessions))
			a.Prefix, a.PrefixHashes = prefixes[s/w.Users], hashes[s/w.Users]
			ss := &sessions[s]
			if w.Turns > 0 && ss.turns >= w.Turns {
				*ss = session{}
			}
			ss.hist = append(ss.hist, question...)
			a.Body = ss.hist[:len(ss.hist):len(ss.hist)]
			for j := range a.MaxTokens {
				ss.hist = append(ss.hist, openai.GeneratedToken(a.Seed, j))
			}
			ss.turns++
		case w.Prefixes > 0:
			p := rng.IntN(w.Prefixes)
			a.Prefix, a.PrefixHashes = prefixes[p], hashes[p]
			a.Body = question
		default:
			a.Body = question
		}
		out = append(out, a)
	}
	return out
}

// spread draws uniformly in [mean/2, 3·mean/2].
func spread(rng *rand.Rand, mean int) int {
	if mean <= 1 {
		return mean
	}
	return mean/2 + rng.IntN(mean+1)
}

func (w Workload) rateAt(t time.Duration) float64 {
	r := w.Rate
	if w.StepFactor > 0 && t >= w.StepAt {
		r *= w.StepFactor
	}
	if w.Burst > 1 && w.BurstPeriod > 0 {
		on := float64(w.BurstOn) / float64(w.BurstPeriod)
		phase := math.Mod(float64(t), float64(w.BurstPeriod)) / float64(w.BurstPeriod)
		if phase < on {
			return r * w.Burst
		}
		// Keep the mean: on·B + (1−on)·x = 1.
		x := (1 - on*w.Burst) / (1 - on)
		return r * math.Max(x, 0.05)
	}
	return r
}
