package agent

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/gangway/gangway/internal/api"
	"github.com/gangway/gangway/internal/node/driver"
	"golang.org/x/sys/unix"
)

// A rank with a run-as account (api.Assignment.RunAs) runs as that uid,
// with its gid as its only group, and what the agent makes for it is that
// account's and no one else's: the task directory (mode 0700), the files
// in it, its log files (the supervisor creates those, mode 0600), and the
// checkpoint directory when the agent makes it. The agent, as root, still
// reads and writes them all.
//
// The rank's user controls what is under those directories while the rank
// runs, so root never follows a path through them: it creates a directory
// and then changes the one it opened, never an existing path by name; it
// opens files there without following a symlink (see driver.OpenRegular);
// and it leaves an existing checkpoint directory as it finds it.

// runAsPlan is how this node honours a rank's run-as account.
type runAsPlan struct {
	// switchTo is the account the rank's process runs as; nil: the
	// agent's own.
	switchTo *driver.Account
	// owner owns what the agent makes for the rank; nil: the agent.
	owner *driver.Account
	// private: the rank's directories are mode 0700 and its files 0600,
	// not 0755 and 0644.
	private bool
	// name is the account's user name, "" when unknown.
	name string
}

// planRunAs decides how to run a rank whose assignment names ra when the
// agent runs as self, or returns the reason it cannot (which the user sees
// as the rank's failure): only root switches users. A nil ra runs the rank
// as the agent, as before run-as accounts.
func planRunAs(ra *api.RunAs, self driver.Account) (runAsPlan, string) {
	if ra == nil {
		return runAsPlan{}, ""
	}
	who := "uid " + strconv.Itoa(ra.UID)
	if ra.User != "" {
		who = ra.User + " (uid " + strconv.Itoa(ra.UID) + ")"
	}
	if ra.UID < 0 || ra.GID < 0 {
		return runAsPlan{}, fmt.Sprintf("cannot run as %s gid %d: not an account", who, ra.GID)
	}
	p := runAsPlan{private: true, name: ra.User}
	switch {
	case self.UID == 0 && (ra.UID != 0 || ra.GID != 0):
		acct := driver.Account{UID: ra.UID, GID: ra.GID}
		p.switchTo, p.owner = &acct, &acct
	case ra.UID != self.UID:
		return runAsPlan{}, fmt.Sprintf("cannot run as %s: the agent runs as uid %d without privilege to switch users; run the agent as root or submit as uid %d",
			who, self.UID, self.UID)
	}
	// Otherwise the account is the agent's own: it runs as the agent,
	// with no switch (an unprivileged agent cannot change even its gid).
	return p, ""
}

// selfAccount is the agent's own effective account.
func (a *Agent) selfAccount() driver.Account {
	if a.self != nil {
		return *a.self
	}
	return driver.Account{UID: os.Geteuid(), GID: os.Getegid()}
}

// dirMode and fileMode are the modes of what the agent makes for a rank.
func (p runAsPlan) dirMode() uint32 {
	if p.private {
		return 0o700
	}
	return 0o755
}

func (p runAsPlan) fileMode() uint32 {
	if p.private {
		return 0o600
	}
	return 0o644
}

// makeTaskDir creates the rank's directory (and its bucket, root's) and
// gives it to the rank's account. Its parent is the agent's, which no rank
// can write, so an existing directory of that name is the agent's from an
// earlier start and is taken over as well; the change is made through a
// descriptor opened without following a symlink all the same.
func makeTaskDir(dir string, p runAsPlan) error {
	err := os.Mkdir(dir, fs.FileMode(p.dirMode()))
	if errors.Is(err, fs.ErrNotExist) {
		if err = os.MkdirAll(filepath.Dir(dir), 0o755); err == nil { // the first rank of its bucket
			err = os.Mkdir(dir, fs.FileMode(p.dirMode()))
		}
	}
	if errors.Is(err, fs.ErrExist) {
		err = nil
	}
	if err != nil || !p.private {
		return err
	}
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("task directory %s: %w", dir, err)
	}
	defer unix.Close(fd)
	if err := giveDir(fd, p); err != nil {
		return fmt.Errorf("task directory %s: %w", dir, err)
	}
	return nil
}

// giveDir makes the open directory fd the plan's owner's (when it has
// one), with the plan's mode.
func giveDir(fd int, p runAsPlan) error {
	if p.owner != nil {
		if err := unix.Fchown(fd, p.owner.UID, p.owner.GID); err != nil {
			return fmt.Errorf("chown to %d:%d: %w", p.owner.UID, p.owner.GID, err)
		}
	}
	if err := unix.Fchmod(fd, p.dirMode()); err != nil {
		return fmt.Errorf("chmod: %w", err)
	}
	return nil
}

// writeTaskFile writes one of the assignment's files into the task
// directory, a new file in place of whatever had its name (never through a
// symlink there), owned by the plan's owner.
func writeTaskFile(dir, name, content string, p runAsPlan) error {
	path := filepath.Join(dir, name)
	_ = unix.Unlink(path)
	fd, err := unix.Open(path, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, p.fileMode())
	if err != nil {
		return fmt.Errorf("assignment file %s: %w", path, err)
	}
	f := os.NewFile(uintptr(fd), path)
	if p.owner != nil {
		if err = f.Chown(p.owner.UID, p.owner.GID); err != nil {
			err = fmt.Errorf("assignment file %s: %w", path, err)
		}
	}
	if err == nil {
		if _, err = f.WriteString(content); err != nil {
			err = fmt.Errorf("assignment file %s: %w", path, err)
		}
	}
	if cerr := f.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("assignment file %s: %w", path, cerr)
	}
	return err
}

