package container

import (
	"context"
	"fmt"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
)

// Leftover is a container Sweep removed.
type Leftover struct {
	Name  string // without the engine's leading "/"
	Task  string // its LabelTask
	State string // the engine's word: "running", "exited", "created"
}

// Sweep force-removes, in the engine at host ("": the default), the containers of the agent instance instance
// (labelled LabelInstance) whose task keep does not claim (nil: every
// one), and returns them: at an agent's start, the containers of ranks its
// supervisor no longer knows (a shim and supervisor killed together leave
// theirs behind), and in the demo, a node's containers dying with it. It
// returns what it removed before an error, with the error.
func Sweep(ctx context.Context, host, instance string, keep func(task string) bool) ([]Leftover, error) {
	cli, err := engine(host)
	if err != nil {
		return nil, fmt.Errorf("sweep containers: %w", err)
	}
	defer cli.Close()
	lctx, cancel := context.WithTimeout(ctx, setupTimeout)
	l, err := cli.ContainerList(lctx, container.ListOptions{All: true,
		Filters: filters.NewArgs(filters.Arg("label", LabelInstance+"="+instance))})
	cancel()
	if err != nil {
		return nil, fmt.Errorf("sweep containers: list: %w", err)
	}
	var out []Leftover
	for _, c := range l {
		task := c.Labels[LabelTask]
		if keep != nil && keep(task) {
			continue
		}
		name := c.ID
		if len(c.Names) > 0 {
			name = c.Names[0][1:]
		}
		if err := remove(ctx, cli, c.ID); err != nil {
			return out, fmt.Errorf("sweep containers: %w", err)
		}
		out = append(out, Leftover{Name: name, Task: task, State: c.State})
	}
	return out, nil
}
