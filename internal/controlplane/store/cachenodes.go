package store

import (
	"sort"

	"github.com/gangway/gangway/internal/api"
)

// ReadyNodes returns the names of the nodes the cache has Ready, sorted.
func (c *Cache) ReadyNodes() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]string, 0, len(c.nodes))
	for name, n := range c.nodes {
		if n.Status.State == api.NodeReady {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

// Range calls job for each job not yet finished and node for each node,
// in no order, with the cache locked: a consistent read that copies
// nothing (the server's metrics count with it at every scrape). The
// callbacks must be quick, must not call the cache, and must not keep or
// modify what they are given. Either may be nil.
func (c *Cache) Range(job func(*api.Job), node func(*api.Node)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if job != nil {
		for _, j := range c.jobs {
			job(j)
		}
	}
	if node != nil {
		for _, n := range c.nodes {
			node(n)
		}
	}
}
