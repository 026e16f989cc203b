package server

import (
	"context"
	"errors"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/gangway/gangway/internal/api"
	"github.com/gangway/gangway/internal/api/client"
	"github.com/gangway/gangway/internal/base/pki"
	"github.com/gangway/gangway/internal/base/wait"
)

// agentEnv is one leading server on its embedded etcd, for the agent
// endpoints' and the authorization tests.
type agentEnv struct {
	t     testing.TB
	s     *Server
	url   string
	ctx   context.Context
	admin *client.Client
	adm   client.Config
}

func startAgentEnv(t testing.TB) *agentEnv {
	return startAgentEnvWith(t, nil)
}

func startAgentEnvWith(t testing.TB, adjust func(*Config)) *agentEnv {
	t.Helper()
	// A node outlives the test without heartbeats.
	cfg := Config{DataDir: filepath.Join(t.TempDir(), "server"), NodeTimeout: time.Minute}
	if adjust != nil {
		adjust(&cfg)
	}
	r := startReplica(t, cfg)
	s, ctx := r.s, context.Background()
	adm, err := s.AdminConfig()
	if err != nil {
		t.Fatal(err)
	}
	e := &agentEnv{t: t, s: s, url: r.url, ctx: ctx, adm: adm}
	e.admin = e.clientFor(adm)
	wctx, wcancel := context.WithTimeout(ctx, time.Minute)
	defer wcancel()
	if err := wait.Until(wctx, 20*time.Millisecond, func() (bool, error) {
		h, err := e.admin.Health(wctx)
		return err == nil && h.Leader, nil
	}); err != nil {
		t.Fatalf("never became leader: %v", err)
	}
	return e
}

