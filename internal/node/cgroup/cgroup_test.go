package cgroup

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// tree is a fake /sys/fs/cgroup in a temporary directory.
type tree struct {
	t    *testing.T
	root string
}

func newTree(t *testing.T) tree { return tree{t: t, root: t.TempDir()} }

func (tr tree) file(rel, content string) {
	tr.t.Helper()
	p := filepath.Join(tr.root, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		tr.t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		tr.t.Fatal(err)
	}
}

func (tr tree) symlink(rel, target string) {
	tr.t.Helper()
	if err := os.Symlink(target, filepath.Join(tr.root, rel)); err != nil {
		tr.t.Fatal(err)
	}
}

func (tr tree) read(rel string) string {
	tr.t.Helper()
	b, err := os.ReadFile(filepath.Join(tr.root, rel))
	if err != nil {
		tr.t.Fatal(err)
	}
	return string(b)
}

func (tr tree) exists(rel string) bool {
	_, err := os.Stat(filepath.Join(tr.root, rel))
	return err == nil
}

// detect runs detection on the tree with a fake /proc/self/cgroup; dirs
// listed in denied are not writable.
func (tr tree) detect(self string, denied ...string) *Manager {
	tr.t.Helper()
	m, err := detect(tr.root, []byte(self), func(dir string) error {
		for _, d := range denied {
			if dir == filepath.Join(tr.root, d) {
				return fs.ErrPermission
			}
		}
		return nil
	})
	if err != nil {
		tr.t.Fatal(err)
	}
	m.removeDir = os.RemoveAll // a plain tree's groups hold plain files
	return m
}

// rel is a hierarchy's base relative to the tree, "" for none.
func (tr tree) rel(h *hierarchy) string {
	if h == nil {
		return ""
	}
	r, err := filepath.Rel(tr.root, h.base)
	if err != nil {
		tr.t.Fatal(err)
	}
	return fmt.Sprintf("v%d %s", h.version, filepath.ToSlash(r))
}

// The layout of the machine this was written on: every v1 controller
// mounted on its own, cgroup v2 at unified with no controllers, and the
// agent in a memory cgroup of its own.
const hybridSelf = `9:name=systemd:/
8:pids:/
5:devices:/
4:memory:/process_api/abc
2:cpuacct:/
1:cpu:/
0::/
`

func hybrid(tr tree) {
	tr.file("memory/memory.limit_in_bytes", "9223372036854771712\n")
	tr.file("memory/process_api/abc/memory.limit_in_bytes", "9223372036854771712\n")
	tr.file("cpu/cpu.cfs_quota_us", "-1\n")
	tr.file("cpuacct/cpuacct.usage", "0\n")
	tr.file("unified/cgroup.controllers", "")
	tr.file("systemd/tasks", "")
}

