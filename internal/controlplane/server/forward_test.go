package server

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gangway/gangway/internal/api"
	"github.com/gangway/gangway/internal/api/client"
	"github.com/gangway/gangway/internal/base/pki"
	"github.com/gangway/gangway/internal/base/testenv"
	"github.com/gangway/gangway/internal/base/wait"
	"github.com/gangway/gangway/internal/controlplane/store"
	"go.uber.org/goleak"
)

// replica is one server of several on a shared etcd.
type replica struct {
	s    *Server
	url  string
	stop func()
}

func startReplica(t testing.TB, cfg Config) *replica {
	t.Helper()
	s, err := New(cfg)
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
	select {
	case <-s.Ready():
	case err := <-done:
		t.Fatalf("Run: %v", err)
	}
	r := &replica{s: s, url: "https://" + ln.Addr().String()}
	stopped := false
	r.stop = func() {
		if !stopped {
			stopped = true
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run: %v", err)
			}
		}
	}
	t.Cleanup(r.stop)
	return r
}

// sharedEtcd starts an etcd for replicas to share, and the cluster CA
// they share, until the test ends; cfg configures replica name on them.
func sharedEtcd(t *testing.T, ctx context.Context) (ca *pki.CA, cfg func(name string) Config) {
	t.Helper()
	dir := t.TempDir()
	etcd, err := store.StartEmbedded(ctx, store.EmbeddedConfig{Dir: filepath.Join(dir, "etcd")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(etcd.Close)
	if ca, _, err = pki.LoadOrCreateCA(filepath.Join(dir, "pki")); err != nil {
		t.Fatal(err)
	}
	return ca, func(name string) Config {
		return Config{DataDir: filepath.Join(dir, name), EtcdEndpoints: []string{etcd.Endpoint}, EtcdTLS: etcd.ClientTLS(),
			TLSCA: filepath.Join(dir, "pki", pki.CAFile), TLSCAKey: filepath.Join(dir, "pki", pki.CAKeyFile),
			CheckpointRoot: filepath.Join(dir, "ckpt"), NodeTimeout: time.Minute}
	}
}

// TestReplicasForwardAgentsToTheLeader: two replicas on one etcd; an agent
// that talks to the one that does not lead registers and heartbeats
// through it (the leader's heartbeat memory has it), and keeps doing so
// through the same replica once that one leads.
func TestReplicasForwardAgentsToTheLeader(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ca, cfg := sharedEtcd(t, ctx)
	r1 := startReplica(t, cfg("s1"))
	adm, err := r1.s.AdminConfig()
	if err != nil {
		t.Fatal(err)
	}
	if err := wait.Until(ctx, 20*time.Millisecond, func() (bool, error) { return r1.s.controller() != nil, nil }); err != nil {
		t.Fatal(err)
	}
	r2 := startReplica(t, cfg("s2"))

	// The node's certificate, from the shared CA.
	csr, key, _ := pki.NewCSR("n1")
	cert, err := ca.SignNode(csr, "n1", nil, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	kp, _ := pki.NewKeyPair(cert, key)
	agent, err := client.New(client.Config{Server: r2.url, TLS: pki.ClientTLS(ca.Pool(), kp), Retries: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer agent.CloseIdleConnections()
	// The replica learns the leader's URL from the store.
	var reg api.RegisterResponse
	if err := wait.Until(ctx, 50*time.Millisecond, func() (bool, error) {
		reg, err = agent.Register(ctx, &api.RegisterRequest{Node: testNode("n1", "https://127.0.0.1:1", nil)})
		return err == nil, nil
	}); err != nil {
		t.Fatalf("register through the replica that does not lead: %v", err)
	}
	if reg.HeartbeatInterval <= 0 {
		t.Errorf("registration answer %+v carries no timing contract", reg)
	}
	if _, err := agent.Heartbeat(ctx, &api.Heartbeat{Node: "n1", SentAt: time.Now(), AckRevision: 7}); err != nil {
		t.Fatalf("heartbeat through the replica: %v", err)
	}
	if _, ack := r1.s.liveness().Get("n1"); ack != 7 {
		t.Errorf("the leader's heartbeat memory has ack %d for n1; want 7 (forwarded)", ack)
	}
	if _, _, heard := r2.s.liveness().Run("n1"); heard {
		t.Error("the replica that does not lead kept the heartbeat itself")
	}
	// Only a replica's certificate may speak for a node: even an admin's
	// token with the header is not the node.
	tc, err := client.TLSConfig(adm)
	if err != nil {
		t.Fatal(err)
	}
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: tc}}
	defer hc.CloseIdleConnections()
	req, _ := http.NewRequestWithContext(ctx, "POST", r1.url+"/v1/agent/heartbeat", strings.NewReader(`{"node":"n1"}`))
	req.Header.Set("Authorization", "Bearer "+adm.Token)
	req.Header.Set(forwardHeader, "n1")
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("an admin's token with %s: %s; want 403", forwardHeader, resp.Status)
	}

	// The leader goes; the replica takes over and answers itself.
	r1.stop()
	if err := wait.Until(ctx, 50*time.Millisecond, func() (bool, error) { return r2.s.controller() != nil, nil }); err != nil {
		t.Fatalf("the second replica never led: %v", err)
	}
	if _, err := agent.Heartbeat(ctx, &api.Heartbeat{Node: "n1", SentAt: time.Now(), AckRevision: 9}); err != nil {
		t.Fatalf("heartbeat to the new leader: %v", err)
	}
	if _, ack := r2.s.liveness().Get("n1"); ack != 9 {
		t.Errorf("the new leader's heartbeat memory has ack %d; want 9", ack)
	}
}

// TestThreeReplicasFormTheirOwnEtcd: three replicas, each with an embedded
// etcd member of one cluster (peers over TLS with the shared CA); one
// leads, an agent may use any of them, and when the leader stops another
// leads on the two members left.
func TestThreeReplicasFormTheirOwnEtcd(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three etcd members")
	}
	before := goleak.IgnoreCurrent()
	dir := t.TempDir()
	ca, _, err := pki.LoadOrCreateCA(filepath.Join(dir, "pki"))
	if err != nil {
		t.Fatal(err)
	}
	peers := make([]string, 3)
	var members []string
	for i := range peers {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		peers[i] = ln.Addr().String()
		ln.Close()
		members = append(members, fmt.Sprintf("s%d=https://%s", i+1, peers[i]))
	}
	type started struct {
		i int
		r *replica
	}
	out := make(chan started, 3)
	for i := range peers {
		cfg := Config{DataDir: filepath.Join(dir, fmt.Sprintf("s%d", i+1)), EtcdName: fmt.Sprintf("s%d", i+1),
			EtcdPeerAddr: peers[i], InitialCluster: strings.Join(members, ","),
			TLSCA: filepath.Join(dir, "pki", pki.CAFile), TLSCAKey: filepath.Join(dir, "pki", pki.CAKeyFile), NodeTimeout: time.Minute}
		go func() { out <- started{i, startReplica(t, cfg)} }()
	}
	rs := make([]*replica, 3)
	for range rs {
		s := <-out
		if s.r == nil {
			t.FailNow()
		}
		rs[s.i] = s.r
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	leader := func(among []*replica) *replica {
		t.Helper()
		var l *replica
		if err := wait.Until(ctx, 50*time.Millisecond, func() (bool, error) {
			n := 0
			for _, r := range among {
				if r.s.controller() != nil {
					l, n = r, n+1
				}
			}
			return n == 1, nil
		}); err != nil {
			t.Fatalf("never exactly one leader: %v", err)
		}
		return l
	}
	l := leader(rs)
	var rest []*replica
	for _, r := range rs {
		if r != l {
			rest = append(rest, r)
		}
	}
	csr, key, _ := pki.NewCSR("n1")
	cert, _ := ca.SignNode(csr, "n1", nil, time.Hour)
	kp, _ := pki.NewKeyPair(cert, key)
	agent, err := client.New(client.Config{Server: rest[0].url, TLS: pki.ClientTLS(ca.Pool(), kp), Retries: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer agent.CloseIdleConnections()
	if err := wait.Until(ctx, 50*time.Millisecond, func() (bool, error) {
		_, err := agent.Register(ctx, &api.RegisterRequest{Node: testNode("n1", "https://127.0.0.1:1", nil)})
		return err == nil, nil
	}); err != nil {
		t.Fatalf("register through a replica that does not lead: %v", err)
	}
	l.stop()
	l2 := leader(rest)
	if _, err := l2.s.st.Node(ctx, "n1"); err != nil {
		t.Errorf("after the leader stopped, the store on two members lost node n1: %v", err)
	}
	for _, r := range rest {
		r.stop()
	}
	// Members' peer connections take a few seconds to wind down after
	// the last member closes; wait for them rather than report them.
	wctx, wcancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer wcancel()
	_ = wait.Until(wctx, 200*time.Millisecond, func() (bool, error) {
		return goleak.Find(append(testenv.EtcdLeaks(), before)...) == nil, nil
	})
}
