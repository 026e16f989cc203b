package server

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/gangway/gangway/internal/api"
	"github.com/gangway/gangway/internal/controlplane/store"
)

// errNameHeld: a registration names a node whose live agent is another.
// The API answers it 409.
var errNameHeld = errors.New("the node name is held by another live agent")

// claimedByAnother refuses a registration of n when the node is Ready,
// its agent heartbeated within the node timeout (as this server heard it),
// and that agent is another instance (another --data-dir): a second agent
// started on a machine with the defaults (the host name and a data
// directory named after it) would otherwise take the first one's node and
// share its rank supervisor, and every job on it would fail. The same
// agent restarted on its data directory is the same instance and comes
// back at once; another data directory (a reinstalled machine) takes the
// name once the old agent has been silent for the node timeout. An agent
// that sends no instance (an older one), or a node this server has not
// heard since it began to lead, is not refused.
func (s *Server) claimedByAnother(ctx context.Context, n *api.Node, now time.Time) error {
	if n.Instance == "" {
		return nil
	}
	old, err := s.st.Node(ctx, n.Name)
	if errors.Is(err, store.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	if old.Instance == "" || old.Instance == n.Instance || old.Status.State != api.NodeReady {
		return nil
	}
	_, last, heard := s.liveness().Run(n.Name)
	if !heard || now.Sub(last) > s.cfg.NodeTimeout {
		return nil
	}
	return fmt.Errorf("register node %s: %w (its heartbeat came %.1f s ago, from %s): give each agent on a machine its own --name and --data-dir",
		n.Name, errNameHeld, now.Sub(last).Seconds(), old.Address)
}
