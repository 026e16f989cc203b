package agent

import (
	"context"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/gangway/gangway/internal/api"
	"github.com/gangway/gangway/internal/node/container"
	"github.com/gangway/gangway/internal/node/driver"
)

// containerize turns spec, a rank's process, into the shim that runs the
// rank in a container of asg.Container (internal/node/container): the
// supervisor runs the shim as the rank, and `container-reap` after it,
// however it ended. rankEnv is the rank's own environment (gangway's
// variables and the job's, not the agent's); the container gets exactly
// that, added to its image's.
//
// The shim runs as the supervisor, which can reach the engine; the
// container runs as the rank's account, and is limited in its stead.
func (a *Agent) containerize(spec *driver.Spec, asg *api.Assignment, rankEnv []string) error {
	k := asg.TaskKey()
	uuids := a.gpuUUIDs(asg.GPUs)
	env := append([]string(nil), rankEnv...)
	if len(uuids) > 0 {
		// The engine numbers a container's GPUs from 0; UUIDs name them
		// whatever the numbering.
		env = append(env, "CUDA_VISIBLE_DEVICES="+strings.Join(uuids, ","))
	}
	c := &container.Spec{
		Name:       container.NameFor(a.instance, k),
		Image:      asg.Container.Image,
		PullPolicy: asg.Container.PullPolicy,
		Network:    asg.Container.Network,
		Command:    spec.Command,
		Env:        env,
		WorkingDir: spec.Dir,
		Mounts:     mounts(asg.CheckpointD, spec.Dir, spec.StateDir),
		GPUs:       uuids,
		Node:       a.cfg.Name,
		Engine:     a.cfg.DockerHost,
		AuthFile:   a.cfg.RegistryAuth,
		Labels: map[string]string{
			container.LabelJob: asg.JobID, container.LabelAttempt: strconv.Itoa(asg.Attempt),
			container.LabelRank: strconv.Itoa(asg.Rank), container.LabelTask: k,
			container.LabelNode: a.cfg.Name, container.LabelInstance: a.instance,
		},
		MemoryBytes: spec.MemoryBytes,
		CPUMillis:   spec.CPUMillis,
	}
	if acct := spec.RunAs; acct != nil {
		c.User = strconv.Itoa(acct.UID) + ":" + strconv.Itoa(acct.GID)
	}
	path, err := container.WriteSpec(spec.StateDir, c)
	if err != nil {
		return err
	}
	spec.Command = []string{a.cfg.Executable, "container-rank", "--spec", path}
	spec.Cleanup = []string{a.cfg.Executable, "container-reap", "--name", c.Name}
	if c.Engine != "" {
		spec.Cleanup = append(spec.Cleanup, "--host", c.Engine)
	}
	spec.MemoryBytes, spec.CPUMillis, spec.RunAs = 0, 0, nil
	return nil
}

// mounts are the distinct, absolute directories of dirs ("" skipped).
func mounts(dirs ...string) []string {
	var out []string
	seen := map[string]bool{}
	for _, d := range dirs {
		if d == "" || !filepath.IsAbs(d) {
			continue
		}
		d = filepath.Clean(d)
		if !seen[d] {
			seen[d] = true
			out = append(out, d)
		}
	}
	return out
}

// gpuUUIDs are the UUIDs of the node's GPUs at indexes, when they are real
// (NVML's); none for fake GPUs, which a container could not use.
func (a *Agent) gpuUUIDs(indexes []int) []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.realGPUs {
		return nil
	}
	var out []string
	for _, i := range indexes {
		if u, ok := a.gpuUUID[i]; ok {
			out = append(out, u)
		}
	}
	return out
}

// sweepTimeout bounds the start's sweep of leftover containers: an engine
// that does not answer delays the agent's start by no more.
const sweepTimeout = 15 * time.Second

// sweepContainers removes, at the agent's start, the containers of this
// agent's instance whose rank the supervisor does not know (a shim and its
// supervisor killed together, with no journal left to reap them, leave
// theirs running), logging each. It runs after adopt and before the
// assignment loop, so that every container a shim of this agent made
// belongs to a rank in a.tasks. A node without a Docker engine has none.
func (a *Agent) sweepContainers(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, sweepTimeout)
	defer cancel()
	if why := container.Available(ctx, a.cfg.DockerHost); why != "" {
		a.log.Debug("no container sweep", "reason", why)
		return
	}
	a.mu.Lock()
	known := make(map[string]bool, len(a.tasks))
	for k := range a.tasks {
		known[k] = true
	}
	a.mu.Unlock()
	gone, err := container.Sweep(ctx, a.cfg.DockerHost, a.instance, func(task string) bool { return known[task] })
	for _, c := range gone {
		a.log.Warn("removed a container of a rank the supervisor does not know", "container", c.Name, "task", c.Task, "state", c.State)
	}
	if err != nil {
		a.log.Warn("container sweep", "err", err)
	}
}
