package agent

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// taskDirAt makes the task directory of key with two log files, all last
// changed at t.
func taskDirAt(tb testing.TB, a *Agent, key string, at time.Time) string {
	tb.Helper()
	dir := a.taskDir(key)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		tb.Fatal(err)
	}
	for _, f := range []string{"stdout.log", "stderr.log"} {
		p := filepath.Join(dir, f)
		if err := os.WriteFile(p, []byte("x\n"), 0o644); err != nil {
			tb.Fatal(err)
		}
		if err := os.Chtimes(p, at, at); err != nil {
			tb.Fatal(err)
		}
	}
	if err := os.Chtimes(dir, at, at); err != nil {
		tb.Fatal(err)
	}
	return dir
}

func TestSweepRemovesOnlyOldDirectoriesOfRanksNoLongerTracked(t *testing.T) {
	a, err := New(Config{Server: "https://127.0.0.1:1", Name: "n1", DataDir: t.TempDir(), TaskRetention: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	old := now.Add(-2 * time.Hour)
	gone := taskDirAt(t, a, "7/1/0", old)       // ended long ago: removed, and its bucket with it
	oldTracked := taskDirAt(t, a, "8/1/0", old) // silent but still running
	recent := taskDirAt(t, a, "150/1/3", now)   // ended a moment ago
	oldNeighbour := taskDirAt(t, a, "151/2/0", old)
	// A rank whose directory is old but whose log it still wrote lately.
	stillLogging := taskDirAt(t, a, "152/1/0", old)
	if err := os.Chtimes(filepath.Join(stillLogging, "stdout.log"), now, now); err != nil {
		t.Fatal(err)
	}
	stray := filepath.Join(a.tasksDir(), "1", "notes")
	if err := os.MkdirAll(stray, 0o755); err != nil {
		t.Fatal(err)
	}
	_ = os.Chtimes(stray, old, old)
	a.tasks["8/1/0"] = &task{dir: oldTracked}

	if n := a.sweepTaskDirs(now.Add(-a.cfg.TaskRetention)); n != 2 {
		t.Errorf("removed %d task directories; want 2 (7.1.0 and 151.2.0)", n)
	}
	for _, c := range []struct {
		dir  string
		kept bool
	}{{gone, false}, {oldNeighbour, false}, {oldTracked, true}, {recent, true}, {stillLogging, true}, {stray, true}} {
		_, err := os.Stat(c.dir)
		if kept := err == nil; kept != c.kept {
			t.Errorf("%s: kept %v; want %v", strings.TrimPrefix(c.dir, a.tasksDir()), kept, c.kept)
		}
	}
	// 7's bucket (0) held only 7 and 8; 8 is tracked, so it stays. A
	// bucket emptied altogether goes.
	delete(a.tasks, "8/1/0")
	if n := a.sweepTaskDirs(now.Add(-a.cfg.TaskRetention)); n != 1 {
		t.Errorf("second sweep removed %d; want 1 (8.1.0, no longer tracked)", n)
	}
	if _, err := os.Stat(filepath.Dir(gone)); !os.IsNotExist(err) {
		t.Errorf("bucket %s, emptied, still there: %v", filepath.Dir(gone), err)
	}
	if _, err := os.Stat(filepath.Dir(recent)); err != nil {
		t.Errorf("bucket of a recent rank: %v; want kept", err)
	}
}

func TestTaskRetentionBelowTheMinimumIsRefused(t *testing.T) {
	_, err := New(Config{Server: "https://127.0.0.1:1", Name: "n1", DataDir: t.TempDir(), TaskRetention: time.Second})
	if err == nil || !strings.Contains(err.Error(), "--task-retention") {
		t.Fatalf("TaskRetention 1s: %v; want an error naming --task-retention", err)
	}
}
