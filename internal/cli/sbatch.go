package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/gangway/gangway/internal/api"
	"github.com/gangway/gangway/internal/base/cmdkit"
	"github.com/gangway/gangway/internal/slurm"
)

// sbatchFlags are sbatch's options that `gangway submit` takes as they
// are, with the short forms that do not clash with gangway's own (-o is
// the output format here; a script's #SBATCH -o is read as sbatch's).
var sbatchFlags = []struct {
	long, short string
	valueless   bool
}{
	{"nodes", "N", false}, {"ntasks", "n", false}, {"ntasks-per-node", "", false}, {"gpus-per-task", "", false},
	{"gpus-per-node", "", false}, {"gpus", "G", false}, {"gres", "", false}, {"cpus-per-task", "c", false},
	{"mem", "", false}, {"mem-per-cpu", "", false}, {"mem-per-gpu", "", false}, {"time", "t", false},
	{"job-name", "J", false}, {"partition", "p", false}, {"dependency", "d", false}, {"signal", "", false},
	{"chdir", "D", false}, {"constraint", "C", false}, {"wrap", "", false}, {"account", "A", false},
	{"qos", "q", false}, {"requeue", "", true}, {"no-requeue", "", true}, {"exclusive", "", true},
	{"parsable", "", true}, {"wait", "W", true}, {"hold", "H", true},
}

// isSlurmSubmit says whether a submit's arguments are Slurm's: a batch
// script (a file that begins with #!), or one of sbatch's options.
func isSlurmSubmit(args []string) bool {
	for _, a := range args {
		if a == "--" {
			break
		}
		name := strings.TrimLeft(a, "-")
		name, _, _ = strings.Cut(name, "=")
		if strings.HasPrefix(a, "-") {
			for _, f := range sbatchFlags {
				if name == f.long || (f.short != "" && (name == f.short || (len(a) > 2 && a[1] != '-' && a[1:2] == f.short))) {
					return true
				}
			}
			continue
		}
		if isScript(a) {
			return true
		}
	}
	return false
}

func isScript(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	head := make([]byte, 2)
	n, _ := f.Read(head)
	return n == 2 && string(head) == "#!"
}

