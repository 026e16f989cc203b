package controller

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/gangway/gangway/internal/api"
)

// Scaler decides how many replicas an autoscaled deployment wants. The
// server implements it from the gateway's view of the engines; nil keeps
// autoscaled deployments at their minimum.
type Scaler interface {
	Desired(d *api.Deployment, now time.Time) (n int, reason string)
}

// readiness probes replica endpoints in the background. The pass sets the
// targets; the probe loop owns the HTTP calls.
type readiness struct {
	mu      sync.Mutex        // guards the maps
	targets map[string]string // endpoint → readiness URL
	ready   map[string]bool
}

func newReadiness() *readiness {
	return &readiness{targets: map[string]string{}, ready: map[string]bool{}}
}

func (r *readiness) set(targets map[string]string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.targets = targets
	for ep := range r.ready {
		if _, ok := targets[ep]; !ok {
			delete(r.ready, ep)
		}
	}
}

func (r *readiness) isReady(ep string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.ready[ep]
}

// run probes every target every interval until ctx ends; changed is told
// when a result flips.
func (r *readiness) run(ctx context.Context, interval time.Duration, changed func()) {
	client := &http.Client{Timeout: interval}
	defer client.CloseIdleConnections()
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		r.mu.Lock()
		targets := make(map[string]string, len(r.targets))
		for k, v := range r.targets {
			targets[k] = v
		}
		r.mu.Unlock()
		var wg sync.WaitGroup
		var mu sync.Mutex
		results := map[string]bool{}
		for ep, u := range targets {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ok := false
				req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
				if err == nil {
					if resp, err := client.Do(req); err == nil {
						ok = resp.StatusCode == http.StatusOK
						resp.Body.Close()
					}
				}
				mu.Lock()
				results[ep] = ok
				mu.Unlock()
			}()
		}
		wg.Wait()
		flipped := false
		r.mu.Lock()
		for ep, ok := range results {
			if _, still := r.targets[ep]; still && r.ready[ep] != ok {
				r.ready[ep] = ok
				flipped = true
			}
		}
		r.mu.Unlock()
		if flipped {
			changed()
		}
	}
}

// deployments reconciles every deployment: replica jobs created, retired
// and replaced; endpoints and readiness recorded.
func (p *pass) deployments(ctx context.Context) {
	targets := map[string]string{}
	names := make([]string, 0, len(p.v.Deploys))
	for n := range p.v.Deploys {
		names = append(names, n)
	}
	sort.Strings(names)
	owned := map[string][]string{} // owner label → live job ids
	if len(names) > 0 {
		for id, j := range p.v.Jobs {
			if j.Spec.Owner != "" && !j.Status.Phase.Final() {
				owned[j.Spec.Owner] = append(owned[j.Spec.Owner], id)
			}
		}
	}
	for _, name := range names {
		p.deployment(ctx, p.v.Deploys[name], owned[api.OwnerLabel(name)], targets)
	}
	p.c.ready.set(targets)
}