// makeCheckpointDir creates the job's checkpoint directory for a rank with
// a run-as account, that account's with mode 0700, so that no other user's
// rank reads its checkpoints; missing parents are made the agent's, mode
// 0755 (the checkpoint root is root's, and its user could not make them).
// An existing directory is left as it is, whoever owns it. It reports
// whether it made the directory.
//
// The path is the job's (spec.checkpointDir), and its parents may be the
// user's: it walks them from / with a descriptor per directory, following
// a symlink only when root owns it (an operator put it there), and makes
// the last element with mkdirat and changes only what it then opens,
// without following, as the directory it made (the agent's).
func makeCheckpointDir(path string, p runAsPlan) (bool, error) {
	if !filepath.IsAbs(path) {
		return false, fmt.Errorf("checkpoint directory %q: not an absolute path", path)
	}
	clean := filepath.Clean(path)
	if clean == "/" {
		return false, nil
	}
	parts := strings.Split(strings.TrimPrefix(clean, "/"), "/")
	fd, err := unix.Open("/", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return false, fmt.Errorf("checkpoint directory %s: %w", clean, err)
	}
	defer func() { unix.Close(fd) }()
	for _, name := range parts[:len(parts)-1] {
		next, err := openParent(fd, name)
		if err != nil {
			return false, fmt.Errorf("checkpoint directory %s: %s: %w", clean, name, err)
		}
		unix.Close(fd)
		fd = next
	}
	leaf := parts[len(parts)-1]
	if err := unix.Mkdirat(fd, leaf, p.dirMode()); errors.Is(err, unix.EEXIST) {
		return false, nil // someone's already: theirs to keep
	} else if err != nil {
		return false, fmt.Errorf("checkpoint directory %s: %w", clean, err)
	}
	dfd, err := unix.Openat(fd, leaf, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return true, fmt.Errorf("checkpoint directory %s: %w", clean, err)
	}
	defer unix.Close(dfd)
	var st unix.Stat_t
	if err := unix.Fstat(dfd, &st); err != nil {
		return true, fmt.Errorf("checkpoint directory %s: %w", clean, err)
	}
	if int(st.Uid) != os.Geteuid() {
		// Replaced between the mkdir and the open by someone who may
		// write its parent: not the directory made here.
		return true, fmt.Errorf("checkpoint directory %s: replaced while it was made; left as it is", clean)
	}
	if err := giveDir(dfd, p); err != nil {
		return true, fmt.Errorf("checkpoint directory %s: %w", clean, err)
	}
	return true, nil
}

// openParent opens the directory name under dirfd, making it (the
// agent's, 0755) when missing, and following it when it is a symlink only
// if root owns the symlink.
func openParent(dirfd int, name string) (int, error) {
	const flags = unix.O_RDONLY | unix.O_DIRECTORY | unix.O_CLOEXEC
	fd, err := unix.Openat(dirfd, name, flags|unix.O_NOFOLLOW, 0)
	if errors.Is(err, unix.ENOENT) {
		if err = unix.Mkdirat(dirfd, name, 0o755); err != nil && !errors.Is(err, unix.EEXIST) {
			return -1, err
		}
		fd, err = unix.Openat(dirfd, name, flags|unix.O_NOFOLLOW, 0)
	}
	if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) {
		var st unix.Stat_t
		if serr := fstatatNoFollow(dirfd, name, &st); serr == nil && st.Mode&unix.S_IFMT == unix.S_IFLNK {
			if st.Uid != 0 {
				return -1, fmt.Errorf("a symlink owned by uid %d: not followed", st.Uid)
			}
			fd, err = unix.Openat(dirfd, name, flags, 0)
		}
	}
	return fd, err
}

// fstatatNoFollow is fstatat(2) with AT_SYMLINK_NOFOLLOW.
func fstatatNoFollow(dirfd int, name string, st *unix.Stat_t) error {
	return unix.Fstatat(dirfd, name, st, unix.AT_SYMLINK_NOFOLLOW)
}

// runAsEnv sets, in env (the agent's), who the rank is: USER and LOGNAME,
// and HOME, from the node's passwd entry for the uid when it has one (else
// HOME is the task directory: the agent's would be root's). A job's own
// env, added after, still wins.
func runAsEnv(env []string, p runAsPlan, taskDir string) []string {
	if p.switchTo == nil {
		return env
	}
	name, home := p.name, taskDir
	if u, err := user.LookupId(strconv.Itoa(p.switchTo.UID)); err == nil {
		if name == "" {
			name = u.Username
		}
		if u.HomeDir != "" {
			home = u.HomeDir
		}
	}
	out := env[:0:0]
	for _, kv := range env {
		switch k, _, _ := strings.Cut(kv, "="); k {
		case "HOME", "USER", "LOGNAME": // the agent's
		default:
			out = append(out, kv)
		}
	}
	out = append(out, "HOME="+home)
	if name != "" {
		out = append(out, "USER="+name, "LOGNAME="+name)
	}
	return out
}
