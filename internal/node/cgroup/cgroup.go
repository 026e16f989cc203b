// Package cgroup puts a task's processes under memory and CPU limits using
// whichever cgroup hierarchy of the host offers the memory and cpu
// controllers: cgroup v2 (unified), cgroup v1, or a hybrid of both where
// each controller lives in one of them.
//
// [Detect] looks at what is mounted and at the cgroup this process already
// lives in (/proc/self/cgroup); every task group is created beneath it, in
// a "gangway" child, so the agent never touches cgroups it does not own:
//
//	<mount>/<cgroup of this process>/gangway/<task name>
//
// A host where no hierarchy offers a controller (or where the agent may
// not write to it) is an expected outcome, not an error: [Manager.Apply]
// then says the limits are not enforced, and [Manager.Describe] says so in
// one line for the agent to log.
//
// It imports the standard library and golang.org/x/sys.
package cgroup

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
)

// groupDir is the child of the agent's own cgroup under which task groups
// are made.
const groupDir = "gangway"

// cfsPeriodMicros is the CPU period limits are expressed over (the kernel's
// default): a quota of CPUMillis*100 µs per 100 ms.
const cfsPeriodMicros = 100_000

// MinCPUMillis is the smallest CPU limit: the kernel refuses quotas below
// 1 ms per period.
const MinCPUMillis = 10

// Limits are the resources one task may use. A zero field means no limit.
type Limits struct {
	// MemoryBytes caps resident memory (and, where the kernel accounts
	// swap, memory plus swap).
	MemoryBytes int64
	// CPUMillis caps CPU time in thousandths of a CPU: 1500 is one and a
	// half CPUs. At least MinCPUMillis when set.
	CPUMillis int64
}

// Validate reports a limit the kernel cannot take, naming the field.
func (l Limits) Validate() error {
	if l.MemoryBytes < 0 {
		return fmt.Errorf("Limits.MemoryBytes is %d: must be 0 (no limit) or positive", l.MemoryBytes)
	}
	if l.CPUMillis < 0 {
		return fmt.Errorf("Limits.CPUMillis is %d: must be 0 (no limit) or positive", l.CPUMillis)
	}
	if l.CPUMillis > 0 && l.CPUMillis < MinCPUMillis {
		return fmt.Errorf("Limits.CPUMillis is %d: the smallest CPU limit the kernel takes is %d", l.CPUMillis, MinCPUMillis)
	}
	return nil
}

// hierarchy is one place a controller can be used.
type hierarchy struct {
	version int    // 1 or 2
	base    string // the cgroup this process lives in, as a directory
}

// dir is the directory of task group name.
func (h *hierarchy) dir(name string) string { return filepath.Join(h.base, groupDir, name) }

func (h *hierarchy) String() string { return "cgroup v" + strconv.Itoa(h.version) }

// Manager creates, limits and removes task groups. It holds no open files
// and no goroutines; its methods are safe for concurrent use as long as
// concurrent calls use different task names. A nil *Manager enforces
// nothing.
type Manager struct {
	memory *hierarchy // nil: no usable memory controller
	cpu    *hierarchy // nil: no usable cpu controller; may equal memory (v2)
	notes  []string   // why a controller found is not usable, for Describe

	removeDir func(string) error // os.Remove; a fake tree's test passes os.RemoveAll
}

// Detect finds which hierarchies under root (normally "/sys/fs/cgroup")
// offer the memory and cpu controllers to this process. It creates
// nothing. A host without usable controllers yields a Manager that
// enforces nothing; the error is for a /proc/self/cgroup that cannot be
// read or understood.
func Detect(root string) (*Manager, error) {
	data, err := os.ReadFile("/proc/self/cgroup")
	if errors.Is(err, fs.ErrNotExist) {
		return &Manager{removeDir: os.Remove, notes: []string{"/proc/self/cgroup is absent: not linux?"}}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("cgroup: detect: %w", err)
	}
	return detect(root, data, writable)
}

