package simcli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/goccy/go-yaml"

	"github.com/gangway/gangway/internal/api"
	"github.com/gangway/gangway/internal/api/client"
	"github.com/gangway/gangway/internal/sim"
)

// withLive replaces the live policy among pols with the configuration
// that -from-server or -queues give; without either, live is the
// controller's default configuration.
func withLive(ctx context.Context, pols []sim.Policy, o *replayOpts, stderr io.Writer) ([]sim.Policy, error) {
	var qs []api.QueueSpec
	var err error
	switch {
	case o.fromServer != "" && o.queuesFile != "":
		return nil, usageError{errors.New("-from-server and -queues: give one")}
	case o.fromServer != "":
		qs, err = serverQueues(ctx, o.fromServer)
	case o.queuesFile != "":
		qs, err = fileQueues(o.queuesFile)
	default:
		return pols, nil
	}
	if err != nil {
		return nil, err
	}
	live, notes, err := sim.LiveFromQueues(qs)
	if err != nil {
		return nil, err
	}
	found := false
	for i, p := range pols {
		if p.Name() == "live" {
			pols[i], found = live, true
		}
	}
	if !found {
		return nil, usageError{errors.New("-from-server and -queues configure the live policy: add -policy live")}
	}
	for _, n := range notes {
		fmt.Fprintf(stderr, "note: %s\n", n)
	}
	return pols, nil
}

// serverQueues reads the queues of the server at url.
func serverQueues(ctx context.Context, url string) ([]api.QueueSpec, error) {
	cfg, err := client.ConfigFor(client.DefaultConfigPath(os.Getenv), client.Resolve{
		Server: url, Token: os.Getenv("GANGWAY_TOKEN"), CAFile: os.Getenv("GANGWAY_CA_FILE")})
	if err != nil {
		return nil, fmt.Errorf("-from-server: %w", err)
	}
	c, err := client.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("-from-server: %w", err)
	}
	defer c.CloseIdleConnections()
	l, err := c.Queues(ctx)
	if err != nil {
		return nil, fmt.Errorf("-from-server: read queues: %w", err)
	}
	out := make([]api.QueueSpec, 0, len(l.Queues))
	for _, q := range l.Queues {
		out = append(out, q.Spec)
	}
	return out, nil
}

// fileQueues reads a file of queue specs: a YAML or JSON list of specs,
// or of queues with a spec each (gangway get queues -o yaml). Each is
// checked as the API checks it.
func fileQueues(path string) ([]api.QueueSpec, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, usageError{fmt.Errorf("-queues: %w", err)}
	}
	var items []map[string]any
	if err := yaml.Unmarshal(b, &items); err != nil {
		return nil, usageError{fmt.Errorf("-queues %s: want a list of queue specs: %w", path, err)}
	}
	out := make([]api.QueueSpec, 0, len(items))
	for i, it := range items {
		if spec, ok := it["spec"]; ok {
			m, _ := spec.(map[string]any)
			it = m
		}
		j, err := json.Marshal(it)
		if err != nil {
			return nil, usageError{fmt.Errorf("-queues %s: item %d: %w", path, i+1, err)}
		}
		q, err := api.DecodeQueueSpec(j)
		if err != nil {
			return nil, usageError{fmt.Errorf("-queues %s: item %d: %w", path, i+1, err)}
		}
		out = append(out, q)
	}
	return out, nil
}