func TestDetect(t *testing.T) {
	tests := []struct {
		name       string
		setup      func(tree)
		self       string
		denied     []string
		wantMemory string
		wantCPU    string
		wantDesc   string // ROOT stands for the tree
	}{
		{
			name:       "hybrid host, limits only in v1",
			setup:      hybrid,
			self:       hybridSelf,
			wantMemory: "v1 memory/process_api/abc",
			wantCPU:    "v1 cpu",
			wantDesc:   "memory+cpu via cgroup v1",
		},
		{
			name: "v1 with cpu,cpuacct joined and a cpu symlink",
			setup: func(tr tree) {
				tr.file("memory/memory.limit_in_bytes", "")
				tr.file("memory/system.slice/agent.service/memory.limit_in_bytes", "")
				tr.file("cpu,cpuacct/cpu.cfs_quota_us", "")
				tr.file("cpu,cpuacct/system.slice/agent.service/cpu.cfs_quota_us", "")
				tr.symlink("cpu", "cpu,cpuacct")
				tr.symlink("cpuacct", "cpu,cpuacct")
			},
			self:       "4:memory:/system.slice/agent.service\n3:cpu,cpuacct:/system.slice/agent.service\n1:name=systemd:/system.slice/agent.service\n",
			wantMemory: "v1 memory/system.slice/agent.service",
			wantCPU:    "v1 cpu/system.slice/agent.service",
			wantDesc:   "memory+cpu via cgroup v1",
		},
		{
			name: "pure v2",
			setup: func(tr tree) {
				tr.file("cgroup.controllers", "cpuset cpu io memory hugetlb pids\n")
				tr.file("system.slice/agent.service/cgroup.controllers", "cpu io memory pids\n")
			},
			self:       "0::/system.slice/agent.service\n",
			wantMemory: "v2 system.slice/agent.service",
			wantCPU:    "v2 system.slice/agent.service",
			wantDesc:   "memory+cpu via cgroup v2",
		},
		{
			name: "pure v2 whose cgroup is not given memory",
			setup: func(tr tree) {
				tr.file("cgroup.controllers", "cpu memory pids\n")
				tr.file("user.slice/cgroup.controllers", "cpu pids\n")
			},
			self:     "0::/user.slice\n",
			wantCPU:  "v2 user.slice",
			wantDesc: "cpu via cgroup v2; no memory controller available: memory limits not enforced",
		},
		{
			name: "hybrid with cpu in v2 and memory in v1",
			setup: func(tr tree) {
				tr.file("memory/memory.limit_in_bytes", "")
				tr.file("unified/cgroup.controllers", "cpu\n")
			},
			self:       "4:memory:/\n0::/\n",
			wantMemory: "v1 memory",
			wantCPU:    "v2 unified",
			wantDesc:   "memory via cgroup v1, cpu via cgroup v2",
		},
		{
			name:     "nothing mounted",
			setup:    func(tree) {},
			self:     "0::/\n",
			wantDesc: "no memory or cpu controller available: limits not enforced (no cgroup hierarchy mounted at ROOT)",
		},
		{
			name: "hybrid whose v1 has neither controller",
			setup: func(tr tree) {
				tr.file("pids/pids.max", "max\n")
				tr.file("unified/cgroup.controllers", "")
			},
			self:     "8:pids:/\n0::/\n",
			wantDesc: "no memory or cpu controller available: limits not enforced (cgroup v2 at ROOT/unified offers neither memory nor cpu, and no cgroup v1 hierarchy does)",
		},
		{
			name:     "memory not writable (agent not root)",
			setup:    hybrid,
			self:     hybridSelf,
			denied:   []string{"memory/process_api/abc"},
			wantCPU:  "v1 cpu",
			wantDesc: "cpu via cgroup v1; no memory controller available: memory limits not enforced (memory controller in cgroup v1 at ROOT/memory/process_api/abc is not writable: permission denied)",
		},
		{
			name: "container seeing only its own subtree",
			setup: func(tr tree) {
				tr.file("memory/memory.limit_in_bytes", "")
				tr.file("cpu,cpuacct/cpu.cfs_quota_us", "")
			},
			self:       "4:memory:/docker/0123abcd\n3:cpu,cpuacct:/docker/0123abcd\n",
			wantMemory: "v1 memory",
			wantCPU:    "v1 cpu,cpuacct",
			wantDesc:   "memory+cpu via cgroup v1",
		},
		{
			name: "cgroup namespace path above the mount",
			setup: func(tr tree) {
				tr.file("memory/memory.limit_in_bytes", "")
				tr.file("memory/x/memory.limit_in_bytes", "")
			},
			self:       "4:memory:/../x\n",
			wantMemory: "v1 memory",
			wantDesc:   "memory via cgroup v1; no cpu controller available: cpu limits not enforced",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr := newTree(t)
			tt.setup(tr)
			m := tr.detect(tt.self, tt.denied...)
			got := []string{tr.rel(m.memory), tr.rel(m.cpu), m.Describe()}
			want := []string{tt.wantMemory, tt.wantCPU, strings.ReplaceAll(tt.wantDesc, "ROOT", tr.root)}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("memory, cpu, Describe (-want +got):\n%s", diff)
			}
		})
	}
}

