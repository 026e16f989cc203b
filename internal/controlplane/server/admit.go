package server

import (
	"context"
	"fmt"
	"path/filepath"
	"sort"
	"strings"

	"github.com/gangway/gangway/internal/api"
	"github.com/gangway/gangway/internal/controlplane/controller"
	"github.com/gangway/gangway/internal/controlplane/store"
	"github.com/gangway/gangway/internal/planner"
	"github.com/gangway/gangway/internal/topology"
)

// admitParallelism checks a job's parallel grid against the cluster and the
// planner, and fills in the grid for parallelism: auto. It returns a
// validation error naming the field, or nil. With no nodes registered it
// checks nothing it cannot know.
func admitParallelism(spec *api.JobSpec, nodes []*api.Node, cat *planner.Catalog) error {
	par := spec.Parallelism
	if par == nil {
		return nil
	}
	model, domain := clusterShape(spec, nodes)
	reject := api.ErrorForField
	if !par.Auto && domain > 0 && max(par.TP, 1)*spec.GPUsPerRank > domain {
		return reject("spec.parallelism.tp", "a tensor-parallel group of %d GPUs exceeds the NVLink domain of %d GPUs; TP traffic would cross the network", max(par.TP, 1)*spec.GPUsPerRank, domain)
	}
	if spec.Model == nil || model == "" {
		if par.Auto {
			return reject("spec.parallelism", "auto needs registered GPU nodes to plan for")
		}
		return nil
	}
	seq, gb := spec.Model.Seq, spec.Model.GlobalBatch
	if seq == 0 {
		seq = 4096
	}
	if gb == 0 {
		gb = spec.GPUs()
	}
	req := planner.Request{Model: spec.Model.Name, GPU: model, GPUs: spec.GPUs(), GPUsPerDomain: domain, GPUsPerNode: domain, Seq: seq, GlobalBatch: gb}
	if par.Auto {
		p, why, err := cat.BestPlan(req)
		if err != nil {
			return reject("spec.model", "%v", err)
		}
		if p == nil {
			return reject("spec.parallelism", "no layout of %s on %d × %s fits: %s", spec.Model.Name, spec.GPUs(), model, why)
		}
		if spec.GPUsPerRank != 1 {
			return reject("spec.gpusPerRank", "parallelism: auto plans one GPU per rank")
		}
		par.TP, par.PP, par.DP = p.TP, p.PP, p.DP
		par.Predicted = prediction(p)
		return nil
	}
	v, err := cat.Check(req, max(par.TP, 1), max(par.PP, 1), par.DP)
	if err != nil {
		return reject("spec.model", "%v", err)
	}
	if !v.OK {
		return reject("spec.parallelism", "tp=%d pp=%d dp=%d cannot run %s on %s: %s", v.TP, v.PP, v.DP, spec.Model.Name, model, strings.Join(v.Reasons, "; "))
	}
	if v.Plan != nil {
		par.Predicted = prediction(v.Plan)
	}
	return nil
}

func prediction(p *planner.Plan) *api.Prediction {
	return &api.Prediction{
		TokensPerSecPerGPU: p.TokensPerSecPerGPU, StepSeconds: p.StepSeconds, MFU: p.MFU,
		MemoryPerGPUBytes: p.PeakMemoryBytes, MicroBatch: p.MicroBatch,
		Summary: fmt.Sprintf("tp=%d pp=%d vp=%d dp=%d mbs=%d recompute=%s zero=%d; %s; bottleneck: %s",
			p.TP, p.PP, p.VP, p.DP, p.MicroBatch, p.Recompute, p.ZeRO, p.Stack, p.Bottleneck),
	}
}

// clusterShape returns the most common GPU model among the nodes the job
// may use and the smallest NVLink domain among them (GPUs per node, or per
// nvlink-domain label group).
func clusterShape(spec *api.JobSpec, nodes []*api.Node) (model string, domain int) {
	count := map[string]int{}
	domGPUs := map[string]int{}
	for _, n := range nodes {
		if n.Status.State == api.NodeLost || len(n.GPUs) == 0 || !topology.Selects(spec.NodeSelector, nil, n.Labels) {
			continue
		}
		count[n.GPUs[0].Model]++
		key := "node/" + n.Name
		if d := n.Labels["nvlink-domain"]; d != "" {
			key = "domain/" + d
		}
		domGPUs[key] += len(n.GPUs)
	}
	models := make([]string, 0, len(count))
	for m := range count {
		models = append(models, m)
	}
	sort.Slice(models, func(i, j int) bool {
		if count[models[i]] != count[models[j]] {
			return count[models[i]] > count[models[j]]
		}
		return models[i] < models[j]
	})
	if len(models) > 0 {
		model = models[0]
	}
	for _, g := range domGPUs {
		if domain == 0 || g < domain {
			domain = g
		}
	}
	return model, domain
}