// detect is Detect with its inputs passed in, for tests on a fake tree.
func detect(root string, selfCgroup []byte, writable func(dir string) error) (*Manager, error) {
	self, err := parseProcCgroup(selfCgroup)
	if err != nil {
		return nil, fmt.Errorf("cgroup: detect: /proc/self/cgroup: %w", err)
	}
	m := &Manager{removeDir: os.Remove}

	// cgroup v2: pure (root is the unified mount) or hybrid (root/unified).
	unified := ""
	for _, dir := range []string{root, filepath.Join(root, "unified")} {
		if exists(filepath.Join(dir, "cgroup.controllers")) {
			unified = dir
			break
		}
	}
	var v2 *hierarchy
	v2Offers := map[string]bool{}
	if unified != "" {
		if p, ok := self.unifiedPath(); ok {
			v2 = &hierarchy{version: 2, base: resolve(unified, p)}
			data, err := os.ReadFile(filepath.Join(v2.base, "cgroup.controllers"))
			if err != nil && !errors.Is(err, fs.ErrNotExist) {
				return nil, fmt.Errorf("cgroup: detect: %w", err)
			}
			for _, c := range strings.Fields(string(data)) {
				v2Offers[c] = true
			}
		}
	}

	// cgroup v1: one mount per controller set, named after it ("memory",
	// "cpu,cpuacct"); "cpu" may be a symlink to "cpu,cpuacct".
	v1 := map[string]*hierarchy{}
	entries, err := os.ReadDir(root)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("cgroup: detect: %w", err)
	}
	probe := map[string]string{"memory": "memory.limit_in_bytes", "cpu": "cpu.cfs_quota_us"}
	for _, e := range entries {
		mount := filepath.Join(root, e.Name())
		for _, c := range strings.Split(e.Name(), ",") {
			file, ok := probe[c]
			if !ok || v1[c] != nil || !exists(filepath.Join(mount, file)) {
				continue
			}
			p, ok := self.v1Path(c)
			if !ok {
				p = "/"
			}
			v1[c] = &hierarchy{version: 1, base: resolve(mount, p)}
		}
	}

	if v2 != nil && !v2Offers["memory"] && !v2Offers["cpu"] && len(v1) == 0 {
		m.notes = append(m.notes, fmt.Sprintf("cgroup v2 at %s offers neither memory nor cpu, and no cgroup v1 hierarchy does", v2.base))
	}
	pick := func(c string) *hierarchy {
		h := v1[c]
		if v2Offers[c] {
			h = v2
		}
		if h == nil {
			return nil
		}
		if err := writable(h.base); err != nil {
			m.notes = append(m.notes, fmt.Sprintf("%s controller in %s at %s is not writable: %v", c, h, h.base, err))
			return nil
		}
		return h
	}
	m.memory = pick("memory")
	m.cpu = pick("cpu")
	if unified == "" && len(v1) == 0 {
		m.notes = append(m.notes, "no cgroup hierarchy mounted at "+root)
	}
	return m, nil
}

