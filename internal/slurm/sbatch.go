package slurm

import (
	"bufio"
	"bytes"
	"fmt"
	"strconv"
	"strings"
	"unicode"
)

// Options are the sbatch options gangway understands, as given (a
// script's #SBATCH headers, then the command line's flags over them).
// Zero values are "not given".
type Options struct {
	Nodes         int
	Tasks         int // -n, --ntasks
	TasksPerNode  int
	GPUsPerTask   int
	GPUsPerNode   int // --gres=gpu:N, --gpus-per-node
	GPUs          int // --gpus, -G: in all
	CPUsPerTask   int
	Mem           int64 // per node, bytes
	MemPerCPU     int64
	MemPerGPU     int64
	Time          string // as given; api.ParseDuration reads it
	Name          string
	Partition     string
	Array         string
	Dependency    string
	Signal        string // [B:]SIG[@TIME]
	Output, Error string
	Chdir         string
	Export        string
	Requeue       *bool
	Exclusive     bool
	Constraint    string
	Wrap          string
	Parsable      bool
	Wait          bool
	Hold          bool

	// Ignored are the options read but without effect in gangway, each
	// with why, for the user to see.
	Ignored []string
}

// option describes one sbatch option: its names and how it sets Options.
type option struct {
	long  string
	short byte // 0: none
	flag  bool // takes no value
	set   func(o *Options, v string) error
}

func intOpt(field func(o *Options) *int) func(o *Options, v string) error {
	return func(o *Options, v string) error {
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil || n < 0 {
			return fmt.Errorf("%q: want a whole number", v)
		}
		*field(o) = n
		return nil
	}
}

func strOpt(field func(o *Options) *string) func(o *Options, v string) error {
	return func(o *Options, v string) error { *field(o) = v; return nil }
}

func memOpt(field func(o *Options) *int64) func(o *Options, v string) error {
	return func(o *Options, v string) error {
		n, err := slurmMem(v)
		if err != nil {
			return err
		}
		*field(o) = n
		return nil
	}
}

// slurmMem reads Slurm's memory: a number of megabytes, or with K, M, G
// or T (1024-based).
func slurmMem(v string) (int64, error) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, fmt.Errorf("%q: want megabytes or a size such as 64G", v)
	}
	mult := int64(1 << 20)
	switch unicode.ToUpper(rune(v[len(v)-1])) {
	case 'K':
		mult, v = 1<<10, v[:len(v)-1]
	case 'M':
		mult, v = 1<<20, v[:len(v)-1]
	case 'G':
		mult, v = 1<<30, v[:len(v)-1]
	case 'T':
		mult, v = 1<<40, v[:len(v)-1]
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 || n > (1<<62)/mult {
		return 0, fmt.Errorf("%q: want megabytes or a size such as 64G", v)
	}
	return n * mult, nil
}

func ignored(why string) func(o *Options, v string) error {
	return func(o *Options, v string) error { o.Ignored = append(o.Ignored, why); return nil }
}