func (p *pass) deployment(ctx context.Context, d *api.Deployment, owned []string, targets map[string]string) {
	m := d.Clone()
	st := &m.Status
	changed := false
	// Adopt replica jobs whose recording was lost to a write conflict.
	known := map[string]bool{}
	for _, r := range st.Replicas {
		known[r.JobID] = true
	}
	sort.Strings(owned)
	for _, id := range owned {
		if !known[id] {
			st.Replicas = append(st.Replicas, api.Replica{JobID: id, Generation: m.Generation})
			changed = true
		}
	}
	// Refresh replicas from their jobs.
	var live []api.Replica
	for _, r := range st.Replicas {
		j := p.v.Jobs[r.JobID]
		if j == nil || j.Status.Phase.Final() {
			changed = true
			continue
		}
		ep := ""
		if a := j.Status.Current(); a != nil && j.Status.Phase == api.JobRunning && a.Phase == api.AttemptRunning {
			ep = "http://" + a.MasterAddr + ":" + strconv.Itoa(a.MasterPort)
		}
		ready := ep != "" && p.c.ready.isReady(ep)
		if ep != "" {
			targets[ep] = ep + m.Spec.ReadinessPath
		}
		if ep != r.Endpoint || ready != r.Ready {
			r.Endpoint, r.Ready = ep, ready
			changed = true
		}
		live = append(live, r)
	}
	st.Replicas = live

	if st.Deleting {
		for i := range st.Replicas {
			if !st.Replicas[i].Retiring {
				st.Replicas[i].Retiring = true
				changed = true
			}
			p.cancelJob(ctx, st.Replicas[i].JobID)
		}
		if len(st.Replicas) == 0 {
			if err := p.c.st.DeleteDeployment(ctx, m); err == nil {
				p.c.log.Info("deployment deleted", "deployment", m.Spec.Name)
			}
			return
		}
		p.writeDeployment(ctx, m, changed)
		return
	}

	desired, reason := m.Spec.Replicas, ""
	if m.Spec.Autoscale {
		desired, reason = m.Spec.MinReplicas, "autoscaling: no scaler, holding the minimum"
		if p.c.scaler != nil {
			desired, reason = p.c.scaler.Desired(m, p.now)
		}
	}
	desired = min(max(desired, m.Spec.MinReplicas), m.Spec.MaxReplicas)
	if desired != st.Desired {
		st.Desired = desired
		st.LastScaledAt = p.now
		changed = true
	}
	if reason != st.Reason {
		st.Reason = reason
		changed = true
	}

	var cur, old []int // indices of active replicas by generation
	ready := 0
	pendingNew := false
	for i, r := range st.Replicas {
		if r.Retiring {
			continue
		}
		if r.Ready {
			ready++
		}
		if r.Generation == m.Generation {
			cur = append(cur, i)
			if r.Endpoint == "" {
				pendingNew = true
			}
		} else {
			old = append(old, i)
		}
	}
	if ready != st.Ready {
		st.Ready = ready
		changed = true
	}
	readyCur := 0
	for _, i := range cur {
		if st.Replicas[i].Ready {
			readyCur++
		}
	}
	retire := func(i int, why string) {
		st.Replicas[i].Retiring = true
		changed = true
		p.c.log.Info("retiring replica", "deployment", m.Spec.Name, "job_id", st.Replicas[i].JobID, "why", why)
	}
	// Rolling update: one surge replica at a time; an old replica goes
	// once a new one is ready, or at once when the surge cannot be placed.
	switch {
	case len(old) > 0 && len(cur) < desired:
		if len(cur)+len(old) < desired+1 {
			p.createReplica(ctx, m)
			changed = true
		} else if pendingNew || readyCur > 0 {
			retire(old[len(old)-1], "replaced by the new generation")
		}
	case len(old) > 0:
		retire(old[len(old)-1], "replaced by the new generation")
	case len(cur) < desired:
		for k := len(cur); k < desired; k++ {
			p.createReplica(ctx, m)
		}
		changed = true
	case len(cur) > desired:
		// Scale down: not-ready replicas first, then the newest.
		sort.SliceStable(cur, func(a, b int) bool {
			ra, rb := st.Replicas[cur[a]], st.Replicas[cur[b]]
			if ra.Ready != rb.Ready {
				return !ra.Ready
			}
			return jobNewer(ra.JobID, rb.JobID)
		})
		for _, i := range cur[:len(cur)-desired] {
			retire(i, "scaled down")
		}
	}
	for _, r := range st.Replicas {
		if r.Retiring {
			p.cancelJob(ctx, r.JobID)
		}
	}
	p.writeDeployment(ctx, m, changed)
}

func jobNewer(a, b string) bool {
	if len(a) != len(b) {
		return len(a) > len(b)
	}
	return a > b
}