// runSubmitSlurm is `gangway submit [sbatch options] script.sh [args]`,
// `--wrap CMD` or `-- CMD`: the script's #SBATCH headers, then the
// command line's options over them, make the spec (internal/slurm), and
// what gangway reads differently is said on stderr.
func runSubmitSlurm(ctx context.Context, e *Env, args []string) int {
	fs := cmdkit.NewFlags(e.Stderr, "submit", "[sbatch options] SCRIPT [ARGS...] | --wrap CMD | -- CMD...")
	srv := serverFlag(fs, e)
	out := cmdkit.OutputFlag(fs)
	name := fs.String("name", "", "job name (sbatch: --job-name)")
	queue := fs.String("queue", "", "queue (sbatch: --partition)")
	prio := fs.Int("priority", 0, "priority; higher runs first")
	array := fs.String("array", "", "one job per index, as sbatch --array")
	workdir := fs.String("workdir", ".", "directory the ranks start in (sbatch: --chdir)")
	var env envFlag
	fs.Var(&env, "env", "`NAME=VALUE` added to every rank's environment")
	export := fs.String("export", "PATH", "names of this shell's variables to give the ranks (NONE: none; not ALL, which would send this shell's secrets)")
	key := fs.String("idempotency-key", "", "the submission's Idempotency-Key")
	var sb []string // sbatch's options as given, in order
	for _, f := range sbatchFlags {
		names := []string{f.long}
		if f.short != "" {
			names = append(names, f.short)
		}
		for _, n := range names {
			if f.valueless {
				fs.BoolFunc(n, "sbatch --"+f.long, func(string) error { sb = append(sb, "--"+f.long); return nil })
			} else {
				fs.Func(n, "sbatch --"+f.long, func(v string) error { sb = append(sb, "--"+f.long+"="+v); return nil })
			}
		}
	}
	// The script's own arguments are its, not submit's: split there.
	flags, script, scriptArgs := args, "", []string(nil)
	for i, a := range args {
		if a == "--" {
			break
		}
		if !strings.HasPrefix(a, "-") && isScript(a) && (i == 0 || !takesValue(fs, args[i-1])) {
			flags, script, scriptArgs = args[:i], a, args[i+1:]
			break
		}
	}
	pos, code, ok := cmdkit.ParseArgs(fs, flags)
	if !ok {
		return code
	}
	var cmd []string
	switch {
	case script != "" && len(pos) > 0:
		fmt.Fprintf(e.Stderr, "gangway submit: %q before the script: give options before it and its arguments after it\n", pos[0])
		return 2
	case len(pos) > 1 && pos[0] == "--":
		cmd = pos[1:]
	case len(pos) > 0:
		fmt.Fprintf(e.Stderr, "gangway submit: %q is not a batch script (its first line must start with #!); give a script, --wrap CMD or -- CMD\n", pos[0])
		return 2
	}
	var o slurm.Options
	var sc *slurm.Script
	if script != "" {
		b, err := os.ReadFile(script)
		if err != nil {
			return fail(e, fmt.Errorf("read the script: %w", err))
		}
		if sc, err = slurm.ParseScript(&o, b); err != nil {
			return fail(e, fmt.Errorf("%s: %w", script, err))
		}
	}
	if _, err := slurm.ParseArgs(&o, sb); err != nil {
		fmt.Fprintf(e.Stderr, "gangway submit: %v\n", err)
		return 2
	}
	if cmd != nil {
		if o.Wrap != "" || sc != nil {
			fmt.Fprintln(e.Stderr, "gangway submit: give a script, --wrap or -- CMD, one of them")
			return 2
		}
		o.Wrap = shellJoin(cmd)
	}
	spec, notes, err := slurm.Spec(&o, sc, script, scriptArgs)
	if err != nil {
		fmt.Fprintf(e.Stderr, "gangway submit: %v\n", err)
		return 2
	}
	for _, n := range notes {
		fmt.Fprintf(e.Stderr, "gangway submit: note: %s\n", n)
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if set["name"] {
		spec.Name = *name
	}
	if set["queue"] {
		spec.Queue = *queue
	}
	if set["array"] {
		spec.Array = *array
	}
	spec.Priority = *prio
	wd := *workdir
	if o.Chdir != "" {
		wd = o.Chdir
	}
	if err := submitFlags(e, spec, wd, env, *export, "", ""); err != nil {
		fmt.Fprintf(e.Stderr, "gangway submit: %v\n", err)
		return 2
	}
	body, err := json.Marshal(spec)
	if err != nil {
		return fail(e, err)
	}
	c, err := srv.client()
	if err != nil {
		return fail(e, err)
	}
	j, a, err := c.SubmitKeyed(ctx, body, *key)
	if err != nil {
		return fail(e, err)
	}
	ids := []string{}
	if a != nil {
		ids = a.Jobs
	} else {
		ids = append(ids, j.ID)
	}
	switch {
	case o.Parsable && a != nil:
		fmt.Fprintln(e.Stdout, a.ArrayID)
	case o.Parsable:
		fmt.Fprintln(e.Stdout, j.ID)
	case *out != cmdkit.Table && a != nil:
		if err := printAs(e, *out, a); err != nil {
			return fail(e, err)
		}
	case *out != cmdkit.Table:
		if err := printAs(e, *out, j); err != nil {
			return fail(e, err)
		}
	case a != nil:
		fmt.Fprintf(e.Stdout, "Submitted batch job %s (array %s: %d jobs)\n", ids[0], a.ArrayID, a.Count)
	default:
		fmt.Fprintf(e.Stdout, "Submitted batch job %s\n", j.ID)
	}
	if !o.Wait {
		return 0
	}
	return waitJobs(ctx, e, srv, ids)
}

// waitJobs is sbatch --wait: it returns once every job is final, 0 when
// all succeeded, 1 otherwise (saying which).
func waitJobs(ctx context.Context, e *Env, srv *conn, ids []string) int {
	c, err := srv.client()
	if err != nil {
		return fail(e, err)
	}
	code := 0
	for _, id := range ids {
		for {
			d, err := c.Job(ctx, id)
			if err != nil {
				return fail(e, err)
			}
			if ph := d.Job.Status.Phase; ph.Final() {
				if ph != api.JobSucceeded {
					fmt.Fprintf(e.Stderr, "gangway submit: job %s %s: %s\n", id, strings.ToLower(string(ph)), d.Job.Status.Reason)
					code = 1
				}
				break
			}
			select {
			case <-ctx.Done():
				return fail(e, ctx.Err())
			case <-time.After(500 * time.Millisecond):
			}
		}
	}
	return code
}

// takesValue says whether arg is a flag of fs that takes a value in the
// next argument.
func takesValue(fs *flag.FlagSet, arg string) bool {
	if !strings.HasPrefix(arg, "-") || strings.Contains(arg, "=") {
		return false
	}
	f := fs.Lookup(strings.TrimLeft(arg, "-"))
	if f == nil {
		return false
	}
	bf, ok := f.Value.(interface{ IsBoolFlag() bool })
	return !ok || !bf.IsBoolFlag()
}

// shellJoin quotes words for /bin/sh -c.
func shellJoin(words []string) string {
	var b bytes.Buffer
	for i, w := range words {
		if i > 0 {
			b.WriteByte(' ')
		}
		if w != "" && !strings.ContainsFunc(w, func(r rune) bool { return !isShellSafe(r) }) {
			b.WriteString(w)
			continue
		}
		b.WriteString("'" + strings.ReplaceAll(w, "'", `'\''`) + "'")
	}
	return b.String()
}

func isShellSafe(r rune) bool {
	return r < 128 && (r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || slices.Contains([]rune("-_./=:,+@%"), r))
}

// slurmShim runs the stand-ins a Slurm job's ranks find in their PATH:
// srun runs its command in the rank (replacing this process), scontrol
// answers show hostnames, and runs requeue, hold and release as gangway's.
func slurmShim(name string, args []string, e *Env) int {
	switch name {
	case "srun":
		cmd, err := slurm.SrunCommand(args)
		if err != nil {
			fmt.Fprintln(e.Stderr, err)
			return 2
		}
		return execCommand(cmd, e)
	default:
		if verb, ids, ok := slurm.ScontrolJobs(args); ok {
			return Main(context.Background(), append([]string{verb}, ids...), e)
		}
		return slurm.Scontrol(args, e.Getenv("SLURM_JOB_NODELIST"), slurm.ParseHostAddrs(e.Getenv("GANGWAY_SLURM_HOSTS")), e.Stdout, e.Stderr)
	}
}

// SlurmShimName is the stand-in argv0 names ("srun", "scontrol"), "" when
// the binary runs as gangway.
func SlurmShimName(argv0 string) string {
	switch n := filepath.Base(argv0); n {
	case "srun", "scontrol":
		return n
	}
	return ""
}

// Shim runs the binary as the stand-in name (SlurmShimName) names.
func Shim(name string, args []string, e *Env) int { return slurmShim(name, args, e) }

// execCommand replaces this process with cmd, found in PATH, as srun's
// task would be the command itself.
func execCommand(cmd []string, e *Env) int {
	path, err := exec.LookPath(cmd[0])
	if err != nil {
		fmt.Fprintf(e.Stderr, "srun: %v\n", err)
		return 127
	}
	err = syscall.Exec(path, cmd, os.Environ())
	fmt.Fprintf(e.Stderr, "srun: exec %s: %v\n", path, err)
	return 126
}
