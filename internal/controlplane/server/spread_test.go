package server

import (
	"context"
	"testing"
	"time"

	"github.com/gangway/gangway/internal/api"
	"github.com/gangway/gangway/internal/api/client"
	"github.com/gangway/gangway/internal/base/wait"
)

// TestDeploymentReplicasSpread: the replicas of a deployment go to
// different nodes while nodes with room hold none of them, though best
// fit alone packs both onto one node's two GPUs.
func TestDeploymentReplicasSpread(t *testing.T) {
	e := startAgentEnv(t)
	for _, name := range []string{"n1", "n2"} {
		if err := e.register(e.node(name), testNode(name, "https://127.0.0.1:1", nil)); err != nil {
			t.Fatal(err)
		}
	}
	spec := `{"name": "llama", "engine": "sim", "model": "llama3-8b", "replicas": 2, "gpusPerReplica": 1, "command": ["/opt/serve"]}`
	if _, err := e.admin.Deploy(e.ctx, []byte(spec)); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(e.ctx, 30*time.Second)
	defer cancel()
	var nodes []string
	if err := wait.Until(ctx, 20*time.Millisecond, func() (bool, error) {
		l, err := e.admin.Jobs(ctx, client.JobQuery{})
		if err != nil {
			return false, err
		}
		nodes = nodes[:0]
		for _, j := range l.Jobs {
			if a := j.Status.Current(); j.Spec.Owner == api.OwnerLabel("llama") && a != nil {
				nodes = append(nodes, a.Nodes()...)
			}
		}
		return len(nodes) == 2, nil
	}); err != nil {
		t.Fatalf("the two replicas were never placed (on %v): %v", nodes, err)
	}
	if nodes[0] == nodes[1] {
		t.Errorf("both replicas on %s; want one per node", nodes[0])
	}
}
