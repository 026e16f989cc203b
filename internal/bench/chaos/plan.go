package chaos

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"
)

// Kind is a kind of fault.
type Kind string

// The faults the harness injects.
const (
	// AgentKill: SIGKILL to a node's agent; its rank supervisor and ranks
	// live on. The agent is started again after Step.For.
	AgentKill Kind = "agent-kill"
	// AgentSupervisorKill: SIGKILL to the agent and its supervisor at
	// once; the ranks live on, orphaned. The agent is started again after
	// Step.For.
	AgentSupervisorKill Kind = "agent-supervisor-kill"
	// Partition: the host's cable is pulled for Step.For (network
	// namespaces only).
	Partition Kind = "partition"
	// Freeze: SIGSTOP to the agent for Step.For, then SIGCONT.
	Freeze Kind = "freeze"
	// ServerKill: SIGKILL to the server (to every replica at once); it is
	// started again on the same data directory after Step.For.
	ServerKill Kind = "server-kill"
	// ServerRestart: SIGTERM to the server, and a new one at once; with
	// several replicas, to each in turn, the next once the last answers
	// again (a rolling upgrade).
	ServerRestart Kind = "server-restart"
	// LeaderKill: SIGKILL to the replica that leads (its API, controller
	// and etcd member); it is started again after Step.For. The time to
	// a new leader serving is measured (Fault.FailoverS).
	LeaderKill Kind = "leader-kill"
	// EtcdMemberKill: SIGKILL to a replica that does not lead, its etcd
	// member with it; it is started again after Step.For.
	EtcdMemberKill Kind = "etcd-member-kill"
	// QuorumLoss: SIGKILL to a majority of the replicas at once, the
	// leader among them or not; the store takes no write until they are
	// started again, after Step.For.
	QuorumLoss Kind = "quorum-loss"
	// GPUFault: an Xid 79 injected into the node's fake GPUs, which its
	// health checks report; the server takes the node out of service and
	// its gangs move. After Step.For the fault is cleared and the node
	// uncordoned, as an operator would after a reset.
	GPUFault Kind = "gpu-fault"
)

// Kinds lists every kind, in the order reports show them.
var Kinds = []Kind{AgentKill, AgentSupervisorKill, Partition, Freeze, GPUFault, ServerKill, ServerRestart, LeaderKill, EtcdMemberKill, QuorumLoss}

// KindsFor is what "all" means for a control plane of replicas servers
// with agents in network namespaces (netns) or not: the kinds that can be
// injected there. One server takes no replica kind. Several take no
// server-kill: the whole control plane down at once is what one server's
// run tests, and it takes the gateways down with it (--kinds server-kill
// asks for it all the same).
func KindsFor(replicas int, netns bool) []Kind {
	var out []Kind
	for _, k := range Kinds {
		switch {
		case k == Partition && !netns:
		case k.onReplicas() && replicas < 3:
		case k == ServerKill && replicas > 1:
		default:
			out = append(out, k)
		}
	}
	return out
}

// ParseKinds reads a comma-separated list of kinds; "" or "all" is every
// kind.
func ParseKinds(s string) ([]Kind, error) {
	if s == "" || s == "all" {
		return append([]Kind(nil), Kinds...), nil
	}
	var out []Kind
	for _, f := range strings.Split(s, ",") {
		k := Kind(strings.TrimSpace(f))
		found := false
		for _, x := range Kinds {
			found = found || x == k
		}
		if !found {
			var names []string
			for _, x := range Kinds {
				names = append(names, string(x))
			}
			return nil, fmt.Errorf("fault kind %q: want %s", k, strings.Join(names, ", "))
		}
		out = append(out, k)
	}
	return out, nil
}

// onServer reports whether the kind hits the control plane rather than a
// node.
func (k Kind) onServer() bool {
	return k == ServerKill || k == ServerRestart || k.onReplicas()
}

// onReplicas reports whether the kind needs several replicas.
func (k Kind) onReplicas() bool { return k == LeaderKill || k == EtcdMemberKill || k == QuorumLoss }

// Span is a range of durations [Min, Max].
type Span struct{ Min, Max time.Duration }

// draw picks a duration in s uniformly, to the millisecond.
func (s Span) draw(r *rand.Rand) time.Duration {
	if s.Max <= s.Min {
		return s.Min
	}
	ms := int64((s.Max - s.Min) / time.Millisecond)
	return s.Min + time.Duration(r.Int64N(ms+1))*time.Millisecond
}

func (s Span) String() string { return fmt.Sprintf("%s-%s", s.Min, s.Max) }

// ParseSpan reads "2s-30s" (or one duration, "5s").
func ParseSpan(v string) (Span, error) {
	lo, hi, ok := strings.Cut(v, "-")
	if !ok {
		hi = lo
	}
	a, err := time.ParseDuration(strings.TrimSpace(lo))
	if err != nil {
		return Span{}, fmt.Errorf("%q: want MIN-MAX durations such as 2s-30s: %w", v, err)
	}
	b, err := time.ParseDuration(strings.TrimSpace(hi))
	if err != nil {
		return Span{}, fmt.Errorf("%q: want MIN-MAX durations such as 2s-30s: %w", v, err)
	}
	if a < 0 || b < a {
		return Span{}, fmt.Errorf("%q: want 0 <= MIN <= MAX", v)
	}
	return Span{a, b}, nil
}

