package agent

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gangway/gangway/internal/api"
	"github.com/gangway/gangway/internal/node/driver"
)

// Accounts with no passwd entry: a rank runs as a uid, named or not.
var (
	alice = &api.RunAs{User: "alice", UID: 64001, GID: 64001}
	bob   = &api.RunAs{User: "bob", UID: 64002, GID: 64002}
)

func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to switch users; run the tests as root (CI does)")
	}
}

// openDir is a temporary directory every user may pass through
// (t.TempDir is 0700, root's), as a node's data directory and a
// checkpoint root are.
func openDir(t *testing.T) string {
	t.Helper()
	d := t.TempDir()
	for _, p := range []string{filepath.Dir(d), d} {
		if err := os.Chmod(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return d
}

// rankAgent is an agent with a supervisor and nothing else (no server):
// enough to start ranks with start and watch them end.
func rankAgent(t *testing.T) (*Agent, context.Context) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	data := openDir(t)
	sup, err := driver.Connect(context.Background(), filepath.Join(data, "supervisor"), exe, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	a := &Agent{cfg: Config{Name: "n1", DataDir: data, Executable: exe}, log: slog.New(slog.DiscardHandler),
		drv: sup, tasks: map[string]*task{}, ckptSent: map[string]int64{}}
	t.Cleanup(func() {
		cancel()
		a.bg.Wait()
		sup.Close()
		driver.KillAll(filepath.Join(data, "supervisor"))
	})
	return a, ctx
}

var rankSeq int

// run starts a rank of its own job running sh -c script and waits until
// it has ended; it returns the rank's task.
func run(t *testing.T, a *Agent, ctx context.Context, ra *api.RunAs, ckpt, script string) *task {
	t.Helper()
	rankSeq++
	asg := api.Assignment{JobID: "runas" + strconv.Itoa(rankSeq), Attempt: 1, Rank: 0, Node: "n1",
		Command: []string{"sh", "-c", script}, Env: map[string]string{"CKPT": ckpt},
		CheckpointD: ckpt, Files: map[string]string{"hostfile": "n1 slots=1\n"}, RunAs: ra}
	a.start(ctx, asg)
	deadline := time.Now().Add(20 * time.Second)
	for {
		a.mu.Lock()
		tk := a.tasks[asg.TaskKey()]
		done := tk != nil && tk.status.State.Terminal()
		a.mu.Unlock()
		if done {
			return tk
		}
		if time.Now().After(deadline) {
			t.Fatalf("rank %s did not end", asg.TaskKey())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func output(t *testing.T, tk *task, stream string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(tk.dir, stream+".log"))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func stat(t *testing.T, path string) (uid, gid int, mode os.FileMode) {
	t.Helper()
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	return int(st.Uid), int(st.Gid), fi.Mode()
}

// TestRankRunsAsItsUser: an assignment's run-as account is the rank's
// uid and gid, with no other group (not root's group 0), and what the
// agent makes for the rank is that account's alone.
func TestRankRunsAsItsUser(t *testing.T) {
	needRoot(t)
	a, ctx := rankAgent(t)
	tk := run(t, a, ctx, alice, "", `id -u; id -g; id -G; echo "$HOME $USER"`)
	if tk.status.ExitCode != 0 {
		t.Fatalf("rank: %+v; stderr: %s", tk.status, output(t, tk, "stderr"))
	}
	want := "64001\n64001\n64001\n" + tk.dir + " alice\n"
	if got := output(t, tk, "stdout"); got != want {
		t.Errorf("id -u, -g, -G and $HOME $USER printed %q; want %q", got, want)
	}
	for _, c := range []struct {
		path string
		mode os.FileMode
	}{
		{tk.dir, os.ModeDir | 0o700},
		{filepath.Join(tk.dir, "hostfile"), 0o600},
		{filepath.Join(tk.dir, "stdout.log"), 0o600},
		{filepath.Join(tk.dir, "stderr.log"), 0o600},
	} {
		if uid, gid, mode := stat(t, c.path); uid != alice.UID || gid != alice.GID || mode != c.mode {
			t.Errorf("%s: %d:%d %v; want %d:%d %v", c.path, uid, gid, mode, alice.UID, alice.GID, c.mode)
		}
	}
}

// TestRankCannotReadAnotherUsersCheckpoint: a rank running under a
// non-root uid cannot read another user's checkpoint. The agent makes
// each job's checkpoint directory its user's, mode 0700, so a checkpoint
// written with the usual umask (0644) is still its user's alone.
func TestRankCannotReadAnotherUsersCheckpoint(t *testing.T) {
	needRoot(t)
	a, ctx := rankAgent(t)
	root := openDir(t) // the server's checkpoint root: root's, 0755
	ckA := filepath.Join(root, "7", "job-a")
	tk := run(t, a, ctx, alice, ckA, `umask 022; echo weights > "$CKPT/model.pt"`)
	if tk.status.ExitCode != 0 {
		t.Fatalf("alice's rank: %+v; stderr: %s", tk.status, output(t, tk, "stderr"))
	}
	if uid, gid, mode := stat(t, ckA); uid != alice.UID || gid != alice.GID || mode != os.ModeDir|0o700 {
		t.Errorf("checkpoint dir: %d:%d %v; want %d:%d drwx------", uid, gid, mode, alice.UID, alice.GID)
	}
	if uid, _, mode := stat(t, filepath.Dir(ckA)); uid != 0 || mode != os.ModeDir|0o755 {
		t.Errorf("its parent, made by the agent: uid %d %v; want root's, drwxr-xr-x", uid, mode)
	}
	model := filepath.Join(ckA, "model.pt")
	tk = run(t, a, ctx, bob, filepath.Join(root, "7", "job-b"), `cat `+model)
	if tk.status.ExitCode == 0 || !strings.Contains(output(t, tk, "stderr"), "Permission denied") {
		t.Errorf("bob's rank read alice's checkpoint: %+v, stdout %q, stderr %q; want permission denied",
			tk.status, output(t, tk, "stdout"), output(t, tk, "stderr"))
	}
	// The control: the file is there, and its owner reads it.
	tk = run(t, a, ctx, alice, ckA, `cat `+model)
	if got := output(t, tk, "stdout"); tk.status.ExitCode != 0 || got != "weights\n" {
		t.Errorf("alice's rank reading her checkpoint: %+v, %q; want weights", tk.status, got)
	}
}

// TestPlantedCheckpointSymlinkIsNotChowned: where the checkpoint directory
// would be (or on the way to it) a user put a symlink to a directory of
// root's; the agent, as root, follows none of the user's and changes
// nothing it points at.
func TestPlantedCheckpointSymlinkIsNotChowned(t *testing.T) {
	needRoot(t)
	a, ctx := rankAgent(t)
	root := openDir(t)
	victim := filepath.Join(root, "etc")
	if err := os.Mkdir(victim, 0o755); err != nil {
		t.Fatal(err)
	}
	// The last element: a symlink of bob's named as alice's job's.
	leaf := filepath.Join(root, "job-leaf")
	if err := os.Symlink(victim, leaf); err != nil {
		t.Fatal(err)
	}
	if err := os.Lchown(leaf, bob.UID, bob.GID); err != nil {
		t.Fatal(err)
	}
	// A parent: bob's directory holding bob's symlink.
	bobs := filepath.Join(root, "bob")
	if err := os.Mkdir(bobs, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(bobs, bob.UID, bob.GID); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(victim, filepath.Join(bobs, "link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Lchown(filepath.Join(bobs, "link"), bob.UID, bob.GID); err != nil {
		t.Fatal(err)
	}
	for _, ck := range []string{leaf, filepath.Join(bobs, "link", "job-parent")} {
		tk := run(t, a, ctx, alice, ck, "true")
		if tk.status.State != api.RankExited || tk.status.ExitCode != 0 {
			t.Errorf("checkpoint dir %s: the rank %+v; want it to run (its checkpoints are the workload's affair)", ck, tk.status)
		}
	}
	if uid, _, mode := stat(t, victim); uid != 0 || mode != os.ModeDir|0o755 {
		t.Errorf("the symlinks' target: uid %d %v; want root's, drwxr-xr-x", uid, mode)
	}
	if uid, _, _ := stat(t, leaf); uid != bob.UID {
		t.Errorf("the planted symlink is uid %d's now; want bob's", uid)
	}
	if _, err := os.Lstat(filepath.Join(victim, "job-parent")); err == nil {
		t.Errorf("the agent made a directory through bob's symlink")
	}
}

// TestUnprivilegedAgentRefusesAnotherUser: an agent that is not root
// cannot switch users, and says so as the rank's failure, before it makes
// anything; a rank of its own uid runs as it.
func TestUnprivilegedAgentRefusesAnotherUser(t *testing.T) {
	data := t.TempDir()
	a := &Agent{cfg: Config{Name: "n1", DataDir: data}, log: slog.New(slog.DiscardHandler),
		tasks: map[string]*task{}, self: &driver.Account{UID: 1000, GID: 1000}}
	asg := api.Assignment{JobID: "9", Attempt: 1, Rank: 0, Node: "n1", Command: []string{"true"},
		RunAs: &api.RunAs{User: "carol", UID: 1001, GID: 1001}}
	a.start(context.Background(), asg)
	tk := a.tasks[asg.TaskKey()]
	want := "cannot run as carol (uid 1001): the agent runs as uid 1000 without privilege to switch users; run the agent as root or submit as uid 1000"
	if tk.status.State != api.RankFailedStart || tk.status.Message != want {
		t.Errorf("status = %s %q; want %s %q", tk.status.State, tk.status.Message, api.RankFailedStart, want)
	}
	if _, err := os.Stat(tk.dir); err == nil {
		t.Errorf("the refused rank's task directory was made")
	}
}

func TestPlanRunAs(t *testing.T) {
	acct := func(uid, gid int) *driver.Account { return &driver.Account{UID: uid, GID: gid} }
	for _, tc := range []struct {
		name     string
		ra       *api.RunAs
		self     driver.Account
		switchTo *driver.Account
		private  bool
		refused  string
	}{
		{name: "no account: the agent's, as before", ra: nil, self: driver.Account{UID: 0}},
		{name: "root switches", ra: &api.RunAs{UID: 64001, GID: 64002}, self: driver.Account{UID: 0}, switchTo: acct(64001, 64002), private: true},
		{name: "root as root", ra: &api.RunAs{UID: 0, GID: 0}, self: driver.Account{UID: 0}, private: true},
		{name: "root to group only", ra: &api.RunAs{UID: 0, GID: 5}, self: driver.Account{UID: 0}, switchTo: acct(0, 5), private: true},
		{name: "unprivileged, its own uid", ra: &api.RunAs{UID: 1000, GID: 1000}, self: driver.Account{UID: 1000, GID: 1000}, private: true},
		{name: "unprivileged, another uid", ra: &api.RunAs{UID: 1001, GID: 1001}, self: driver.Account{UID: 1000, GID: 1000},
			refused: "cannot run as uid 1001: the agent runs as uid 1000 without privilege to switch users; run the agent as root or submit as uid 1000"},
		{name: "not an account", ra: &api.RunAs{UID: -1, GID: 3}, self: driver.Account{UID: 0}, refused: "cannot run as uid -1 gid 3: not an account"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, refused := planRunAs(tc.ra, tc.self)
			if refused != tc.refused {
				t.Fatalf("refused %q; want %q", refused, tc.refused)
			}
			if (p.switchTo == nil) != (tc.switchTo == nil) || (p.switchTo != nil && *p.switchTo != *tc.switchTo) {
				t.Errorf("switchTo %v; want %v", p.switchTo, tc.switchTo)
			}
			if p.private != tc.private {
				t.Errorf("private %v; want %v", p.private, tc.private)
			}
		})
	}
}