func (e *agentEnv) clientFor(cfg client.Config) *client.Client {
	e.t.Helper()
	cfg.Retries = -1
	c, err := client.New(cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(c.CloseIdleConnections)
	return c
}

// anon is a client that trusts the cluster CA and presents nothing.
func (e *agentEnv) anon() *client.Client {
	return e.clientFor(client.Config{Server: e.url, CAFile: e.adm.CAFile})
}

// withToken is a client presenting tok.
func (e *agentEnv) withToken(tok string) *client.Client {
	return e.clientFor(client.Config{Server: e.url, CAFile: e.adm.CAFile, Token: tok})
}

// user makes a token for a user with role (and uid 64000+) and returns
// its client.
func (e *agentEnv) user(name string, role api.Role) *client.Client {
	e.t.Helper()
	uid := 64000 + len(name)
	t, err := e.admin.CreateToken(e.ctx, &api.TokenRequest{User: name, Role: role, UID: &uid})
	if err != nil {
		e.t.Fatal(err)
	}
	return e.withToken(t.Secret)
}

// node joins a node named name (with the admin's token) and returns a
// client presenting its certificate.
func (e *agentEnv) node(name string) *client.Client {
	e.t.Helper()
	csr, key, err := pki.NewCSR(name)
	if err != nil {
		e.t.Fatal(err)
	}
	ans, err := e.admin.Join(e.ctx, &api.JoinRequest{Node: name, CSR: string(csr)})
	if err != nil {
		e.t.Fatal(err)
	}
	kp, err := pki.NewKeyPair([]byte(ans.Certificate), key)
	if err != nil {
		e.t.Fatal(err)
	}
	pool, err := pki.PoolFromPEM([]byte(ans.CA))
	if err != nil {
		e.t.Fatal(err)
	}
	return e.clientFor(client.Config{Server: e.url, TLS: pki.ClientTLS(pool, kp)})
}

// testNode is a node with two GPUs as an agent registers it.
func testNode(name, agentURL string, env map[string]string) api.Node {
	return api.Node{
		Name: name, Address: "127.0.0.1", AgentURL: agentURL, LaunchEnv: env,
		GPUs: []api.GPU{{Index: 0, UUID: name + "-0", Model: "H100", MemoryBytes: 80 << 30}, {Index: 1, UUID: name + "-1", Model: "H100", MemoryBytes: 80 << 30}},
	}
}

// register registers n through c.
func (e *agentEnv) register(c *client.Client, n api.Node) error {
	_, err := c.Register(e.ctx, &api.RegisterRequest{Node: n})
	return err
}

// lose marks a node lost, as the controller does when it falls silent,
// and waits until the server's cache has it so.
func (e *agentEnv) lose(name string) {
	e.t.Helper()
	if _, err := e.s.st.ModifyNode(e.ctx, name, func(n *api.Node) error {
		n.Status.State, n.Status.LostAt = api.NodeLost, time.Now()
		return nil
	}); err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(e.ctx, 30*time.Second)
	defer cancel()
	if err := wait.Until(ctx, 5*time.Millisecond, func() (bool, error) {
		n, ok := e.s.cache.Node(name)
		return ok && n.Status.State == api.NodeLost, nil
	}); err != nil {
		e.t.Fatalf("the cache never saw %s lost: %v", name, err)
	}
}

func statusOf(err error) int {
	var ae *client.APIError
	if errors.As(err, &ae) {
		return ae.Status
	}
	return 0
}

// TestRegistrationHeldByItsNode: only the holder of a node's certificate
// registers it, heartbeats for it or polls its assignments; another
// node's certificate, a user's token or nothing at all is refused, and
// the node's agent URL and launch environment stay the real agent's.
func TestRegistrationHeldByItsNode(t *testing.T) {
	e := startAgentEnv(t)
	real := e.node("n1")
	if err := e.register(real, testNode("n1", "https://127.0.0.1:1", map[string]string{"NCCL_SOCKET_IFNAME": "eth0"})); err != nil {
		t.Fatal(err)
	}
	beatAt, _ := e.s.liveness().Get("n1")
	other := e.node("n2")
	alice := e.user("alice", api.RoleUser)
	forged := testNode("n1", "https://169.254.169.254", map[string]string{"LD_PRELOAD": "/tmp/evil.so"})
	for _, tc := range []struct {
		name string
		call func() error
		want int
	}{
		{"register with nothing", func() error { return e.register(e.anon(), forged) }, http.StatusUnauthorized},
		{"register with another node's certificate", func() error { return e.register(other, forged) }, http.StatusForbidden},
		{"register with a user's token", func() error { return e.register(alice, forged) }, http.StatusForbidden},
		{"register with the admin's token", func() error { return e.register(e.admin, forged) }, http.StatusForbidden},
		{"the node is still the real agent's", func() error {
			n, err := e.s.st.Node(e.ctx, "n1")
			if err == nil && (n.AgentURL != "https://127.0.0.1:1" || n.LaunchEnv["LD_PRELOAD"] != "" || n.LaunchEnv["NCCL_SOCKET_IFNAME"] != "eth0") {
				t.Errorf("node after the forged registrations: agentURL %q, launchEnv %v; want the real agent's", n.AgentURL, n.LaunchEnv)
			}
			return err
		}, 0},
		{"heartbeat with another node's certificate", func() error {
			_, err := other.Heartbeat(e.ctx, &api.Heartbeat{Node: "n1"})
			if at, _ := e.s.liveness().Get("n1"); !at.Equal(beatAt) {
				t.Errorf("a forged heartbeat counted as the node's: a dead node would stay ready")
			}
			return err
		}, http.StatusForbidden},
		{"heartbeat with nothing", func() error { _, err := e.anon().Heartbeat(e.ctx, &api.Heartbeat{Node: "n1"}); return err }, http.StatusUnauthorized},
		{"assignments with another node's certificate", func() error {
			_, err := other.Assignments(e.ctx, client.AssignmentQuery{Node: "n1"})
			return err
		}, http.StatusForbidden},
		{"a node's certificate calls the user API", func() error { _, err := real.Jobs(e.ctx, client.JobQuery{}); return err }, http.StatusForbidden},
		{"heartbeat by the holder", func() error { _, err := real.Heartbeat(e.ctx, &api.Heartbeat{Node: "n1"}); return err }, 0},
		{"assignments by the holder", func() error {
			_, err := real.Assignments(e.ctx, client.AssignmentQuery{Node: "n1"})
			return err
		}, 0},
		{"the holder registers again", func() error {
			return e.register(real, testNode("n1", "https://127.0.0.1:1", map[string]string{"NCCL_SOCKET_IFNAME": "eth0"}))
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

// TestHeartbeatDoesNotReviveLostNode: a lost node's heartbeats are
// answered "register again" and leave it lost; its agent registers again
// and it is ready.
func TestHeartbeatDoesNotReviveLostNode(t *testing.T) {
	e := startAgentEnv(t)
	old := e.node("n1")
	if err := e.register(old, testNode("n1", "https://127.0.0.1:1", nil)); err != nil {
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
	if err := e.register(old, testNode("n1", "https://127.0.0.1:1", nil)); err != nil {
		t.Errorf("the holder's registration of its lost node: %v", err)
	}
	if n, _ := e.s.st.Node(e.ctx, "n1"); n.Status.State != api.NodeReady {
		t.Errorf("re-registered node is %s; want ready", n.Status.State)
	}
}