var options = []option{
	{long: "nodes", short: 'N', set: func(o *Options, v string) error {
		lo, _, _ := strings.Cut(v, "-") // min-max: gangway places the minimum
		return intOpt(func(o *Options) *int { return &o.Nodes })(o, lo)
	}},
	{long: "ntasks", short: 'n', set: intOpt(func(o *Options) *int { return &o.Tasks })},
	{long: "ntasks-per-node", set: intOpt(func(o *Options) *int { return &o.TasksPerNode })},
	{long: "gpus-per-task", set: intOpt(func(o *Options) *int { return &o.GPUsPerTask })},
	{long: "gpus-per-node", set: func(o *Options, v string) error {
		return intOpt(func(o *Options) *int { return &o.GPUsPerNode })(o, gpuCount(v))
	}},
	{long: "gpus", short: 'G', set: func(o *Options, v string) error {
		return intOpt(func(o *Options) *int { return &o.GPUs })(o, gpuCount(v))
	}},
	{long: "gres", set: func(o *Options, v string) error {
		for _, g := range strings.Split(v, ",") {
			parts := strings.Split(g, ":")
			if parts[0] != "gpu" {
				o.Ignored = append(o.Ignored, fmt.Sprintf("--gres=%s: only gpu is a resource gangway places", g))
				continue
			}
			n := "1"
			if len(parts) > 1 {
				n = parts[len(parts)-1]
			}
			if err := intOpt(func(o *Options) *int { return &o.GPUsPerNode })(o, n); err != nil {
				return err
			}
		}
		return nil
	}},
	{long: "cpus-per-task", short: 'c', set: intOpt(func(o *Options) *int { return &o.CPUsPerTask })},
	{long: "mem", set: memOpt(func(o *Options) *int64 { return &o.Mem })},
	{long: "mem-per-cpu", set: memOpt(func(o *Options) *int64 { return &o.MemPerCPU })},
	{long: "mem-per-gpu", set: memOpt(func(o *Options) *int64 { return &o.MemPerGPU })},
	{long: "time", short: 't', set: strOpt(func(o *Options) *string { return &o.Time })},
	{long: "job-name", short: 'J', set: strOpt(func(o *Options) *string { return &o.Name })},
	{long: "partition", short: 'p', set: strOpt(func(o *Options) *string { return &o.Partition })},
	{long: "array", short: 'a', set: strOpt(func(o *Options) *string { return &o.Array })},
	{long: "dependency", short: 'd', set: strOpt(func(o *Options) *string { return &o.Dependency })},
	{long: "signal", set: strOpt(func(o *Options) *string { return &o.Signal })},
	{long: "output", short: 'o', set: strOpt(func(o *Options) *string { return &o.Output })},
	{long: "error", short: 'e', set: strOpt(func(o *Options) *string { return &o.Error })},
	{long: "chdir", short: 'D', set: strOpt(func(o *Options) *string { return &o.Chdir })},
	{long: "export", set: strOpt(func(o *Options) *string { return &o.Export })},
	{long: "requeue", flag: true, set: func(o *Options, _ string) error { t := true; o.Requeue = &t; return nil }},
	{long: "no-requeue", flag: true, set: func(o *Options, _ string) error { f := false; o.Requeue = &f; return nil }},
	{long: "exclusive", flag: true, set: func(o *Options, _ string) error { o.Exclusive = true; return nil }},
	{long: "constraint", short: 'C', set: strOpt(func(o *Options) *string { return &o.Constraint })},
	{long: "wrap", set: strOpt(func(o *Options) *string { return &o.Wrap })},
	{long: "parsable", flag: true, set: func(o *Options, _ string) error { o.Parsable = true; return nil }},
	{long: "wait", short: 'W', flag: true, set: func(o *Options, _ string) error { o.Wait = true; return nil }},
	{long: "hold", short: 'H', flag: true, set: func(o *Options, _ string) error { o.Hold = true; return nil }},
	{long: "account", short: 'A', set: ignored("--account: gangway charges usage to the job's queue and user")},
	{long: "qos", short: 'q', set: ignored("--qos: gangway's queues and priorities stand for QOS")},
	{long: "mail-type", set: ignored("--mail-type: gangway sends no mail; watch with gangway events -f")},
	{long: "mail-user", set: ignored("--mail-user: gangway sends no mail")},
	{long: "nice", set: ignored("--nice: use --priority")},
	{long: "comment", set: ignored("--comment: kept by Slurm only")},
	{long: "open-mode", set: ignored("--open-mode: gangway keeps every rank's log per attempt")},
	{long: "distribution", short: 'm', set: ignored("--distribution: gangway places ranks by topology")},
	{long: "gpu-bind", set: ignored("--gpu-bind: each rank gets its own GPUs (CUDA_VISIBLE_DEVICES)")},
	{long: "cpu-bind", set: ignored("--cpu-bind: ranks are bound by cgroups, not by CPU lists")},
	{long: "mpi", set: ignored("--mpi: gangway launches ranks itself")},
	{long: "licenses", short: 'L', set: ignored("--licenses: gangway has no licenses")},
	{long: "reservation", set: ignored("--reservation: gangway has no reservations")},
	{long: "begin", set: ignored("--begin: submit when the job should start")},
	{long: "deadline", set: ignored("--deadline: use --time")},
	{long: "verbose", short: 'v', flag: true, set: ignored("--verbose")},
	{long: "quiet", short: 'Q', flag: true, set: ignored("--quiet")},
}

