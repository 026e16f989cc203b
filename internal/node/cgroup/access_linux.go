//go:build linux

package cgroup

import "golang.org/x/sys/unix"

// writable reports whether this process may create cgroups in dir.
func writable(dir string) error { return unix.Access(dir, unix.W_OK) }
