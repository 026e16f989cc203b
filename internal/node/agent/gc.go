package agent

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/gangway/gangway/internal/api"
)

// Task directories hold a rank's logs and progress file. A node runs
// thousands of ranks a day, and without a sweep their directories would
// fill its disk (and its inode table) over weeks.
const (
	gcFirst = time.Minute // after start, once the ranks are re-attached
	gcEvery = 10 * time.Minute
	// MinTaskRetention keeps a directory long enough that a rank being
	// started (its directory made, its task not yet recorded) is never
	// taken for an old one.
	MinTaskRetention = time.Minute
)

// gcLoop removes old task directories until ctx ends.
func (a *Agent) gcLoop(ctx context.Context) {
	t := time.NewTimer(gcFirst)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if n := a.sweepTaskDirs(time.Now().Add(-a.cfg.TaskRetention)); n > 0 {
			a.log.Info("removed old task directories", "dirs", n, "retention", a.cfg.TaskRetention)
		}
		t.Reset(gcEvery)
	}
}

// sweepTaskDirs removes the directory of every rank the agent no longer
// tracks whose directory and files were last changed before cutoff, and
// buckets left empty. It returns how many task directories it removed.
func (a *Agent) sweepTaskDirs(cutoff time.Time) int {
	root := a.tasksDir()
	buckets, err := os.ReadDir(root)
	if err != nil {
		return 0
	}
	removed := 0
	for _, b := range buckets {
		if !b.IsDir() {
			continue
		}
		bdir := filepath.Join(root, b.Name())
		entries, err := os.ReadDir(bdir)
		if err != nil {
			continue
		}
		left := len(entries)
		for _, e := range entries {
			key, ok := taskKeyOfDir(e.Name())
			if !ok || !e.IsDir() {
				continue
			}
			dir := filepath.Join(bdir, e.Name())
			if !changedBefore(dir, cutoff) {
				continue
			}
			a.dirMu.Lock()
			a.mu.Lock()
			_, live := a.tasks[key]
			a.mu.Unlock()
			if !live && os.RemoveAll(dir) == nil {
				removed++
				left--
			}
			a.dirMu.Unlock()
		}
		if left == 0 {
			// Under dirMu: a rank starting now makes the bucket anew.
			a.dirMu.Lock()
			_ = os.Remove(bdir) // fails if a new rank's directory is in it
			a.dirMu.Unlock()
		}
	}
	return removed
}

// taskKeyOfDir reads "<job>.<attempt>.<rank>" (Agent.taskDir) back.
func taskKeyOfDir(name string) (string, bool) {
	parts := strings.Split(name, ".")
	if len(parts) != 3 || parts[0] == "" {
		return "", false
	}
	att, err1 := strconv.Atoi(parts[1])
	rank, err2 := strconv.Atoi(parts[2])
	if err1 != nil || err2 != nil {
		return "", false
	}
	return api.TaskKey(parts[0], att, rank), true
}

// changedBefore reports whether dir and every file in it were last
// modified before cutoff.
func changedBefore(dir string, cutoff time.Time) bool {
	fi, err := os.Stat(dir)
	if err != nil || !fi.ModTime().Before(cutoff) {
		return false
	}
	es, err := os.ReadDir(dir)
	if err != nil {
		return false
	}
	for _, e := range es {
		info, err := e.Info()
		if err != nil || !info.ModTime().Before(cutoff) {
			return false
		}
	}
	return true
}