// gpuCount reads "4" or "a100:4" (a type gangway does not place by).
func gpuCount(v string) string {
	if i := strings.LastIndexByte(v, ':'); i >= 0 {
		return v[i+1:]
	}
	return v
}

func lookup(long string, short byte) *option {
	for i := range options {
		o := &options[i]
		if (long != "" && o.long == long) || (short != 0 && o.short == short) {
			return o
		}
	}
	return nil
}

// ParseArgs reads sbatch's options from args (--name=value, --name
// value, -n value, -nvalue) into o, up to the first argument that is not
// an option, and returns the rest. An unknown option is an error naming
// it, never dropped in silence.
func ParseArgs(o *Options, args []string) (rest []string, err error) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			return args[i+1:], nil
		}
		if len(a) < 2 || a[0] != '-' {
			return args[i:], nil
		}
		var opt *option
		var val string
		hasVal := false
		if strings.HasPrefix(a, "--") {
			name, v, ok := strings.Cut(a[2:], "=")
			opt, val, hasVal = lookup(name, 0), v, ok
			if opt == nil {
				return nil, fmt.Errorf("sbatch option --%s: gangway does not know it", name)
			}
		} else {
			opt = lookup("", a[1])
			if opt == nil {
				return nil, fmt.Errorf("sbatch option -%c: gangway does not know it", a[1])
			}
			if len(a) > 2 {
				val, hasVal = strings.TrimPrefix(a[2:], "="), true
			}
		}
		name := "--" + opt.long
		switch {
		case opt.flag && hasVal:
			return nil, fmt.Errorf("sbatch option %s takes no value", name)
		case !opt.flag && !hasVal:
			if i+1 >= len(args) {
				return nil, fmt.Errorf("sbatch option %s needs a value", name)
			}
			i++
			val = args[i]
		}
		if err := opt.set(o, val); err != nil {
			return nil, fmt.Errorf("sbatch option %s: %w", name, err)
		}
	}
	return nil, nil
}

// Script is a batch script read for its #SBATCH headers.
type Script struct {
	Interpreter string // from the #! line
	Body        []byte // the whole script, run as each rank's command
}

// ParseScript reads a batch script's #SBATCH headers into o, as sbatch
// does: the lines that begin with #SBATCH before the first line that is
// neither a comment nor blank. A script must begin with #!, as sbatch
// requires.
func ParseScript(o *Options, b []byte) (*Script, error) {
	if !bytes.HasPrefix(b, []byte("#!")) {
		return nil, fmt.Errorf("not a batch script: its first line must start with #! and an interpreter, as sbatch requires")
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	s := &Script{Body: b}
	line := 0
	for sc.Scan() {
		line++
		t := strings.TrimSpace(sc.Text())
		if line == 1 {
			s.Interpreter = strings.TrimSpace(t[2:])
			continue
		}
		if t == "" {
			continue
		}
		if !strings.HasPrefix(t, "#") {
			break
		}
		rest, ok := strings.CutPrefix(t, "#SBATCH")
		if !ok || (rest != "" && !unicode.IsSpace(rune(rest[0]))) {
			continue
		}
		words, err := shellWords(rest)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", line, err)
		}
		left, err := ParseArgs(o, words)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", line, err)
		}
		if len(left) > 0 {
			return nil, fmt.Errorf("line %d: %q is not an option", line, left[0])
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read the script: %w", err)
	}
	if s.Interpreter == "" {
		return nil, fmt.Errorf("line 1: #! names no interpreter")
	}
	return s, nil
}

// shellWords splits an #SBATCH line's options as sbatch does: at spaces
// outside quotes, up to a word that begins a comment.
func shellWords(s string) ([]string, error) {
	var out []string
	var cur strings.Builder
	in := false
	var quote byte
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case quote != 0:
			if c == quote {
				quote = 0
			} else {
				cur.WriteByte(c)
			}
		case c == '"' || c == '\'':
			quote, in = c, true
		case c == ' ' || c == '\t':
			if in {
				out = append(out, cur.String())
				cur.Reset()
				in = false
			}
		case c == '#' && !in:
			return out, nil
		default:
			cur.WriteByte(c)
			in = true
		}
	}
	if quote != 0 {
		return nil, fmt.Errorf("unclosed %c quote", quote)
	}
	if in {
		out = append(out, cur.String())
	}
	return out, nil
}
