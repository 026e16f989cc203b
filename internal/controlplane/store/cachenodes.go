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
