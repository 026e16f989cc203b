package cgroup

import (
	"fmt"
	"slices"
	"strings"
)

// membership is one line of /proc/<pid>/cgroup: the cgroup a process is
// in within one hierarchy.
type membership struct {
	id          string   // hierarchy ID; "0" for cgroup v2
	controllers []string // v1 controllers of the hierarchy, "name=systemd" style names included; none for v2
	path        string   // the cgroup, relative to the hierarchy's root, starting with "/"
}

// memberships is a parsed /proc/<pid>/cgroup.
type memberships []membership

// parseProcCgroup reads /proc/<pid>/cgroup: one "id:controllers:path"
// line per hierarchy (cgroups(7)). The path may itself contain colons.
func parseProcCgroup(data []byte) (memberships, error) {
	var ms memberships
	for i, line := range strings.Split(string(data), "\n") {
		if line == "" {
			continue
		}
		f := strings.SplitN(line, ":", 3)
		if len(f) != 3 {
			return nil, fmt.Errorf("line %d: %q: want hierarchy-id:controllers:path", i+1, line)
		}
		if f[0] == "" || strings.Trim(f[0], "0123456789") != "" {
			return nil, fmt.Errorf("line %d: hierarchy id %q: want a decimal number", i+1, f[0])
		}
		if !strings.HasPrefix(f[2], "/") {
			return nil, fmt.Errorf("line %d: path %q: want an absolute cgroup path", i+1, f[2])
		}
		m := membership{id: f[0], path: f[2]}
		if f[1] != "" {
			m.controllers = strings.Split(f[1], ",")
		}
		ms = append(ms, m)
	}
	return ms, nil
}

// unifiedPath is the process's cgroup in the v2 hierarchy.
func (ms memberships) unifiedPath() (string, bool) {
	for _, m := range ms {
		if m.id == "0" && len(m.controllers) == 0 {
			return m.path, true
		}
	}
	return "", false
}

// v1Path is the process's cgroup in the v1 hierarchy holding controller.
func (ms memberships) v1Path(controller string) (string, bool) {
	for _, m := range ms {
		if m.id != "0" && slices.Contains(m.controllers, controller) {
			return m.path, true
		}
	}
	return "", false
}
