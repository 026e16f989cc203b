package driver

import (
	"io"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
)

// Accounts with no passwd entry: a rank runs as a uid, named or not.
var (
	alice = &Account{UID: 64001, GID: 64001}
	bob   = &Account{UID: 64002, GID: 64002}
)

func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to switch users; run the tests as root (CI does)")
	}
}

// userDir is a directory the account a owns, mode 0700, under a temporary
// directory everyone may pass through (t.TempDir is 0700, root's).
func userDir(t *testing.T, a *Account) string {
	t.Helper()
	tmp := t.TempDir()
	for _, d := range []string{filepath.Dir(tmp), tmp} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	dir := filepath.Join(tmp, "task")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(dir, a.UID, a.GID); err != nil {
		t.Fatal(err)
	}
	return dir
}

func ownerAndMode(t *testing.T, path string) (int, os.FileMode) {
	t.Helper()
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	return int(fi.Sys().(*syscall.Stat_t).Uid), fi.Mode()
}

// TestRankRunsAsItsAccount: a rank with an account runs as its uid and
// gid, with no other group (not the supervisor's root group), directly
// and through cg-exec (a rank with limits), and its log files are its
// own and private.
func TestRankRunsAsItsAccount(t *testing.T) {
	needRoot(t)
	s, _ := newSup(t)
	for _, tc := range []struct {
		name   string
		memory int64
	}{{"direct", 0}, {"through cg-exec", 1 << 30}} {
		t.Run(tc.name, func(t *testing.T) {
			dir := userDir(t, alice)
			seq++
			h, err := s.Start(Spec{Key: "j/1/runas" + strconv.Itoa(seq), Command: []string{"sh", "-c", "id -u; id -g; id -G; touch mine"},
				Env: []string{"PATH=" + os.Getenv("PATH")}, Dir: dir, StateDir: dir, RunAs: alice,
				MemoryBytes: tc.memory, CgroupName: "t"})
			if err != nil {
				t.Fatal(err)
			}
			if e := wait(t, h); e.Code != 0 {
				t.Fatalf("exit = %+v; stderr: %s", e, readAll(t, dir, "stderr"))
			}
			if got, want := readAll(t, dir, "stdout"), "64001\n64001\n64001\n"; got != want {
				t.Errorf("id -u, -g, -G printed %q; want %q (uid, gid and no other group)", got, want)
			}
			if uid, _ := ownerAndMode(t, filepath.Join(dir, "mine")); uid != alice.UID {
				t.Errorf("a file the rank made is uid %d's; want %d", uid, alice.UID)
			}
			for _, f := range []string{"stdout.log", "stderr.log"} {
				if uid, mode := ownerAndMode(t, filepath.Join(dir, f)); uid != alice.UID || mode.Perm() != 0o600 {
					t.Errorf("%s: uid %d mode %v; want uid %d mode 0600", f, uid, mode.Perm(), alice.UID)
				}
			}
		})
	}
}

// TestPlantedLogSymlinkIsNotWrittenThrough: the rank's user owns the task
// directory and can put a symlink where the supervisor (root) opens or
// rotates a log file; root neither writes through it nor changes its
// target.
func TestPlantedLogSymlinkIsNotWrittenThrough(t *testing.T) {
	needRoot(t)
	s, _ := newSup(t)
	victim := filepath.Join(t.TempDir(), "shadow")
	if err := os.WriteFile(victim, []byte("root's secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	dir := userDir(t, alice)
	// The rank swaps stdout.log for a symlink, then writes past the bound
	// so that the copier rotates and opens stdout.log anew.
	script := `ln -sf ` + victim + ` stdout.log.1; rm stdout.log; ln -s ` + victim + ` stdout.log; ` + seqCmd(2000)
	h, err := s.Start(Spec{Key: "j/1/symlink", Command: []string{"sh", "-c", script},
		Env: []string{"PATH=" + os.Getenv("PATH")}, Dir: dir, StateDir: dir, RunAs: alice, LogFileBytes: 1024, LogFiles: 3})
	if err != nil {
		t.Fatal(err)
	}
	if e := wait(t, h); e.Code != 0 {
		t.Fatalf("exit = %+v; stderr: %s", e, readAll(t, dir, "stderr"))
	}
	b, err := os.ReadFile(victim)
	if err != nil || string(b) != "root's secret\n" {
		t.Errorf("the symlink's target now holds %q, %v; want it untouched", b, err)
	}
	if uid, mode := ownerAndMode(t, victim); uid != 0 || mode.Perm() != 0o600 {
		t.Errorf("the symlink's target is uid %d mode %v now; want root's, 0600", uid, mode.Perm())
	}
	// A log file planted before the start (a task directory used again)
	// is not opened through either.
	dir = userDir(t, alice)
	if err := os.Symlink(victim, filepath.Join(dir, "stderr.log")); err != nil {
		t.Fatal(err)
	}
	_, err = s.Start(Spec{Key: "j/1/planted", Command: []string{"sh", "-c", "echo x >&2"},
		Env: []string{"PATH=" + os.Getenv("PATH")}, Dir: dir, StateDir: dir, RunAs: alice})
	if err == nil {
		t.Errorf("a start whose stderr.log is a symlink succeeded; want it refused")
	}
	if b, _ := os.ReadFile(victim); string(b) != "root's secret\n" {
		t.Errorf("the symlink's target now holds %q; want it untouched", b)
	}
	if uid, _ := ownerAndMode(t, victim); uid != 0 {
		t.Errorf("the symlink's target is uid %d's now; want root's", uid)
	}
}

// TestRotatedLogSymlinkIsNotRead: the logs endpoint reads no file the
// rank's user planted as a rotated log (root would show it as the rank's).
func TestRotatedLogSymlinkIsNotRead(t *testing.T) {
	victim := filepath.Join(t.TempDir(), "shadow")
	if err := os.WriteFile(victim, []byte("root's secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "stdout.log"), []byte("mine\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(victim, filepath.Join(dir, "stdout.log.1")); err != nil {
		t.Fatal(err)
	}
	r, err := OpenLog(dir, "stdout")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	got, _ := io.ReadAll(r)
	if string(got) != "mine\n" {
		t.Errorf("the rank's log reads %q; want only %q, not the symlink's target", got, "mine\n")
	}
}

// seqCmd prints 1..n, one a line.
func seqCmd(n int) string {
	return "i=0; while [ $i -lt " + strconv.Itoa(n) + " ]; do i=$((i+1)); echo $i; done"
}
