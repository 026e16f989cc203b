package server

import (
	"context"
	"errors"
	"net"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/gangway/gangway/internal/api"
	"github.com/gangway/gangway/internal/api/client"
	"github.com/gangway/gangway/internal/base/wait"
)

// agentEnv is one leading server on its embedded etcd, for the agent
// endpoints' tests.
type agentEnv struct {
	t   testing.TB
	s   *Server
	url string
	ctx context.Context
}

func startAgentEnv(t testing.TB) *agentEnv {
	t.Helper()
	// A node outlives the test without heartbeats.
	s, err := New(Config{DataDir: filepath.Join(t.TempDir(), "server"), NodeTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	e := &agentEnv{t: t, s: s, url: "http://" + ln.Addr().String(), ctx: ctx}
	c := e.client("")
	wctx, wcancel := context.WithTimeout(ctx, time.Minute)
	defer wcancel()
	if err := wait.Until(wctx, 20*time.Millisecond, func() (bool, error) {
		h, err := c.Health(wctx)
		return err == nil && h.Leader, nil
	}); err != nil {
		t.Fatalf("never became leader: %v", err)
	}
	return e
}

// client is an agent's client presenting secret ("" none).
func (e *agentEnv) client(secret string) *client.Client {
	e.t.Helper()
	c, err := client.New(client.Config{Server: e.url, NodeSecret: secret, Retries: -1})
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(c.CloseIdleConnections)
	return c
}

// testNode is a node with two GPUs as an agent registers it.
func testNode(name, agentURL string, env map[string]string) api.Node {
	return api.Node{
		Name: name, Address: "127.0.0.1", AgentURL: agentURL, LaunchEnv: env,
		GPUs: []api.GPU{{Index: 0, UUID: name + "-0", Model: "H100", MemoryBytes: 80 << 30}, {Index: 1, UUID: name + "-1", Model: "H100", MemoryBytes: 80 << 30}},
	}
}

// register registers n through c and returns the secret issued ("" if
// none).
func (e *agentEnv) register(c *client.Client, n api.Node) (string, error) {
	resp, err := c.Register(e.ctx, &api.RegisterRequest{Node: n})
	return resp.NodeSecret, err
}

// lose marks a node lost, as the controller does when it falls silent.
func (e *agentEnv) lose(name string) {
	e.t.Helper()
	if _, err := e.s.st.ModifyNode(e.ctx, name, func(n *api.Node) error {
		n.Status.State, n.Status.LostAt = api.NodeLost, time.Now()
		return nil
	}); err != nil {
		e.t.Fatal(err)
	}
}

func statusOf(err error) int {
	var ae *client.APIError
	if errors.As(err, &ae) {
		return ae.Status
	}
	return 0
}

// TestRegistrationHeldByItsNode: once a node registered, only the agent
// holding its secret replaces its registration, heartbeats for it or polls
// its assignments; the node's agent URL and launch environment stay the
// real agent's.
func TestRegistrationHeldByItsNode(t *testing.T) {
	e := startAgentEnv(t)
	real := e.client("")
	secret, err := e.register(real, testNode("n1", "http://127.0.0.1:1", map[string]string{"NCCL_SOCKET_IFNAME": "eth0"}))
	if err != nil {
		t.Fatal(err)
	}
	if len(secret) < 40 {
		t.Errorf("first registration issued secret %q; want a new one", secret)
	}
	beatAt, _ := e.s.liveness().Get("n1")
	forged := testNode("n1", "http://169.254.169.254", map[string]string{"LD_PRELOAD": "/tmp/evil.so"})
	for _, tc := range []struct {
		name string
		call func() error
		want int
	}{
		{"register without a secret", func() error { _, err := e.register(e.client(""), forged); return err }, http.StatusForbidden},
		{"register with another secret", func() error { _, err := e.register(e.client("not-"+secret), forged); return err }, http.StatusForbidden},
		{"the node is still the real agent's", func() error {
			n, err := e.s.st.Node(e.ctx, "n1")
			if err == nil && (n.AgentURL != "http://127.0.0.1:1" || n.LaunchEnv["LD_PRELOAD"] != "" || n.LaunchEnv["NCCL_SOCKET_IFNAME"] != "eth0") {
				t.Errorf("node after the forged registrations: agentURL %q, launchEnv %v; want the real agent's", n.AgentURL, n.LaunchEnv)
			}
			return err
		}, 0},
		{"heartbeat without the secret", func() error {
			_, err := e.client("").Heartbeat(e.ctx, &api.Heartbeat{Node: "n1"})
			if at, _ := e.s.liveness().Get("n1"); !at.Equal(beatAt) {
				t.Errorf("a forged heartbeat counted as the node's: a dead node would stay ready")
			}
			return err
		}, http.StatusForbidden},
		{"assignments without the secret", func() error {
			_, err := e.client("x").Assignments(e.ctx, client.AssignmentQuery{Node: "n1"})
			return err
		}, http.StatusForbidden},
		{"heartbeat by the holder", func() error { _, err := real.Heartbeat(e.ctx, &api.Heartbeat{Node: "n1"}); return err }, 0},
		{"assignments by the holder", func() error {
			_, err := real.Assignments(e.ctx, client.AssignmentQuery{Node: "n1"})
			return err
		}, 0},
		{"the holder registers again", func() error {
			again, err := e.register(e.client(secret), testNode("n1", "http://127.0.0.1:1", map[string]string{"NCCL_SOCKET_IFNAME": "eth0"}))
			if err == nil && again != "" {
				t.Errorf("holder's registration issued a new secret")
			}
			return err
		}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := statusOf(tc.call()); got != tc.want {
				t.Errorf("status %d; want %d (0: success)", got, tc.want)
			}
		})
	}
	// The forged heartbeats kept nothing alive: only the holder's counted.
	if at, _ := e.s.liveness().Get("n1"); !at.After(beatAt) {
		t.Errorf("the holder's heartbeat was not recorded")
	}
}

// TestHeartbeatDoesNotReviveLostNode: a lost node's heartbeats (even with
// its secret) are answered "register again" and leave it lost; a new
// agent may claim the lost name, and the old secret is then refused.
func TestHeartbeatDoesNotReviveLostNode(t *testing.T) {
	e := startAgentEnv(t)
	old := e.client("")
	if _, err := e.register(old, testNode("n1", "http://127.0.0.1:1", nil)); err != nil {
		t.Fatal(err)
	}
	e.lose("n1")
	for range 3 {
		resp, err := old.Heartbeat(e.ctx, &api.Heartbeat{Node: "n1"})
		if err != nil || !resp.Reregister {
			t.Fatalf("heartbeat for a lost node = %+v, %v; want reregister", resp, err)
		}
	}
	if n, _ := e.s.st.Node(e.ctx, "n1"); n.Status.State != api.NodeLost {
		t.Fatalf("heartbeats made the lost node %s", n.Status.State)
	}
	// Its own agent registers again, keeping its secret, and the node is
	// ready; lost once more, a new agent claims it.
	if s, err := e.register(old, testNode("n1", "http://127.0.0.1:1", nil)); err != nil || s != "" {
		t.Errorf("the holder's registration of its lost node: secret %q, %v; want its own kept", s, err)
	}
	if n, _ := e.s.st.Node(e.ctx, "n1"); n.Status.State != api.NodeReady {
		t.Errorf("re-registered node is %s; want ready", n.Status.State)
	}
	e.lose("n1")
	// A reinstalled node (no secret) claims the lost name.
	claim := e.client("")
	if s, err := e.register(claim, testNode("n1", "http://127.0.0.1:2", nil)); err != nil || s == "" {
		t.Errorf("claiming a lost node: secret %q, %v; want a new secret", s, err)
	}
	if _, err := old.Heartbeat(e.ctx, &api.Heartbeat{Node: "n1"}); statusOf(err) != http.StatusForbidden {
		t.Errorf("old secret's heartbeat after the claim: %v; want 403", err)
	}
	if n, _ := e.s.st.Node(e.ctx, "n1"); n.Status.State != api.NodeReady || n.AgentURL != "http://127.0.0.1:2" {
		t.Errorf("claimed node: %s at %q; want ready at the new agent", n.Status.State, n.AgentURL)
	}
}