// PlanConfig shapes a fault plan: the pause before each fault and how long
// each kind lasts.
type PlanConfig struct {
	Gap        Span // before each fault
	AgentDown  Span // agent-kill, agent-supervisor-kill: until the agent is started again
	Partition  Span
	Freeze     Span
	ServerDown Span // server-kill: until the server is started again
	// ReplicaDown is how long leader-kill and etcd-member-kill keep their
	// replica down; QuorumLoss how long quorum-loss keeps its majority
	// down. Zero: DefaultPlan's (Config.Defaults).
	ReplicaDown Span
	QuorumLoss  Span
}

// DefaultPlan is the shape `gangway chaos` uses unless told otherwise.
var DefaultPlan = PlanConfig{
	Gap:        Span{5 * time.Second, 15 * time.Second},
	AgentDown:  Span{1 * time.Second, 6 * time.Second},
	Partition:  Span{2 * time.Second, 8 * time.Second},
	Freeze:     Span{1 * time.Second, 5 * time.Second},
	ServerDown: Span{2 * time.Second, 30 * time.Second},
	// Past the failover (about 5 s) or not: a replica back before another
	// leads takes its own place again.
	ReplicaDown: Span{2 * time.Second, 15 * time.Second},
	QuorumLoss:  Span{2 * time.Second, 6 * time.Second},
}

// Step is one planned fault.
type Step struct {
	// Gap is the pause before the fault.
	Gap  time.Duration `json:"gap"`
	Kind Kind          `json:"kind"`
	// Host is the index of the node the fault hits; -1 for the server.
	// The harness moves it onto a node that runs ranks when the planned
	// one runs none (see busyHost).
	Host int `json:"host"`
	// For is how long the fault lasts (0 for a server restart).
	For time.Duration `json:"for"`
	// Pick draws the replicas etcd-member-kill and quorum-loss hit (see
	// victims); 0 for other kinds.
	Pick int `json:"pick,omitempty"`
}

// Plan draws n faults of the given kinds from seed, each on one of hosts
// nodes: the same arguments give the same plan.
func Plan(seed uint64, n int, kinds []Kind, hosts int, c PlanConfig) []Step {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	out := make([]Step, 0, n)
	for range n {
		s := Step{Gap: c.Gap.draw(r), Kind: kinds[r.IntN(len(kinds))], Host: -1}
		if !s.Kind.onServer() {
			s.Host = r.IntN(hosts)
		}
		switch s.Kind {
		case AgentKill, AgentSupervisorKill, GPUFault:
			s.For = c.AgentDown.draw(r)
		case Partition:
			s.For = c.Partition.draw(r)
		case Freeze:
			s.For = c.Freeze.draw(r)
		case ServerKill:
			s.For = c.ServerDown.draw(r)
		case LeaderKill:
			s.For = c.ReplicaDown.draw(r)
		case EtcdMemberKill:
			s.For, s.Pick = c.ReplicaDown.draw(r), r.IntN(pickRange)
		case QuorumLoss:
			s.For, s.Pick = c.QuorumLoss.draw(r), r.IntN(pickRange)
		}
		out = append(out, s)
	}
	return out
}

// pickRange bounds Step.Pick: a multiple of every candidate count (2 or
// 4 replicas that do not lead, 3 or 5 starts of a majority), so that each
// is drawn as often.
const pickRange = 60

// victims picks the replicas, among n, a control-plane fault hits, given
// the one that leads now (-1: none known) and the step's Pick: the leader
// for leader-kill (none without one); a replica that does not lead for
// etcd-member-kill, the Pick-th of them; a majority for quorum-loss, n/2+1
// replicas in a row from the Pick-th, the leader among them or not; every
// replica for server-kill and server-restart.
func victims(k Kind, n, leader, pick int) []int {
	switch k {
	case LeaderKill:
		if leader < 0 {
			return nil
		}
		return []int{leader}
	case EtcdMemberKill:
		var others []int
		for i := range n {
			if i != leader {
				others = append(others, i)
			}
		}
		if len(others) == 0 {
			return nil
		}
		return []int{others[pick%len(others)]}
	case QuorumLoss:
		out := make([]int, 0, n/2+1)
		for j := range n/2 + 1 {
			out = append(out, (pick+j)%n)
		}
		slices.Sort(out)
		return out
	case ServerKill, ServerRestart:
		out := make([]int, n)
		for i := range out {
			out[i] = i
		}
		return out
	}
	return nil
}

// Length is how long a plan takes at least: its gaps and faults.
func Length(p []Step) time.Duration {
	var d time.Duration
	for _, s := range p {
		d += s.Gap + s.For
	}
	return d
}