func (p *pass) writeDeployment(ctx context.Context, m *api.Deployment, changed bool) {
	if changed {
		p.wroteNow(m.ModRevision, p.c.st.UpdateDeployment(ctx, m))
	}
}

func (p *pass) cancelJob(ctx context.Context, id string) {
	j := p.v.Jobs[id]
	if j == nil || j.Status.Phase.Final() || j.Status.CancelRequested {
		return
	}
	m := j.Clone()
	m.Status.CancelRequested = true
	p.wroteNow(m.ModRevision, p.c.st.UpdateJob(ctx, m))
}

// createReplica submits one replica job and records it.
func (p *pass) createReplica(ctx context.Context, m *api.Deployment) {
	spec := ReplicaJobSpec(&m.Spec)
	spec.User, spec.RunAs = m.User, m.RunAs
	j, err := p.c.st.CreateJob(ctx, spec, p.now)
	if !p.wroteNow(0, err) {
		return
	}
	p.maxRev = max(p.maxRev, j.ModRevision)
	m.Status.Replicas = append(m.Status.Replicas, api.Replica{JobID: j.ID, Generation: m.Generation})
	p.c.log.Info("replica created", "deployment", m.Spec.Name, "job_id", j.ID)
}

// ReplicaJobSpec is the job that runs one replica of a deployment.
func ReplicaJobSpec(d *api.DeploymentSpec) api.JobSpec {
	restarts := 1 << 20 // a replica restarts for as long as it is wanted
	s := api.JobSpec{
		Name: d.Name, Queue: d.Queue, Priority: d.Priority,
		Ranks: 1, GPUsPerRank: d.GPUsPerReplica,
		Command: EngineCommand(d), Env: d.Env, NodeSelector: d.NodeSelector,
		MaxRestarts: &restarts, RestartBackoff: api.Duration(time.Second),
		TerminationGracePeriod: api.Duration(10 * time.Second),
		Owner:                  api.OwnerLabel(d.Name),
	}
	s.Default()
	return s
}

// EngineCommand is the command line of one replica: the spec's command,
// or the engine's template listening on ${MASTER_PORT}.
func EngineCommand(d *api.DeploymentSpec) []string {
	if len(d.Command) > 0 {
		return append(append([]string(nil), d.Command...), d.ExtraArgs...)
	}
	tp := strconv.Itoa(d.GPUsPerReplica)
	var cmd []string
	switch d.Engine {
	case api.EngineVLLM:
		cmd = []string{"vllm", "serve", d.Model, "--host", "0.0.0.0", "--port", "${MASTER_PORT}",
			"--tensor-parallel-size", tp, "--served-model-name", d.ServedModelName}
		switch d.Quantization {
		case "bf16", "fp16":
			cmd = append(cmd, "--dtype", map[string]string{"bf16": "bfloat16", "fp16": "float16"}[d.Quantization])
		default:
			cmd = append(cmd, "--quantization", d.Quantization)
		}
	case api.EngineTriton:
		cmd = []string{"tritonserver", "--model-repository", d.Model, "--http-port", "${MASTER_PORT}",
			"--grpc-port", "0", "--metrics-port", "0"}
	case api.EngineTRTLLM:
		cmd = []string{"trtllm-serve", d.Model, "--host", "0.0.0.0", "--port", "${MASTER_PORT}", "--tp_size", tp}
	case api.EngineSim:
		cmd = []string{"gangway", "engine-sim", "--listen", "${GANGWAY_NODE_ADDR}:${MASTER_PORT}", "--model", d.Model,
			"--served-model-name", d.ServedModelName, "--gpu", "${GANGWAY_GPU_MODEL}", "--tp", tp, "--quant", d.Quantization}
	default:
		panic(fmt.Sprintf("EngineCommand: engine %q without a command passed validation", d.Engine))
	}
	return append(cmd, d.ExtraArgs...)
}