func TestDetectBadProcSelf(t *testing.T) {
	_, err := detect(t.TempDir(), []byte("4:memory:/\nnonsense\n"), func(string) error { return nil })
	if err == nil || !strings.Contains(err.Error(), "line 2") {
		t.Errorf("detect with a malformed /proc/self/cgroup = %v, want an error naming line 2", err)
	}
}

func TestApplyV1(t *testing.T) {
	tr := newTree(t)
	hybrid(tr)
	// Swap accounting is on for the second task only: its memsw file exists.
	tr.file("memory/process_api/abc/gangway/job-b.0.r1/memory.memsw.limit_in_bytes", "9223372036854771712")
	m := tr.detect(hybridSelf)

	applied, err := m.Apply("job-a.0.r0", 4242, Limits{MemoryBytes: 64 << 20, CPUMillis: 1500})
	if err != nil {
		t.Fatal(err)
	}
	if want := "memory 64 MiB via cgroup v1; cpu 1500m via cgroup v1"; applied != want {
		t.Errorf("applied = %q, want %q", applied, want)
	}
	mem, cpu := "memory/process_api/abc/gangway/job-a.0.r0/", "cpu/gangway/job-a.0.r0/"
	want := map[string]string{
		mem + "memory.limit_in_bytes": "67108864",
		mem + "cgroup.procs":          "4242",
		cpu + "cpu.cfs_period_us":     "100000",
		cpu + "cpu.cfs_quota_us":      "150000",
		cpu + "cgroup.procs":          "4242",
	}
	for f, v := range want {
		if got := tr.read(f); got != v {
			t.Errorf("%s = %q, want %q", f, got, v)
		}
	}
	if tr.exists(mem + "memory.memsw.limit_in_bytes") {
		t.Error("memsw limit written though the kernel offers no swap accounting")
	}

	if _, err := m.Apply("job-b.0.r1", 4243, Limits{MemoryBytes: 3 << 30}); err != nil {
		t.Fatal(err)
	}
	if got := tr.read("memory/process_api/abc/gangway/job-b.0.r1/memory.memsw.limit_in_bytes"); got != "3221225472" {
		t.Errorf("memsw limit = %q, want the memory limit 3221225472", got)
	}
	if tr.exists("cpu/gangway/job-b.0.r1") {
		t.Error("a cpu group was made for a task without a cpu limit")
	}

	if err := m.Remove("job-a.0.r0"); err != nil {
		t.Fatal(err)
	}
	if tr.exists(mem) || tr.exists(cpu) {
		t.Error("Remove left the task groups")
	}
	if err := m.Remove("job-a.0.r0"); err != nil {
		t.Errorf("removing an absent group: %v", err)
	}
}

func TestApplyV2(t *testing.T) {
	tests := []struct {
		name           string
		subtreeControl string // of the agent's cgroup before Apply
		wantSubtree    string // after
	}{
		{"controllers to enable", "", "+memory +cpu"},
		{"controllers already on", "cpu io memory", "cpu io memory"},
		{"one to enable", "memory pids", "+cpu"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr := newTree(t)
			tr.file("cgroup.controllers", "cpu memory pids\n")
			tr.file("agent/cgroup.controllers", "cpu memory pids\n")
			tr.file("agent/cgroup.subtree_control", tt.subtreeControl)
			tr.file("agent/gangway/t1/memory.swap.max", "max")
			m := tr.detect("0::/agent\n")
			applied, err := m.Apply("t1", 77, Limits{MemoryBytes: 1 << 30, CPUMillis: 250})
			if err != nil {
				t.Fatal(err)
			}
			if want := "memory 1 GiB via cgroup v2; cpu 250m via cgroup v2"; applied != want {
				t.Errorf("applied = %q, want %q", applied, want)
			}
			want := map[string]string{
				"agent/cgroup.subtree_control":         tt.wantSubtree,
				"agent/gangway/cgroup.subtree_control": "+memory +cpu",
				"agent/gangway/t1/memory.max":          "1073741824",
				"agent/gangway/t1/memory.swap.max":     "0",
				"agent/gangway/t1/cpu.max":             "25000 100000",
				"agent/gangway/t1/cgroup.procs":        "77",
			}
			for f, v := range want {
				if got := tr.read(f); got != v {
					t.Errorf("%s = %q, want %q", f, got, v)
				}
			}
		})
	}
}