// resolve maps this process's cgroup path onto a mount. When the path is
// not under the mount (a container that sees only its own subtree, or a
// cgroup namespace), the mount's root is this process's cgroup.
func resolve(mount, path string) string {
	if slices.Contains(strings.Split(path, "/"), "..") {
		return mount
	}
	dir := filepath.Join(mount, filepath.FromSlash(path))
	if fi, err := os.Stat(dir); err == nil && fi.IsDir() {
		return dir
	}
	return mount
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// Describe says in one line which controllers limits go through, for the
// agent's log and node status: "memory+cpu via cgroup v1", or "no memory
// or cpu controller available: limits not enforced" with the reason.
func (m *Manager) Describe() string {
	if m == nil {
		return "no memory or cpu controller available: limits not enforced"
	}
	var s string
	switch {
	case m.memory != nil && m.cpu != nil && m.memory.version == m.cpu.version:
		s = "memory+cpu via " + m.memory.String()
	case m.memory != nil && m.cpu != nil:
		s = fmt.Sprintf("memory via %s, cpu via %s", m.memory, m.cpu)
	case m.memory != nil:
		s = "memory via " + m.memory.String() + "; no cpu controller available: cpu limits not enforced"
	case m.cpu != nil:
		s = "cpu via " + m.cpu.String() + "; no memory controller available: memory limits not enforced"
	default:
		s = "no memory or cpu controller available: limits not enforced"
	}
	if (m.memory == nil || m.cpu == nil) && len(m.notes) > 0 {
		s += " (" + strings.Join(m.notes, "; ") + ")"
	}
	return s
}

// validName reports a task name that cannot be one directory name.
func validName(name string) error {
	switch {
	case name == "" || name == "." || name == "..":
		return fmt.Errorf("task name %q: must be a non-empty directory name", name)
	case strings.ContainsAny(name, "/\x00\n"):
		return fmt.Errorf("task name %q: must not contain '/', NUL or newline", name)
	case len(name) > 200:
		return fmt.Errorf("task name %q…: %d bytes, at most 200", name[:20], len(name))
	}
	return nil
}

// write is one control file write.
type write struct {
	file     string
	value    string
	optional bool // skipped when the kernel does not offer the file
}

// Apply creates the task group name (reusing it if it exists), sets the
// requested limits in it and moves process pid into it. Call it right
// after starting the task's first process; processes it forks later stay
// inside. The name must be unique among the tasks of this agent process
// (include the job, attempt and rank in it).
//
// applied says in words what is enforced and what is not ("memory 512 MiB
// via cgroup v1, cpu 1500m via cgroup v1", or "limits not enforced: no
// memory or cpu controller available"). A limit that no controller can
// enforce is reported there, not as an error; an error means a control
// file could not be written, and then the group is rolled back.
func (m *Manager) Apply(name string, pid int, l Limits) (applied string, err error) {
	if err := validName(name); err != nil {
		return "", fmt.Errorf("cgroup: apply: %w", err)
	}
	if pid <= 0 {
		return "", fmt.Errorf("cgroup: apply %s: pid %d: must be positive", name, pid)
	}
	if err := l.Validate(); err != nil {
		return "", fmt.Errorf("cgroup: apply %s: %w", name, err)
	}
	if l.MemoryBytes == 0 && l.CPUMillis == 0 {
		return "no limits requested", nil
	}
	if m == nil {
		m = &Manager{}
	}

	var order []*hierarchy // the hierarchies to touch, in order
	writes := map[*hierarchy][]write{}
	var enforced, missing []string
	add := func(h *hierarchy, w ...write) {
		if _, ok := writes[h]; !ok {
			order = append(order, h)
		}
		writes[h] = append(writes[h], w...)
	}
	if l.MemoryBytes > 0 {
		v := strconv.FormatInt(l.MemoryBytes, 10)
		switch {
		case m.memory == nil:
			missing = append(missing, "memory")
		case m.memory.version == 1:
			// memory+swap must never be below memory: lift it first, then
			// set both, so that swap cannot extend the limit.
			add(m.memory,
				write{file: "memory.memsw.limit_in_bytes", value: "-1", optional: true},
				write{file: "memory.limit_in_bytes", value: v},
				write{file: "memory.memsw.limit_in_bytes", value: v, optional: true})
		default:
			add(m.memory, write{file: "memory.max", value: v}, write{file: "memory.swap.max", value: "0", optional: true})
		}
		if m.memory != nil {
			enforced = append(enforced, fmt.Sprintf("memory %s via %s", formatBytes(l.MemoryBytes), m.memory))
		}
	}
	if l.CPUMillis > 0 {
		quota := strconv.FormatInt(l.CPUMillis*cfsPeriodMicros/1000, 10)
		period := strconv.Itoa(cfsPeriodMicros)
		switch {
		case m.cpu == nil:
			missing = append(missing, "cpu")
		case m.cpu.version == 1:
			add(m.cpu, write{file: "cpu.cfs_period_us", value: period}, write{file: "cpu.cfs_quota_us", value: quota})
		default:
			add(m.cpu, write{file: "cpu.max", value: quota + " " + period})
		}
		if m.cpu != nil {
			enforced = append(enforced, fmt.Sprintf("cpu %dm via %s", l.CPUMillis, m.cpu))
		}
	}

	var done []*hierarchy
	for _, h := range order {
		if err := m.applyIn(h, name, pid, writes[h]); err != nil {
			m.rollback(append(done, h), name, pid)
			return "", fmt.Errorf("cgroup: apply %s: %w", name, err)
		}
		done = append(done, h)
	}

	parts := enforced
	switch {
	case len(missing) > 0 && m.memory == nil && m.cpu == nil:
		parts = append(parts, "limits not enforced: no memory or cpu controller available")
	default:
		for _, c := range missing {
			parts = append(parts, fmt.Sprintf("%s limit not enforced: no %s controller available", c, c))
		}
	}
	return strings.Join(parts, "; "), nil
}

// applyIn makes the task group in one hierarchy, writes its limits and
// moves pid into it.
func (m *Manager) applyIn(h *hierarchy, name string, pid int, ws []write) error {
	parent := filepath.Join(h.base, groupDir)
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return fmt.Errorf("create %s: %w", parent, err)
	}
	if h.version == 2 {
		// A v2 group gets a controller only if its parent enables it
		// for its children: the agent's cgroup for "gangway", and
		// "gangway" for each task.
		var want []string
		if m.memory == h {
			want = append(want, "memory")
		}
		if m.cpu == h {
			want = append(want, "cpu")
		}
		for _, dir := range []string{h.base, parent} {
			if err := enableControllers(dir, want); err != nil {
				return err
			}
		}
	}
	dir := h.dir(name)
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("create %s: %w", dir, err)
	}
	for _, w := range ws {
		path := filepath.Join(dir, w.file)
		if w.optional && !exists(path) {
			continue
		}
		if err := writeControl(path, w.value); err != nil {
			return err
		}
	}
	return writeControl(filepath.Join(dir, "cgroup.procs"), strconv.Itoa(pid))
}

