package server

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/gangway/gangway/internal/api"
	"github.com/gangway/gangway/internal/controlplane/store"
)

// Witnesses (controller.Fencing): every node gets a few others it asks,
// when the server goes silent, whether they hear it either. The server
// keeps each node's set in its record, so a new leader decides node loss
// by the set the agent holds; while a change has not reached the agent,
// the record keeps the set before it too (PrevWitnesses).

// witnessPool is the ready nodes' names the picks draw from, read from the
// cache at most once a second: a heartbeat only looks.
type witnessPool struct {
	mu    sync.Mutex // guards names and at
	names []string
	at    time.Time
}

func (s *Server) readyPool() []string {
	s.pool.mu.Lock()
	defer s.pool.mu.Unlock()
	// Read again every second, and at once while the pool is too small
	// to give a node all its witnesses (a fleet starting up).
	if now := time.Now(); now.Sub(s.pool.at) > time.Second || len(s.pool.names) <= s.fence.Witnesses {
		s.pool.names, s.pool.at = s.cache.ReadyNodes(), now
	}
	return s.pool.names
}

// pickWitnesses returns node's witnesses as they should be: those of cur
// that are still ready, topped up at random from the ready nodes; changed
// says whether that differs from cur.
func (s *Server) pickWitnesses(node string, cur []string) (ws []string, changed bool) {
	k := s.fence.Witnesses
	if k == 0 {
		return nil, len(cur) > 0
	}
	ready := s.readyPool()
	for _, w := range cur {
		if w != node && len(ws) < k && s.readyWitness(w) {
			ws = append(ws, w)
		}
	}
	// Draw at random rather than scan: a pick costs a few lookups, not one
	// per node of the fleet (5,000 registering at once made that
	// quadratic). A small pool is walked whole, from a random start.
	if len(ws) < k && len(ready) > 0 {
		draws := 4 * k
		if len(ready) <= draws {
			draws = len(ready)
		}
		start := rand.IntN(len(ready))
		for i := 0; i < draws && len(ws) < k; i++ {
			n := ready[(start+i)%len(ready)]
			if len(ready) > 4*k {
				n = ready[rand.IntN(len(ready))]
			}
			if n != node && !slices.Contains(ws, n) && s.readyWitness(n) {
				ws = append(ws, n)
			}
		}
	}
	return ws, !slices.Equal(ws, cur)
}

// readyWitness: the node is ready now, with an endpoint to ask.
func (s *Server) readyWitness(name string) bool {
	n, ok := s.cache.Node(name)
	return ok && n.Status.State == api.NodeReady && n.AgentURL != ""
}

// witnessURLs is names with each one's agent endpoint as the cache has it
// ("" if it has none: the agent holds every name the server counts, and
// one it cannot ask gives it no word that the server is down).
func (s *Server) witnessURLs(names []string) []api.Witness {
	out := make([]api.Witness, 0, len(names))
	for _, w := range names {
		var url string
		if n, ok := s.cache.Node(w); ok {
			url = n.AgentURL
		}
		out = append(out, api.Witness{Node: w, URL: url})
	}
	return out
}

// tendWitnesses keeps node n's witnesses current after a heartbeat that
// said the agent holds held: it forgets the previous set once the agent
// holds the new one, and replaces witnesses that are gone (only once the
// last change reached the agent, so the record never needs more than two
// sets). It returns the set the agent should hold. A conflicting write is
// left for the next heartbeat.
func (s *Server) tendWitnesses(ctx context.Context, n *api.Node, held []string) []string {
	cur := n.Status.Witnesses
	if len(n.Status.PrevWitnesses) > 0 {
		if !slices.Equal(held, cur) {
			return cur
		}
		m := n.Clone()
		m.Status.PrevWitnesses = nil
		_ = s.st.PutNode(ctx, m)
		return cur
	}
	ws, changed := s.pickWitnesses(n.Name, cur)
	if !changed {
		return cur
	}
	put := func(n *api.Node) error {
		m := n.Clone()
		m.Status.Witnesses = ws
		if len(held) > 0 {
			// The agent may ask either set until it shows it has the new
			// one.
			m.Status.PrevWitnesses = held
		}
		return s.st.PutNode(ctx, m)
	}
	err := put(n)
	if errors.Is(err, store.ErrConflict) {
		// The cache is behind the record (a registration just written):
		// once more on the record itself, if its witnesses are as read.
		if n, err = s.st.Node(ctx, n.Name); err == nil && n.Status.State == api.NodeReady &&
			slices.Equal(n.Status.Witnesses, cur) && len(n.Status.PrevWitnesses) == 0 {
			err = put(n)
		}
	}
	if err != nil {
		return cur
	}
	return ws
}