func TestApplyWithoutControllers(t *testing.T) {
	full := Limits{MemoryBytes: 64 << 20, CPUMillis: 500}
	tests := []struct {
		name   string
		setup  func(tree)
		self   string
		limits Limits
		want   string
	}{
		{"no controller at all", func(tree) {}, "0::/\n", full, "limits not enforced: no memory or cpu controller available"},
		{"hybrid with empty v2 and no v1", func(tr tree) { tr.file("unified/cgroup.controllers", "") }, "0::/\n", full,
			"limits not enforced: no memory or cpu controller available"},
		{"memory only", func(tr tree) { tr.file("memory/memory.limit_in_bytes", "") }, "4:memory:/\n", full,
			"memory 64 MiB via cgroup v1; cpu limit not enforced: no cpu controller available"},
		{"cpu only, memory asked", func(tr tree) { tr.file("cpu/cpu.cfs_quota_us", "") }, "1:cpu:/\n", Limits{MemoryBytes: 1 << 20},
			"memory limit not enforced: no memory controller available"},
		{"nothing asked", hybrid, hybridSelf, Limits{}, "no limits requested"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr := newTree(t)
			tt.setup(tr)
			m := tr.detect(tt.self)
			got, err := m.Apply("t", 1, tt.limits)
			if err != nil {
				t.Fatalf("Apply: %v", err)
			}
			if got != tt.want {
				t.Errorf("Apply = %q, want %q", got, tt.want)
			}
			if err := m.Remove("t"); err != nil {
				t.Errorf("Remove: %v", err)
			}
		})
	}
}

func TestApplyRollsBack(t *testing.T) {
	tr := newTree(t)
	hybrid(tr)
	// A directory where the cpu quota file should be makes its write fail
	// after the memory group is already set up.
	if err := os.MkdirAll(filepath.Join(tr.root, "cpu/gangway/t/cpu.cfs_quota_us"), 0o755); err != nil {
		t.Fatal(err)
	}
	m := tr.detect(hybridSelf)
	_, err := m.Apply("t", 99, Limits{MemoryBytes: 1 << 20, CPUMillis: 100})
	if err == nil || !strings.Contains(err.Error(), "cpu.cfs_quota_us") {
		t.Fatalf("Apply = %v, want an error naming cpu.cfs_quota_us", err)
	}
	if tr.exists("memory/process_api/abc/gangway/t") || tr.exists("cpu/gangway/t") {
		t.Error("a failed Apply left task groups behind")
	}
	if got := tr.read("memory/process_api/abc/cgroup.procs"); got != "99" {
		t.Errorf("pid not moved back to the agent's memory cgroup: cgroup.procs = %q", got)
	}
}

func TestRemoveBusy(t *testing.T) {
	tr := newTree(t)
	hybrid(tr)
	m := tr.detect(hybridSelf)
	if _, err := m.Apply("t", 5, Limits{MemoryBytes: 1 << 20}); err != nil {
		t.Fatal(err)
	}
	tr.file("memory/process_api/abc/gangway/t/cgroup.procs", "5\n6\n")
	m.removeDir = func(string) error { return &fs.PathError{Op: "remove", Path: "x", Err: syscall.EBUSY} }
	err := m.Remove("t")
	if !errors.Is(err, syscall.EBUSY) || !strings.Contains(err.Error(), "2 process(es) still inside") {
		t.Errorf("Remove of a busy group = %v, want EBUSY with the process count", err)
	}
}

