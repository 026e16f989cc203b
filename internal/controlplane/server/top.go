package server

import (
	"context"
	"net/http"
	"sync"

	"github.com/gangway/gangway/internal/api"
	"github.com/gangway/gangway/internal/goodput"
)

// What `gangway top` shows: the GPUs' readings the agents' heartbeats
// carry (api.Heartbeat.Telemetry, one every --gpu-metrics-interval), kept
// in memory as the heartbeats themselves are, and what the jobs hold.

// maxSamples bounds the readings kept of one node.
const maxSamples = 256

// gpuReadings is the newest GPU readings of each node this replica heard
// a heartbeat from, the leader's whole fleet (every replica forwards
// heartbeats to it), a follower's the agents that speak to it. A new
// leader has none until the agents' next readings.
type gpuReadings struct {
	mu     sync.Mutex // guards byNode
	byNode map[string]*api.GPUTelemetry
}

// put keeps t as node's readings. t is not changed afterwards: readers
// share it.
func (g *gpuReadings) put(node string, t *api.GPUTelemetry) {
	if len(t.GPUs) > maxSamples {
		t.GPUs = t.GPUs[:maxSamples]
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.byNode == nil {
		g.byNode = map[string]*api.GPUTelemetry{}
	}
	if old := g.byNode[node]; old == nil || !t.At.Before(old.At) {
		g.byNode[node] = t
	}
}

// get is node's newest readings, nil without any; shared, read-only.
func (g *gpuReadings) get(node string) *api.GPUTelemetry {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.byNode[node]
}

// heldGPUs is, per node, the indices of the GPUs the ranks of attempts not
// yet ended hold, from the live jobs: the cache once it holds what the
// store had when asked or, when it cannot (a store in trouble), as it is:
// a node list that could be read does not fail for the cache's lag.
func (s *Server) heldGPUs(ctx context.Context) (map[string]map[int]bool, error) {
	jobs, _, err := s.liveJobs(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return nil, err
		}
		jobs = s.cache.LiveJobs()
	}
	held := map[string]map[int]bool{}
	for _, j := range jobs {
		a := j.Status.Current()
		if a == nil || a.Phase == api.AttemptEnded {
			continue
		}
		for _, p := range a.Placement {
			if held[p.Node] == nil {
				held[p.Node] = map[int]bool{}
			}
			for _, g := range p.GPUs {
				held[p.Node][g] = true
			}
		}
	}
	return held, nil
}

// fillUse sets the nodes' used and free GPUs and their newest readings
// (api.NodeStatus.UsedGPUs, FreeGPUs, Telemetry).
func (s *Server) fillUse(ctx context.Context, nodes []*api.Node) error {
	held, err := s.heldGPUs(ctx)
	if err != nil {
		return err
	}
	for _, n := range nodes {
		h := held[n.Name]
		n.Status.UsedGPUs, n.Status.FreeGPUs = len(h), 0
		if n.Schedulable() {
			for i := range n.GPUs {
				if g := &n.GPUs[i]; g.InService() && !h[g.Index] {
					n.Status.FreeGPUs++
				}
			}
		}
		n.Status.Telemetry = s.readings.get(n.Name)
	}
	return nil
}

func (s *Server) topRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /v1/top/jobs", s.topJobs)
}

// topJobs answers GET /v1/top/jobs[?user=U]: every running job (U's only)
// with the newest readings of the GPUs its attempt holds and the
// attempt's newest progress.
func (s *Server) topJobs(w http.ResponseWriter, r *http.Request) {
	if err := onlyParams(r, "user"); err != nil {
		writeError(w, http.StatusBadRequest, err)
		return
	}
	ctx := r.Context()
	user := r.URL.Query().Get("user")
	jobs, _, err := s.liveJobs(ctx)
	if err != nil {
		writeError(w, statusFor(err), err)
		return
	}
	out := api.JobTopList{Jobs: []api.JobTop{}}
	for _, j := range jobs {
		a := j.Status.Current()
		if j.Status.Phase != api.JobRunning || a == nil || a.Phase == api.AttemptEnded || (user != "" && j.Spec.User != user) {
			continue
		}
		t := api.JobTop{ID: j.ID, Name: j.Spec.Name, User: j.Spec.User, Queue: j.Spec.Queue, Attempt: a.Number, Nodes: a.Nodes(),
			GPUs: goodput.GPUs(&j.Spec)}
		s.readGPUs(&t, a)
		pl, err := s.st.Progress(ctx, j.ID)
		if err != nil {
			writeError(w, statusFor(err), err)
			return
		}
		if p := pl; p != nil && p.Latest.Attempt == a.Number {
			t.Step, t.Loss, t.ProgressAt = p.Latest.Step, p.Latest.Loss, p.Latest.Time
			t.TokensPerSec = api.TokenRate(p.Recent, a.Number)
		}
		out.Jobs = append(out.Jobs, t)
	}
	writeJSON(w, r, http.StatusOK, out)
}

// readGPUs fills t's readings from those of the GPUs a holds, each once.
func (s *Server) readGPUs(t *api.JobTop, a *api.Attempt) {
	type gpu struct {
		node  string
		index int
	}
	seen := map[gpu]bool{}
	sum := api.NewGPUSummary()
	for _, p := range a.Placement {
		tel := s.readings.get(p.Node)
		for _, g := range p.GPUs {
			if smp := tel.Sample(g); smp != nil && !seen[gpu{p.Node, g}] {
				sum.Add(smp)
			}
			seen[gpu{p.Node, g}] = true
		}
	}
	t.Sampled, t.UtilPercent, t.MemUsedMiB = sum.Sampled, sum.UtilPercent, max(sum.MemUsedMiB, 0)
}
