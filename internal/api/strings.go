package api

import (
	"maps"
	"path"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// This file holds what a spec's strings may hold: names that print as
// themselves (a job name with a terminal escape could draw a fake row in
// `gangway get jobs`), arguments and environments that fit the kernel's
// limits and leave gangway's launch contract alone, and paths that are
// absolute.

// Limits on a command and an environment. Linux refuses to exec an
// argument or an environment entry of 128 KiB or more (MAX_ARG_STRLEN,
// its NUL included), and arguments and environment together above about
// 2 MiB.
const (
	MaxArgBytes     = 128<<10 - 1
	MaxCommandBytes = 1 << 20
	MaxEnvBytes     = 256 << 10
)

// LaunchEnv names the variables gangway sets in a rank's environment
// (internal/launch computes them): torchrun's, CUDA's device list and MPS
// share. With LaunchEnvPrefixes (Kubeflow's PET_* aliases, Slurm's
// SLURM_* for jobs with spec.slurm, and gangway's
// own GANGWAY_*), they are the launch contract, which a spec's env may not
// override. The node's NCCL settings are not in it: a user may tune NCCL.
var LaunchEnv = []string{
	"RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "NODE_RANK", "GROUP_RANK", "NNODES",
	"MASTER_ADDR", "MASTER_PORT", "CUDA_VISIBLE_DEVICES", "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE",
}

// LaunchEnvPrefixes: see LaunchEnv.
var LaunchEnvPrefixes = []string{"PET_", "GANGWAY_", "SLURM_", "SLURMD_"}

// forbiddenEnv are variables no spec may set: each loads code into every
// process of the rank before its own.
var forbiddenEnv = []string{"LD_PRELOAD", "LD_AUDIT"}

// InLaunchContract reports whether gangway sets the variable name itself.
func InLaunchContract(name string) bool {
	if slices.Contains(LaunchEnv, name) {
		return true
	}
	for _, p := range LaunchEnvPrefixes {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

// checkName records on field a name shown to people that holds a control
// character, a bidirectional override or bytes that are not UTF-8.
func checkName(fe *FieldErrors, field, s string) {
	if !utf8.ValidString(s) {
		fe.Add(field, "%q is not UTF-8 text", s)
		return
	}
	for i, r := range s {
		if isControl(r) || isBidi(r) {
			fe.Add(field, "%q holds %U at byte %d; names must be printable text", s, r, i)
			return
		}
	}
}

// checkText records on field a string that holds a control character
// other than tab and newline (a script's lines are fine; NUL, escape
// sequences and carriage returns are not).
func checkText(fe *FieldErrors, field, s string) {
	for i, r := range s {
		if r != '\t' && r != '\n' && isControl(r) {
			fe.Add(field, "holds %U at byte %d; of the control characters only tab and newline may appear", r, i)
			return
		}
	}
}

// checkArgs checks a command line: each argument's text and size, and the
// total.
func checkArgs(fe *FieldErrors, field string, args []string) {
	for i, a := range args {
		f := field + "[" + strconv.Itoa(i) + "]"
		if len(a) > MaxArgBytes {
			fe.Add(f, "%d bytes; at most %d (Linux's limit on one argument)", len(a), MaxArgBytes)
		}
		checkText(fe, f, a)
	}
	if total := argsBytes(args); total > MaxCommandBytes {
		fe.Add(field, "%d bytes in all; at most %d", total, MaxCommandBytes)
	}
}

// checkEnv checks a spec's environment: names that can be set, values'
// text and sizes, and that it leaves the launch contract and the loader
// alone.
func checkEnv(fe *FieldErrors, field string, env map[string]string) {
	for _, k := range slices.Sorted(maps.Keys(env)) {
		v := env[k]
		switch {
		case k == "" || strings.ContainsRune(k, '=') || strings.IndexFunc(k, isControl) >= 0:
			fe.Add(field, "invalid variable name %q", k)
			continue
		case InLaunchContract(k):
			fe.Add(field, "%s: gangway sets it for every rank (the launch contract); read it, do not set it", k)
		case slices.Contains(forbiddenEnv, k):
			fe.Add(field, "%s: loading code into every process of a rank is not allowed", k)
		}
		if len(k)+len(v)+1 > MaxArgBytes {
			fe.Add(field, "%s: %d bytes; at most %d (Linux's limit on one variable)", k, len(k)+len(v)+1, MaxArgBytes)
		}
		checkText(fe, field+"."+k, v)
	}
	if total := envBytes(env); total > MaxEnvBytes {
		fe.Add(field, "%d bytes in all; at most %d", total, MaxEnvBytes)
	}
}

// MaxSecretEnv bounds spec.secretEnv's entries.
const MaxSecretEnv = 64

// checkSecretEnv checks spec.secretEnv: variable names as spec.env's, not
// also in spec.env, and file names that stay in the user's secrets
// directory (one path element: no '/', no "..").
func checkSecretEnv(fe *FieldErrors, s *JobSpec) {
	if len(s.SecretEnv) > MaxSecretEnv {
		fe.Add("spec.secretEnv", "at most %d variables (got %d)", MaxSecretEnv, len(s.SecretEnv))
	}
	names := make(map[string]string, len(s.SecretEnv))
	for _, k := range slices.Sorted(maps.Keys(s.SecretEnv)) {
		names[k] = ""
		f := s.SecretEnv[k]
		switch {
		case f == "" || f == "." || f == ".." || strings.ContainsRune(f, '/') || strings.IndexFunc(f, isControl) >= 0 || len(f) > maxNameLen:
			fe.Add("spec.secretEnv."+k, "%q: name a file in your secrets directory on the server (one name, no '/' or '..')", f)
		case s.Env[k] != "":
			fe.Add("spec.secretEnv."+k, "also set in spec.env; give it in one place")
		}
	}
	checkEnv(fe, "spec.secretEnv", names)
}

// ProcessBytes is what the spec adds to each process it starts: its
// command and env, as checkArgs and checkEnv count them. Every rank's
// assignment carries a copy, and the store writes a gang's in one
// transaction.
func (s *JobSpec) ProcessBytes() int {
	return argsBytes(s.Command) + envBytes(s.Env)
}

func argsBytes(args []string) int {
	n := 0
	for _, a := range args {
		n += len(a) + 1
	}
	return n
}

func envBytes(env map[string]string) int {
	n := 0
	for k, v := range env {
		n += len(k) + len(v) + 2
	}
	return n
}

// checkLabels checks a label selector's keys and values as names.
func checkLabels(fe *FieldErrors, field string, labels map[string]string) {
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		checkName(fe, field, k)
		checkName(fe, field+"."+k, labels[k])
	}
}

// checkAbsDir records on field a directory that is not absolute, not
// clean ("/a/../etc" is /etc in disguise) or holds a control character.
func checkAbsDir(fe *FieldErrors, field, dir string) {
	switch {
	case strings.IndexFunc(dir, isControl) >= 0:
		fe.Add(field, "%q holds a control character", dir)
	case !path.IsAbs(dir):
		fe.Add(field, "%q must be an absolute path", dir)
	case path.Clean(dir) != dir && path.Clean(dir)+"/" != dir:
		fe.Add(field, "%q is not a clean path; write %s", dir, path.Clean(dir))
	}
}

// isControl: C0, DEL and C1.
func isControl(r rune) bool { return r < 0x20 || r >= 0x7f && r <= 0x9f }

// isBidi: the marks that reorder how text around them is shown.
func isBidi(r rune) bool {
	return r >= 0x202a && r <= 0x202e || r >= 0x2066 && r <= 0x2069 || r == 0x200e || r == 0x200f || r == 0x061c
}
