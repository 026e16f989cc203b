package cgroup

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestRealLimits applies limits to a sleeping child on this machine through
// the real cgroup filesystem, reads them back, and removes the group.
func TestRealLimits(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("skipping the real cgroup test: creating cgroups needs root")
	}
	m, err := Detect("/sys/fs/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("Describe: %s", m.Describe())
	if m.memory == nil {
		t.Skipf("skipping the real cgroup test: no usable memory controller here (%s)", m.Describe())
	}

	cmd := exec.Command("sleep", "300")
	if err := cmd.Start(); err != nil {
		t.Fatalf("start sleep: %v", err)
	}
	pid := cmd.Process.Pid
	name := fmt.Sprintf("test-%d-%d", os.Getpid(), pid)
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		_ = m.Remove(name)
	})

	limits := Limits{MemoryBytes: 64 << 20}
	if m.cpu != nil {
		limits.CPUMillis = 250
	}
	applied, err := m.Apply(name, pid, limits)
	if err != nil {
		t.Fatalf("Apply: %v", err)
	}
	t.Logf("applied: %s", applied)

	memFile := "memory.limit_in_bytes"
	if m.memory.version == 2 {
		memFile = "memory.max"
	}
	if got := readTrimmed(t, filepath.Join(m.memory.dir(name), memFile)); got != "67108864" {
		t.Errorf("%s = %q, want 67108864", memFile, got)
	}
	if m.cpu != nil {
		want, file := "25000", "cpu.cfs_quota_us"
		if m.cpu.version == 2 {
			want, file = "25000 100000", "cpu.max"
		}
		if got := readTrimmed(t, filepath.Join(m.cpu.dir(name), file)); got != want {
			t.Errorf("%s = %q, want %q", file, got, want)
		}
	}
	// The kernel agrees the child is in the group.
	if procs := strings.Fields(readTrimmed(t, filepath.Join(m.memory.dir(name), "cgroup.procs"))); len(procs) != 1 || procs[0] != strconv.Itoa(pid) {
		t.Errorf("cgroup.procs of the task group = %v, want [%d]", procs, pid)
	}
	if self := readTrimmed(t, fmt.Sprintf("/proc/%d/cgroup", pid)); !strings.Contains(self, "/"+groupDir+"/"+name) {
		t.Errorf("/proc/%d/cgroup does not show the task group:\n%s", pid, self)
	}

	// A group with a live process cannot go; once it exits, it can.
	if err := m.Remove(name); err == nil {
		t.Error("Remove succeeded while the child was still inside")
	} else {
		t.Logf("Remove with the child inside: %v", err)
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	if err := m.Remove(name); err != nil {
		t.Fatalf("Remove after the child exited: %v", err)
	}
	if _, err := os.Stat(m.memory.dir(name)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("task group still there after Remove: %v", err)
	}
}

// TestRealMemoryLimitEnforced checks the kernel kills a task that goes
// over its memory limit: the child waits on stdin until Apply has moved
// it, then buffers 256 MiB (tail holds a whole line, and /dev/zero has no
// newline) under a 32 MiB limit.
func TestRealMemoryLimitEnforced(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("skipping the real cgroup test: creating cgroups needs root")
	}
	m, err := Detect("/sys/fs/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	if m.memory == nil {
		t.Skipf("skipping the real cgroup test: no usable memory controller here (%s)", m.Describe())
	}
	cmd := exec.Command("sh", "-c", "read go && head -c 268435456 /dev/zero | tail -n 1 >/dev/null")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start: %v", err)
	}
	name := fmt.Sprintf("test-oom-%d-%d", os.Getpid(), cmd.Process.Pid)
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		_ = m.Remove(name)
	})
	if _, err := m.Apply(name, cmd.Process.Pid, Limits{MemoryBytes: 32 << 20}); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	if _, err := stdin.Write([]byte("go\n")); err != nil {
		t.Fatal(err)
	}
	_ = stdin.Close()
	err = cmd.Wait()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 128+9 {
		t.Errorf("child over its memory limit ended with %v, want exit status 137 (SIGKILL from the OOM killer)", err)
	}
	events := "memory.oom_control"
	if m.memory.version == 2 {
		events = "memory.events"
	}
	// At least one: under pressure the kernel may kill head too before
	// tail's memory is freed.
	if s := readTrimmed(t, filepath.Join(m.memory.dir(name), events)); oomKills(s) < 1 {
		t.Errorf("%s records no OOM kill:\n%s", events, s)
	}
	if err := m.Remove(name); err != nil {
		t.Errorf("Remove: %v", err)
	}
}

// oomKills is the oom_kill count in a memory.oom_control or memory.events
// file, or -1 if it has none.
func oomKills(s string) int {
	for _, line := range strings.Split(s, "\n") {
		if v, ok := strings.CutPrefix(line, "oom_kill "); ok {
			if n, err := strconv.Atoi(strings.TrimSpace(v)); err == nil {
				return n
			}
		}
	}
	return -1
}

func readTrimmed(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}
