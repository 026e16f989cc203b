package sim

import (
	"fmt"

	"github.com/gangway/gangway/internal/api"
	"github.com/gangway/gangway/internal/scheduler/policy"
)

// LiveFromQueues is the live policy of a cluster whose queues are qs (as
// its server's API lists them, or a file of queue specs): the default
// queue's policy with its settings, as the controller runs it
// (policy.ForQueue). The simulator runs one queue,
// so it says in notes what of qs it leaves out: other queues' policies and
// guarantees.
func LiveFromQueues(qs []api.QueueSpec) (Policy, []string, error) {
	var p policy.Policy
	var notes []string
	for _, q := range qs {
		qp, err := policy.ForQueue(&q)
		if err != nil {
			return nil, nil, fmt.Errorf("queue %s: %w", q.Name, err)
		}
		switch {
		case q.Name == api.DefaultQueue:
			p = qp
		case qp.Name() != policy.Default || q.GuaranteeGPUs > 0:
			notes = append(notes, fmt.Sprintf("queue %s (policy %s, guarantee %d GPUs) is not simulated: every trace job runs in the default queue", q.Name, qp.Name(), q.GuaranteeGPUs))
		}
	}
	return Live(p), notes, nil
}