// enableControllers turns on the controllers in dir's cgroup.subtree_control
// that are not on yet.
func enableControllers(dir string, controllers []string) error {
	path := filepath.Join(dir, "cgroup.subtree_control")
	data, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("read %s: %w", path, err)
	}
	on := strings.Fields(string(data))
	var add []string
	for _, c := range controllers {
		if !slices.Contains(on, c) {
			add = append(add, "+"+c)
		}
	}
	if len(add) == 0 {
		return nil
	}
	if err := writeControl(path, strings.Join(add, " ")); err != nil {
		if errors.Is(err, syscall.EBUSY) {
			return fmt.Errorf("%w (cgroup v2 allows no processes in a cgroup that hands controllers to children: run the agent in a leaf cgroup of its own, e.g. under systemd with Delegate=yes)", err)
		}
		return err
	}
	return nil
}

// writeControl writes one value to a control file. The kernel takes a
// value in one write; O_CREATE is harmless on cgroupfs (the file exists,
// or creating it fails) and lets tests use a plain directory tree.
func writeControl(path, value string) error {
	if err := os.WriteFile(path, []byte(value), 0o644); err != nil {
		return fmt.Errorf("write %q to %s: %w", value, path, err)
	}
	return nil
}

// rollback undoes a failed Apply as far as it can: moves pid back to the
// agent's cgroup and removes the task groups made.
func (m *Manager) rollback(hs []*hierarchy, name string, pid int) {
	for _, h := range slices.Backward(hs) {
		_ = os.WriteFile(filepath.Join(h.base, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0o644)
		_ = m.removeDir(h.dir(name))
	}
}

// Remove deletes the task group name from every hierarchy. Call it after
// the task's processes have exited: the kernel refuses to remove a group
// with processes in it, and the error then says how many remain. Removing
// a group that does not exist is not an error.
func (m *Manager) Remove(name string) error {
	if err := validName(name); err != nil {
		return fmt.Errorf("cgroup: remove: %w", err)
	}
	if m == nil {
		return nil
	}
	var errs []error
	for _, h := range m.hierarchies() {
		dir := h.dir(name)
		err := m.removeDir(dir)
		if err == nil || errors.Is(err, fs.ErrNotExist) {
			continue
		}
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err // the path is in the message already
		}
		if procs, rerr := os.ReadFile(filepath.Join(dir, "cgroup.procs")); rerr == nil {
			if n := len(strings.Fields(string(procs))); n > 0 {
				err = fmt.Errorf("%d process(es) still inside: %w", n, err)
			}
		}
		errs = append(errs, fmt.Errorf("cgroup: remove %s: %w", dir, err))
	}
	return errors.Join(errs...)
}

// hierarchies lists the distinct hierarchies in use.
func (m *Manager) hierarchies() []*hierarchy {
	var hs []*hierarchy
	for _, h := range []*hierarchy{m.memory, m.cpu} {
		if h != nil && !slices.Contains(hs, h) {
			hs = append(hs, h)
		}
	}
	return hs
}

// formatBytes prints a byte count in the largest binary unit that divides it.
func formatBytes(n int64) string {
	switch {
	case n%(1<<30) == 0:
		return fmt.Sprintf("%d GiB", n>>30)
	case n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	}
	return fmt.Sprintf("%d bytes", n)
}

// ApplyLimits detects the host's hierarchies under /sys/fs/cgroup and puts
// pid into task group name with the given limits: the one call the rank
// supervisor's cg-exec needs.
func ApplyLimits(name string, pid int, memoryBytes, cpuMillis int64) (string, error) {
	m, err := Detect("/sys/fs/cgroup")
	if err != nil {
		return "", err
	}
	return m.Apply(name, pid, Limits{MemoryBytes: memoryBytes, CPUMillis: cpuMillis})
}