// admitOwner refuses a user's spec.owner: only the deployment controller
// sets it, on the replicas it makes (through the store, not this API), and
// a user's job claiming a deployment would be scaled, replaced and routed
// to as its replica.
func admitOwner(spec *api.JobSpec) error {
	switch {
	case spec.Owner != "":
		return api.ErrorForField("spec.owner", "%q: set by gangway for a deployment's replicas; remove it", spec.Owner)
	case spec.User != "":
		return api.ErrorForField("spec.user", "%q: gangway sets it to who submits the job; remove it", spec.User)
	case spec.RunAs != nil:
		return api.ErrorForField("spec.runAs", "gangway runs ranks as the account your token maps you to; remove it")
	}
	return nil
}

// admitUser stamps the submitter on a job and checks what depends on
// them: the queue must admit them, and root (uid 0) runs only on a queue
// that allows it, unless they are an admin.
func (s *Server) admitUser(ctx context.Context, wh *api.Who, spec *api.JobSpec) error {
	spec.User = wh.Name
	spec.RunAs = wh.RunAs
	q, err := s.queueSpec(ctx, spec.Queue)
	if err != nil {
		return err
	}
	if err := mayUseQueue(wh, q); err != nil {
		return err
	}
	if err := s.admitSecrets(spec); err != nil {
		return err
	}
	if isAdmin(wh) {
		return nil
	}
	if wh.RunAs == nil {
		return fmt.Errorf("%w: %s has no Unix account to run jobs as; an admin makes a token with --uid and --gid", errForbidden, wh.Name)
	}
	if wh.RunAs.UID == 0 && (q == nil || !q.AllowRoot) {
		return fmt.Errorf("%w: your token maps you to root (uid 0), and queue %s does not run jobs as root (an admin allows it: gangway queue set %s --allow-root)", errForbidden, spec.Queue, spec.Queue)
	}
	return nil
}

// admitSecrets checks that every file spec.secretEnv names exists in the
// submitter's directory under --secrets-dir (read again at each start).
func (s *Server) admitSecrets(spec *api.JobSpec) error {
	if len(spec.SecretEnv) == 0 {
		return nil
	}
	if s.cfg.SecretsDir == "" {
		return api.ErrorForField("spec.secretEnv", "this server keeps no secrets (it was started without --secrets-dir)")
	}
	for k, f := range spec.SecretEnv {
		if _, err := controller.ReadSecret(s.cfg.SecretsDir, spec.User, f); err != nil {
			return api.ErrorForField("spec.secretEnv."+k, "%s", err)
		}
	}
	return nil
}

// admitCheckpointDir refuses a spec's checkpointDir that is not strictly
// under a root the server allows (Config.CheckpointDirRoots): agents
// create it and retention deletes in it, so "/etc" must not be one. api's validation
// has already made it absolute and clean.
func admitCheckpointDir(spec *api.JobSpec, roots []string) error {
	dir := spec.CheckpointDir
	if dir == "" {
		return nil
	}
	for _, r := range roots {
		if under(filepath.Clean(dir), filepath.Clean(r)) {
			return nil
		}
	}
	return api.ErrorForField("spec.checkpointDir", "%q must lie strictly under one of the server's checkpoint roots (%s, set with gangway server --checkpoint-root and --checkpoint-dir-root); give the job a directory of its own below one", dir, strings.Join(roots, ", "))
}

// under reports whether the clean path p lies strictly below the clean
// directory dir.
func under(p, dir string) bool {
	return strings.HasPrefix(p, strings.TrimSuffix(dir, string(filepath.Separator))+string(filepath.Separator))
}

// Budgets for what a spec's command and env cost the store: a gang's
// assignments (a copy per rank) are written in one transaction, and an
// array's tasks (a copy of the spec each) in transactions of up to 128.
const (
	maxStartBytes      = store.MaxRequestBytes / 2
	maxArrayTaskBytes  = maxStartBytes / 128
	maxArrayTotalBytes = 2 * store.MaxRequestBytes
)

// admitSize refuses a spec whose command and env, copied into every rank
// or every array task, would not fit the store's transactions: the job
// could never start, and each try would build the transaction again.
func admitSize(spec *api.JobSpec) error {
	per := spec.ProcessBytes()
	if total := per * spec.Ranks; total > maxStartBytes {
		return api.ErrorForField("spec.command", "with spec.env, %d bytes for each of %d ranks is %d bytes to start the gang; at most %d: put long arguments and values in a file", per, spec.Ranks, total, maxStartBytes)
	}
	if spec.Array == "" {
		return nil
	}
	a, err := api.ParseArray(spec.Array)
	if err != nil {
		return nil // validation has refused it
	}
	switch tasks := len(a.Indices); {
	case tasks > 1 && per > maxArrayTaskBytes:
		return api.ErrorForField("spec.command", "with spec.env, %d bytes for each array task; at most %d: put long arguments and values in a file", per, maxArrayTaskBytes)
	case per*tasks > maxArrayTotalBytes:
		return api.ErrorForField("spec.array", "%d tasks × %d bytes of command and env is %d bytes; at most %d", tasks, per, per*tasks, maxArrayTotalBytes)
	}
	return nil
}