func TestBadArguments(t *testing.T) {
	tr := newTree(t)
	hybrid(tr)
	m := tr.detect(hybridSelf)
	ok := Limits{MemoryBytes: 1 << 20}
	tests := []struct {
		name   string
		task   string
		pid    int
		limits Limits
		want   string
	}{
		{"empty name", "", 1, ok, `task name ""`},
		{"dot dot", "..", 1, ok, `task name ".."`},
		{"slash", "a/b", 1, ok, "must not contain '/'"},
		{"long", strings.Repeat("x", 201), 1, ok, "at most 200"},
		{"zero pid", "t", 0, ok, "pid 0"},
		{"negative memory", "t", 1, Limits{MemoryBytes: -1}, "Limits.MemoryBytes is -1"},
		{"negative cpu", "t", 1, Limits{CPUMillis: -5}, "Limits.CPUMillis is -5"},
		{"cpu below the kernel's minimum", "t", 1, Limits{CPUMillis: 5}, "Limits.CPUMillis is 5: the smallest"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := m.Apply(tt.task, tt.pid, tt.limits)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Apply = %v, want an error containing %q", err, tt.want)
			}
		})
	}
	if err := m.Remove("../x"); err == nil {
		t.Error("Remove accepted a name with a slash")
	}
	if tr.exists("memory/process_api/abc/gangway") {
		t.Error("a rejected Apply created directories")
	}
}

func TestNilManager(t *testing.T) {
	var m *Manager
	if got, want := m.Describe(), "no memory or cpu controller available: limits not enforced"; got != want {
		t.Errorf("Describe = %q, want %q", got, want)
	}
	got, err := m.Apply("t", 1, Limits{MemoryBytes: 1 << 20})
	if err != nil || got != "limits not enforced: no memory or cpu controller available" {
		t.Errorf("Apply = %q, %v", got, err)
	}
	if err := m.Remove("t"); err != nil {
		t.Errorf("Remove = %v", err)
	}
}

func TestParseProcCgroup(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    memberships
		wantErr string
	}{
		{
			name: "hybrid",
			in:   "12:cpu,cpuacct:/a\n1:name=systemd:/init.scope\n0::/user.slice/x:y\n",
			want: memberships{
				{id: "12", controllers: []string{"cpu", "cpuacct"}, path: "/a"},
				{id: "1", controllers: []string{"name=systemd"}, path: "/init.scope"},
				{id: "0", path: "/user.slice/x:y"},
			},
		},
		{name: "empty", in: "", want: nil},
		{name: "two fields", in: "0:/\n", wantErr: "line 1"},
		{name: "bad id", in: "4:memory:/\nx::/\n", wantErr: `line 2: hierarchy id "x"`},
		{name: "relative path", in: "0::a\n", wantErr: `path "a"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseProcCgroup([]byte(tt.in))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Errorf("error = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got, cmp.AllowUnexported(membership{})); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func FuzzParseProcCgroup(f *testing.F) {
	f.Add([]byte(hybridSelf))
	f.Add([]byte("0::/\n"))
	f.Add([]byte("1:cpu,cpuacct:/a:b\n\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		ms, err := parseProcCgroup(data)
		if err != nil {
			return
		}
		for _, m := range ms {
			if !strings.HasPrefix(m.path, "/") || m.id == "" {
				t.Errorf("parsed %+v from %q", m, data)
			}
			// Every parsed path resolves inside the mount.
			mount := "/mnt/cg"
			if r := resolve(mount, m.path); r != mount && !strings.HasPrefix(r, mount+"/") {
				t.Errorf("path %q resolves outside the mount: %q", m.path, r)
			}
		}
	})
}

func TestFormatBytes(t *testing.T) {
	for in, want := range map[int64]string{1 << 30: "1 GiB", 3 << 29: "1536 MiB", 1000: "1000 bytes", 64 << 20: "64 MiB"} {
		if got := formatBytes(in); got != want {
			t.Errorf("formatBytes(%d) = %q, want %q", in, got, want)
		}
	}
}
