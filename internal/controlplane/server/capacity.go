package server

import (
	"context"
	"fmt"
	"time"

	"github.com/gangway/gangway/internal/api"
)

// checkCapacity rejects a gang that no set of registered nodes could ever
// hold. With no nodes registered yet, everything waits.
func checkCapacity(spec *api.JobSpec, nodes []*api.Node) error {
	if len(nodes) == 0 {
		return nil
	}
	largest, total := 0, 0
	for _, n := range nodes {
		if n.Status.State == api.NodeLost {
			continue
		}
		largest = max(largest, len(n.GPUs))
		total += len(n.GPUs)
	}
	switch need := spec.MilliGPUs(); {
	case spec.GPUsPerRank > largest:
		return api.ErrorForField("spec.gpusPerRank", "%d GPUs per rank, but the largest node has %d", spec.GPUsPerRank, largest)
	case spec.RanksPerNode > 0 && spec.RanksPerNode*spec.GPUsPerRank > largest:
		return api.ErrorForField("spec.ranksPerNode", "%d ranks × %d GPUs per node, but the largest node has %d",
			spec.RanksPerNode, spec.GPUsPerRank, largest)
	case need > int64(total)*1000:
		per := fmt.Sprintf("%d GPUs", spec.GPUsPerRank)
		if spec.GPUMilli > 0 || spec.MIGProfile != "" {
			per = fmt.Sprintf("%.3g GPU", float64(need)/float64(spec.Ranks)/1000)
		}
		return api.ErrorForField("spec.ranks", "%d ranks × %s = %.4g GPUs, but the cluster has %d",
			spec.Ranks, per, float64(need)/1000, total)
	}
	return nil
}

// capacityNodes returns the node list for the submit-time capacity check,
// re-read at most once a second: the check is advisory (the scheduler has
// the final word), and reading every node per submission costs more than
// the submission itself.
func (s *Server) capacityNodes(ctx context.Context) ([]*api.Node, error) {
	s.capMu.Lock()
	defer s.capMu.Unlock()
	if s.capNodes != nil && time.Since(s.capAt) < time.Second {
		return s.capNodes, nil
	}
	nodes, _, err := s.st.Nodes(ctx)
	if err != nil {
		return nil, err
	}
	s.capNodes, s.capAt = nodes, time.Now()
	return nodes, nil
}
