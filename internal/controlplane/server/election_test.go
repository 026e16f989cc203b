package server

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gangway/gangway/internal/api/client"
	"github.com/gangway/gangway/internal/base/wait"
	clientv3 "go.etcd.io/etcd/client/v3"
)

func waitLeader(t *testing.T, c *client.Client, within time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	if err := wait.Until(ctx, 20*time.Millisecond, func() (bool, error) {
		h, err := c.Health(ctx)
		return err == nil && h.Leader, nil
	}); err != nil {
		t.Fatalf("not leader within %s: %v", within, err)
	}
}

// TestRestartTakesOverItsElectionSession: a server that ends as a killed
// one does (its election key and lease left in etcd, alive) and is
// started again on the same data directory takes over its session: it
// leads with the same lease, long before that lease could have expired,
// and its key names the new process. A clean stop then forgets the
// session.
func TestRestartTakesOverItsElectionSession(t *testing.T) {
	cfg := Config{DataDir: filepath.Join(t.TempDir(), "server")}
	// A lease of a minute: waiting for it to expire could not pass the
	// test.
	const ttl = 60
	s1, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	s1.hooks = testHooks{electionTTL: ttl, pid: 1001, abandonSession: true}
	c1, _, stop1 := runServer(t, s1)
	waitLeader(t, c1, time.Minute)
	path := filepath.Join(cfg.DataDir, LeaderSessionFile)
	rec1, err := readLeaderSession(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("%s: %v, %v; want mode 0600", path, fi.Mode(), err)
	}
	stop1() // embedded etcd stopped, the lease kept in its data

	s2, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	s2.hooks = testHooks{electionTTL: ttl, pid: 1002}
	c2, _, stop2 := runServer(t, s2)
	defer stop2()
	waitLeader(t, c2, ttl/2*time.Second)
	rec2, err := readLeaderSession(path)
	if err != nil {
		t.Fatal(err)
	}
	if rec2.Lease != rec1.Lease || rec2.Key != rec1.Key {
		t.Fatalf("restarted with lease %x (key %s); want the previous run's %x (%s) taken over", rec2.Lease, rec2.Key, rec1.Lease, rec1.Key)
	}
	if !strings.HasSuffix(rec2.Value, "/1002") || rec2.PID != 1002 {
		t.Errorf("record after the takeover: %+v; want the new process's", rec2)
	}
	resp, err := s2.st.Client().Get(context.Background(), rec2.Key)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != rec2.Value {
		t.Errorf("election key %s = %v; want the new process's value %q", rec2.Key, resp.Kvs, rec2.Value)
	}
	stop2()
	if _, err := os.Stat(path); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("%s after a clean stop: %v; want it removed (the lease is revoked)", path, err)
	}
}

// TestResumeRefusal: a recorded session is taken over only when it is
// this cluster's and this host's, its maker no longer runs (external
// etcd: an embedded one is locked by a running server), and its lease is
// alive holding only its election key, which names this host.
func TestResumeRefusal(t *testing.T) {
	const lease = 0x694d
	rec := leaderSession{Cluster: "c1", Lease: lease, Key: electionKey(lease), Host: "h1", PID: 10, Value: "h1/10"}
	ok := sessionFacts{cluster: "c1", host: "h1", pid: 20, alive: func(int) bool { return false },
		ttl: 4, keys: []string{electionKey(lease)}, value: "h1/10"}
	for _, c := range []struct {
		name string
		edit func(*leaderSession, *sessionFacts)
		want string // "" takes over
	}{
		{"alive, its key", func(*leaderSession, *sessionFacts) {}, ""},
		{"alive, no key yet (died before campaigning)", func(_ *leaderSession, f *sessionFacts) { f.keys, f.value = nil, "" }, ""},
		{"embedded: the data dir's lock says its maker is gone", func(_ *leaderSession, f *sessionFacts) { f.alive = func(int) bool { return true } }, ""},
		{"same process (a run before in it)", func(r *leaderSession, f *sessionFacts) {
			f.external, f.alive, r.PID = true, func(int) bool { return true }, 20
		}, ""},
		{"external, its maker gone", func(_ *leaderSession, f *sessionFacts) { f.external = true }, ""},
		{"external, its maker still runs", func(_ *leaderSession, f *sessionFacts) {
			f.external, f.alive = true, func(pid int) bool { return pid == 10 }
		}, "still runs on this host"},
		{"expired", func(_ *leaderSession, f *sessionFacts) { f.ttl = -1 }, "expired"},
		{"another cluster's", func(r *leaderSession, _ *sessionFacts) { r.Cluster = "c2" }, "cluster c2's"},
		{"another host's", func(r *leaderSession, _ *sessionFacts) { r.Host = "h2" }, "host h2"},
		{"its key names another host", func(_ *leaderSession, f *sessionFacts) { f.value = "h2/10" }, "not this host's"},
		{"the lease holds another key", func(_ *leaderSession, f *sessionFacts) {
			f.keys = append(f.keys, "/gangway/leader/beef")
		}, "not this replica's election key"},
		{"a key not of the lease", func(r *leaderSession, _ *sessionFacts) { r.Key = electionKey(0xbeef) }, "not of an election session"},
		{"no lease", func(r *leaderSession, _ *sessionFacts) { r.Lease = int64(clientv3.NoLease) }, "not of an election session"},
	} {
		r, f := rec, ok
		c.edit(&r, &f)
		got := resumeRefusal(r, f)
		if (c.want == "") != (got == "") || !strings.Contains(got, c.want) {
			t.Errorf("%s: resumeRefusal = %q; want %q", c.name, got, c.want)
		}
	}
}
