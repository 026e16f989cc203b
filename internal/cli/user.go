package cli

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/gangway/gangway/internal/api"
	"github.com/gangway/gangway/internal/api/client"
	"github.com/gangway/gangway/internal/base/cmdkit"
)

// printAs writes v as json or yaml (the table forms are each command's).
func printAs(e *Env, format cmdkit.Format, v any) error {
	return cmdkit.Print(e.Stdout, format, v, nil)
}

func runSubmit(ctx context.Context, e *Env, args []string) int {
	if isSlurmSubmit(args) {
		return runSubmitSlurm(ctx, e, args)
	}
	fs := cmdkit.NewFlags(e.Stderr, "submit", "JOB.yaml | [flags] -- COMMAND [ARGS...]")
	srv := serverFlag(fs, e)
	out := cmdkit.OutputFlag(fs)
	name := fs.String("name", "", "job name")
	queue := fs.String("queue", "", "queue (default \"default\")")
	prio := fs.Int("priority", 0, "priority; higher runs first")
	ranks := fs.Int("ranks", 0, "number of ranks (world size)")
	gpus := fs.Int("gpus-per-rank", 1, "GPUs per rank")
	perNode := fs.Int("ranks-per-node", 0, "ranks per node (default: pack onto the fewest nodes)")
	var maxRestarts optionalInt
	fs.Var(&maxRestarts, "max-restarts", "at most `N` restarts after failures (default 3; 0: never restart)")
	array := fs.String("array", "", "submit one job per index, as sbatch --array: 0-999, 1,3,5-9, 0-15:4, with %N to run at most N at once")
	workdir := fs.String("workdir", ".", "directory the ranks start in, on a file system every node sees; relative to this one, as sbatch (\"\": the agent's task directory for the rank)")
	var env envFlag
	fs.Var(&env, "env", "`NAME=VALUE` added to every rank's environment, over --export's (repeat it for more)")
	export := fs.String("export", "PATH", "comma-separated names of variables of this shell to give the ranks, as sbatch --export (NONE: none); "+
		"the rest of the ranks' environment is the agent's and gangway's, never this shell's")
	launchMode := fs.String("launch", "", "how ranks become processes: per-rank (default), per-node, torchrun or deepspeed (one process per node: the command must begin with torchrun or deepspeed, and gangway inserts --nnodes, --node_rank, --nproc_per_node, --master_addr and --master_port after it)")
	ckptDir := fs.String("checkpoint-dir", "", "the job's checkpoint directory (GANGWAY_CHECKPOINT_DIR), under the server's --checkpoint-root or a --checkpoint-dir-root (default: one the server makes under --checkpoint-root)")
	key := fs.String("idempotency-key", "", "the submission's Idempotency-Key (default: a new random one, which retries after a lost answer reuse): "+
		"the same submission sent again with the same key, within a day, creates nothing and prints what the first created")
	pos, code, ok := cmdkit.ParseArgs(fs, args)
	if !ok {
		return code
	}
	var body []byte
	switch {
	case len(pos) == 1 && pos[0] != "--":
		set := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
		for _, f := range []string{"workdir", "env", "export", "launch", "checkpoint-dir", "ranks", "name", "max-restarts"} {
			if set[f] {
				fmt.Fprintf(e.Stderr, "gangway submit: --%s applies to a command after --; a job file sets it in the file\n", f)
				return 2
			}
		}
		b, err := readSpecFile(pos[0])
		if err != nil {
			return fail(e, err)
		}
		body = b
		if *array != "" {
			// The file as an array: decoded here (errors carry the file's
			// line and column), the array set, sent as JSON.
			spec, err := api.DecodeJobSpec(b)
			if err != nil {
				return fail(e, fmt.Errorf("%s: %w", pos[0], err))
			}
			spec.Array = *array
			if body, err = json.Marshal(spec); err != nil {
				return fail(e, err)
			}
		}
	case len(pos) > 1 && pos[0] == "--":
		spec := api.JobSpec{Name: *name, Queue: *queue, Priority: *prio, Ranks: *ranks, GPUsPerRank: *gpus,
			RanksPerNode: *perNode, Command: pos[1:], Array: *array, MaxRestarts: maxRestarts.v}
		if err := submitFlags(e, &spec, *workdir, env, *export, *launchMode, *ckptDir); err != nil {
			fmt.Fprintf(e.Stderr, "gangway submit: %v\n", err)
			return 2
		}
		b, err := json.Marshal(spec)
		if err != nil {
			return fail(e, err)
		}
		body = b
	default:
		fmt.Fprintln(e.Stderr, "gangway submit: give a job file, or flags and a command after --")
		fs.Usage()
		return 2
	}
	c, err := srv.client()
	if err != nil {
		return fail(e, err)
	}
	j, a, err := c.SubmitKeyed(ctx, body, *key)
	if err != nil {
		return fail(e, err)
	}
	if a != nil {
		if *out != "table" {
			return exitOn(e, printAs(e, *out, a))
		}
		fmt.Fprintf(e.Stdout, "array %s submitted: %d jobs, %s to %s\n", a.ArrayID, a.Count, a.Jobs[0], a.Jobs[len(a.Jobs)-1])
		return 0
	}
	if *out != "table" {
		return exitOn(e, printAs(e, *out, j))
	}
	fmt.Fprintf(e.Stdout, "job %s submitted\n", j.ID)
	return 0
}

// submitFlags puts submit's flags for a command into spec: the working
// directory and checkpoint directory made absolute against this one, the
// exported variables read from this environment, --env over them.
func submitFlags(e *Env, spec *api.JobSpec, workdir string, env envFlag, export, launchMode, ckptDir string) error {
	cwd, err := e.Getwd()
	if err != nil {
		return fmt.Errorf("the working directory: %w", err)
	}
	abs := func(p string) string {
		if p == "" || filepath.IsAbs(p) {
			return filepath.Clean(p)
		}
		return filepath.Join(cwd, p)
	}
	if workdir != "" {
		spec.WorkingDir = abs(workdir)
	}
	if ckptDir != "" {
		spec.CheckpointDir = abs(ckptDir)
	}
	switch m := api.LaunchMode(launchMode); m {
	case "", api.LaunchPerRank, api.LaunchPerNode, api.LaunchTorchrun, api.LaunchDeepSpeed:
		spec.Launch = m
	default:
		return fmt.Errorf("--launch %q: want per-rank, per-node, torchrun or deepspeed", launchMode)
	}
	vars := map[string]string{}
	switch export {
	case "", "NONE":
	case "ALL":
		return fmt.Errorf("--export ALL: name the variables to give the ranks (ALL would send this shell's tokens and secrets into the job's spec)")
	default:
		for _, n := range strings.Split(export, ",") {
			if n = strings.TrimSpace(n); n == "" {
				continue
			}
			if strings.ContainsAny(n, "=") {
				return fmt.Errorf("--export %q: want names of variables of this shell (NAME,NAME); give values with --env NAME=VALUE", export)
			}
			if v := e.Getenv(n); v != "" {
				vars[n] = v
			}
		}
	}
	for _, kv := range env {
		vars[kv[0]] = kv[1]
	}
	if len(vars) > 0 {
		spec.Env = vars
	}
	return nil
}

// optionalInt is an int flag that tells "not given" from a value; its
// help states the default itself.
type optionalInt struct{ v *int }

func (o *optionalInt) String() string {
	if o == nil || o.v == nil {
		return ""
	}
	return strconv.Itoa(*o.v)
}

func (o *optionalInt) Set(s string) error {
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		return fmt.Errorf("want a whole number, 0 or more")
	}
	o.v = &n
	return nil
}

// envFlag collects --env NAME=VALUE in order.
type envFlag [][2]string

func (f *envFlag) String() string { return "" }

func (f *envFlag) Set(s string) error {
	k, v, ok := strings.Cut(s, "=")
	if !ok || k == "" {
		return fmt.Errorf("want NAME=VALUE")
	}
	*f = append(*f, [2]string{k, v})
	return nil
}

func readSpecFile(path string) ([]byte, error) {
	if path == "-" {
		return io.ReadAll(os.Stdin)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read job file: %w", err)
	}
	return b, nil
}

func exitOn(e *Env, err error) int {
	if err != nil {
		return fail(e, err)
	}
	return 0
}

func runGet(ctx context.Context, e *Env, args []string) int {
	fs := cmdkit.NewFlags(e.Stderr, "get", "jobs|nodes|queues|deployments|job ID|node NAME [flags]")
	srv := serverFlag(fs, e)
	out := cmdkit.OutputFlagWide(fs)
	live := fs.Bool("live", false, "jobs: only those not finished (pending, running, stopping), as squeue shows")
	limit := fs.Int("limit", 0, "jobs: only the newest N")
	user := fs.String("user", "", "jobs: only this user's")
	me := fs.Bool("me", false, "jobs: only mine")
	all := fs.Bool("all", false, "jobs: finished ones too, also those retention moved to the server's --job-archive, newest first, with sacct's columns")
	since := fs.String("since", "", sinceHelp)
	watch := fs.Bool("watch", false, "jobs: print the list, then a line for each job that changes, until Ctrl-C (kubectl get -w)")
	fs.BoolVar(watch, "w", false, "short for --watch")
	selector := fs.String("l", "", "jobs and nodes: only those whose labels this selects, as kubectl's -l: key=value,key!=value,key,!key")
	fs.StringVar(selector, "selector", "", "long for -l")
	pos, code, ok := cmdkit.ParseArgs(fs, splitKindNames(args))
	if !ok {
		return code
	}
	if *limit < 0 {
		fmt.Fprintf(e.Stderr, "gangway get: --limit %d: want a positive number\n", *limit)
		return 2
	}
	jobList := len(pos) == 1 && (pos[0] == "jobs" || pos[0] == "job")
	if (*live || *limit > 0 || *user != "" || *me || *all || *since != "" || *watch) && !jobList {
		fmt.Fprintln(e.Stderr, "gangway get: --live, --limit, --user, --me, --all, --since and --watch apply to the job list (gangway get jobs)")
		return 2
	}
	if *out == cmdkit.CSV && (len(pos) == 0 || (pos[0] != "jobs" && pos[0] != "job")) {
		fmt.Fprintln(e.Stderr, "gangway get: -o csv writes jobs (gangway get jobs); use -o json or -o yaml")
		return 2
	}
	if *out == cmdkit.Wide && (len(pos) == 0 || !slices.Contains([]string{"jobs", "job", "nodes", "node", "queues", "queue"}, pos[0])) {
		fmt.Fprintln(e.Stderr, "gangway get: -o wide shows more columns of jobs, nodes and queues (gangway get jobs|nodes|queues -o wide)")
		return 2
	}
	if *selector != "" && (len(pos) != 1 || (pos[0] != "jobs" && pos[0] != "job" && pos[0] != "nodes" && pos[0] != "node")) {
		fmt.Fprintln(e.Stderr, "gangway get: -l selects among jobs or nodes (gangway get jobs|nodes -l team=nlp)")
		return 2
	}
	asked := jobsAsked{out: *out, live: *live, all: *all, watch: *watch, me: *me, limit: *limit, user: *user, since: *since, selector: *selector}
	if err := checkJobsFlags(&asked); err != nil {
		fmt.Fprintf(e.Stderr, "gangway get: %v\n", err)
		return 2
	}
	c, err := srv.client()
	if err != nil {
		return fail(e, err)
	}
	if len(pos) == 0 {
		fs.Usage()
		return 2
	}
	switch pos[0] {
	case "jobs", "job":
		if len(pos) == 2 {
			d, err := c.Job(ctx, pos[1])
			if err != nil {
				return fail(e, err)
			}
			switch *out {
			case cmdkit.CSV:
				return exitOn(e, jobsCSV(e.Stdout, []*api.Job{&d.Job}, time.Now()))
			case cmdkit.Table, cmdkit.Wide:
				printJobs(e.Stdout, []*api.Job{&d.Job}, *out == cmdkit.Wide)
				return 0
			}
			return exitOn(e, printAs(e, *out, d.Job))
		}
		return getJobs(ctx, e, c, asked)
	case "nodes", "node":
		return getKind(ctx, e, *out, pos, c.Node, func() ([]*api.Node, error) {
			l, err := c.NodesSelected(ctx, *selector)
			return l.Nodes, err
		}, func(w io.Writer, nodes []*api.Node) { printNodes(w, nodes, *out == cmdkit.Wide) })
	case "queues", "queue":
		l, err := c.Queues(ctx)
		if err != nil {
			return fail(e, err)
		}
		if *out != cmdkit.Table && *out != cmdkit.Wide {
			return exitOn(e, printAs(e, *out, l.Queues))
		}
		printQueues(e.Stdout, l.Queues, *out == cmdkit.Wide)
	case "deployments", "deployment", "deploy":
		return getKind(ctx, e, *out, pos, c.Deployment, func() ([]*api.Deployment, error) {
			l, err := c.Deployments(ctx)
			return l.Deployments, err
		}, printDeployments)
	default:
		fmt.Fprintf(e.Stderr, "gangway get: unknown kind %q (want jobs, nodes, queues or deployments)\n", pos[0])
		return 2
	}
	return 0
}

// getKind prints one object by name (pos[1]) or all of them, as a table or
// in the -o format.
func getKind[T any](ctx context.Context, e *Env, out cmdkit.Format, pos []string, one func(context.Context, string) (T, error),
	all func() ([]T, error), table func(io.Writer, []T)) int {
	var items []T
	if len(pos) == 2 {
		x, err := one(ctx, pos[1])
		if err != nil {
			return fail(e, err)
		}
		items = []T{x}
	} else {
		l, err := all()
		if err != nil {
			return fail(e, err)
		}
		items = l
	}
	if out != cmdkit.Table && out != cmdkit.Wide {
		return exitOn(e, printAs(e, out, items))
	}
	table(e.Stdout, items)
	return 0
}

func age(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	d := time.Since(t)
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh", int(d.Hours()))
	}
	return fmt.Sprintf("%dd", int(d.Hours()/24))
}

// jobsHead are the columns of `get jobs`, as squeue's.
var jobsHead = []string{"ID", "NAME", "USER", "QUEUE", "PHASE", "RANKS", "GPUS", "ATTEMPT", "NODES", "AGE", "REASON"}

// jobAgeCol is the AGE column of jobsHead, which changes by itself.
const jobAgeCol = 9

// jobRow is a job in jobsHead's columns.
func jobRow(j *api.Job) []string {
	att, nodes := "-", "-"
	if a := j.Status.Current(); a != nil {
		att = strconv.Itoa(a.Number)
		nodes = strings.Join(a.Nodes(), ",")
	}
	return []string{j.ID, dash(jobName(j)), dash(j.Spec.User), j.Spec.Queue, string(j.Status.Phase),
		strconv.Itoa(j.Spec.Ranks), strconv.Itoa(j.Spec.GPUs()), att, nodes, age(j.SubmittedAt), truncate(j.Status.Reason, 70)}
}

// jobsWideHead are the columns -o wide adds to jobsHead.
var jobsWideHead = []string{"ELAPSED", "RESTARTS", "EXIT", "PRIORITY", "LAUNCH", "LABELS"}

// printJobs writes jobs as a table, with wide jobsWideHead's columns too.
func printJobs(w io.Writer, jobs []*api.Job, wide bool) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	head := jobsHead
	var more [][]string
	if wide {
		head = append(slices.Clone(jobsHead), jobsWideHead...)
		more = historyRows(jobs, time.Now(), false)
	}
	fmt.Fprintln(tw, strings.Join(head, "\t"))
	for i, j := range jobs {
		row := jobRow(j)
		if wide {
			h := more[i] // historyHead's columns
			row = append(row, h[9], h[11], h[12], strconv.Itoa(j.Spec.Priority), dash(string(j.Spec.Launch)), fmtLabels(j.Spec.Labels))
		}
		fmt.Fprintln(tw, strings.Join(row, "\t"))
	}
	tw.Flush()
}

// printNodes writes nodes as a table; wide adds their CPUs, memory,
// cgroups, where the GPUs were found and the agent's URL.
func printNodes(w io.Writer, nodes []*api.Node, wide bool) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	head := "NAME\tSTATE\tGPUS\tUSED\tFREE\tMODEL\tADDRESS\tLAST SEEN\tLABELS"
	if wide {
		head += "\tCPUS\tMEMORY\tCGROUPS\tGPU SOURCE\tAGENT"
	}
	fmt.Fprintln(tw, head)
	for _, n := range nodes {
		state := nodeState(n)
		model := "-"
		if len(n.GPUs) > 0 {
			model = n.GPUs[0].Model
		}
		gpus := strconv.Itoa(len(n.GPUs))
		if out := len(n.GPUs) - inService(n); out > 0 && n.Status.Fault == "" {
			gpus = fmt.Sprintf("%d (%d out)", len(n.GPUs), out)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%s\t%s\t%s\t%s", n.Name, state, gpus, n.Status.UsedGPUs, n.Status.FreeGPUs, model, n.Address,
			age(n.Status.LastHeartbeat), fmtLabels(n.Labels))
		if wide {
			mem := "-"
			if n.MemoryBytes > 0 {
				mem = fmt.Sprintf("%.0f GiB", float64(n.MemoryBytes)/(1<<30))
			}
			fmt.Fprintf(tw, "\t%d\t%s\t%s\t%s\t%s", n.CPUs, mem, dash(n.Cgroups), dash(n.GPUSource), dash(n.AgentURL))
		}
		fmt.Fprintln(tw)
	}
	tw.Flush()
}

// nodeState is a node's state with what keeps ranks off it: Ready,Cordoned.
func nodeState(n *api.Node) string {
	state := string(n.Status.State)
	if n.Status.Draining {
		state += ",Draining"
		if n.Status.DrainReason != "" {
			state += "(" + truncate(n.Status.DrainReason, 30) + ")"
		}
	} else if n.Status.Cordoned {
		state += ",Cordoned"
	}
	if n.Status.Fault != "" {
		state += ",Faulty"
	}
	return state
}

// inService counts the node's GPUs new ranks may use.
func inService(n *api.Node) int {
	k := 0
	for i := range n.GPUs {
		if n.GPUs[i].InService() {
			k++
		}
	}
	return k
}

// fmtLabels writes labels as kubectl does: k=v,k2=v2 in key order.
func fmtLabels(m map[string]string) string {
	if len(m) == 0 {
		return "-"
	}
	parts := make([]string, 0, len(m))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, k+"="+m[k])
	}
	return strings.Join(parts, ",")
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-1] + "…"
}

func runDescribe(ctx context.Context, e *Env, args []string) int {
	fs := cmdkit.NewFlags(e.Stderr, "describe", "job ID | node NAME (or job/ID, node/NAME)")
	srv := serverFlag(fs, e)
	out := cmdkit.OutputFlag(fs)
	pos, code, ok := cmdkit.ParseArgs(fs, splitKindNames(args))
	if !ok {
		return code
	}
	if len(pos) != 2 {
		fs.Usage()
		return 2
	}
	c, err := srv.client()
	if err != nil {
		return fail(e, err)
	}
	switch pos[0] {
	case "job", "jobs":
		d, err := c.Job(ctx, pos[1])
		if err != nil {
			return fail(e, err)
		}
		if *out != "table" {
			return exitOn(e, printAs(e, *out, d))
		}
		describeJob(e.Stdout, d, time.Now())
		describeEvents(ctx, e.Stdout, c, client.EventQuery{Job: d.Job.ID})
	case "node", "nodes":
		n, err := c.Node(ctx, pos[1])
		if err != nil {
			return fail(e, err)
		}
		if *out != "table" {
			return exitOn(e, printAs(e, *out, n))
		}
		describeNode(e.Stdout, n)
		describeEvents(ctx, e.Stdout, c, client.EventQuery{Node: n.Name, Kind: api.KindNode})
	case "deployment", "deployments", "deploy":
		d, err := c.Deployment(ctx, pos[1])
		if err != nil {
			return fail(e, err)
		}
		if *out != "table" {
			return exitOn(e, printAs(e, *out, d))
		}
		describeDeployment(e.Stdout, d)
		describeEvents(ctx, e.Stdout, c, client.EventQuery{Deployment: d.Spec.Name})
	default:
		fmt.Fprintf(e.Stderr, "gangway describe: unknown kind %q (want job, node or deployment)\n", pos[0])
		return 2
	}
	return 0
}

func describeJob(w io.Writer, d *api.JobDetail, now time.Time) {
	j := &d.Job
	fmt.Fprintf(w, "Job %s", j.ID)
	if j.Spec.Name != "" {
		fmt.Fprintf(w, " (%s)", j.Spec.Name)
	}
	fmt.Fprintf(w, "\n  Phase:     %s\n", j.Status.Phase)
	if d.Archived {
		fmt.Fprintln(w, "  Archived:  retention deleted it from the store; read from the server's --job-archive")
	}
	if t := j.Array; t != nil {
		fmt.Fprintf(w, "  Array:     task %d of array %s (%d tasks", t.Index, t.ID, t.Count)
		if t.Limit > 0 {
			fmt.Fprintf(w, ", at most %d at once", t.Limit)
		}
		fmt.Fprintln(w, ")")
	}
	if j.Status.Reason != "" {
		label := "Reason:"
		if j.Status.Phase == api.JobPending || j.Status.Phase == api.JobRestarting {
			label = "Waiting:"
		}
		fmt.Fprintf(w, "  %-10s %s\n", label, j.Status.Reason)
	}
	fmt.Fprintf(w, "  Queue:     %s (priority %d)\n", j.Spec.Queue, j.Spec.Priority)
	if len(j.Spec.Labels) > 0 {
		fmt.Fprintf(w, "  Labels:    %s\n", fmtLabels(j.Spec.Labels))
	}
	shape := fmt.Sprintf("%d ranks × %d GPU", j.Spec.Ranks, j.Spec.GPUsPerRank)
	if j.Spec.RanksPerNode > 0 {
		shape += fmt.Sprintf(", %d per node", j.Spec.RanksPerNode)
	}
	fmt.Fprintf(w, "  Gang:      %s\n", shape)
	fmt.Fprintf(w, "  Command:   %s\n", strings.Join(j.Spec.Command, " "))
	if lim := j.Spec.RestartLimit(); lim >= 1<<20 {
		fmt.Fprintf(w, "  Restarts:  %d (no limit)\n", j.Status.Restarts)
	} else {
		fmt.Fprintf(w, "  Restarts:  %d of %d\n", j.Status.Restarts, lim)
	}
	var limits []string
	if j.Spec.TimeLimit > 0 {
		limits = append(limits, fmt.Sprintf("time limit %s", j.Spec.TimeLimit.D()))
	}
	if j.Spec.HangTimeout > 0 {
		limits = append(limits, fmt.Sprintf("hang timeout %s (restarted after that long without progress)", j.Spec.HangTimeout.D()))
	}
	if len(limits) > 0 {
		fmt.Fprintf(w, "  Limits:    %s\n", strings.Join(limits, "; "))
	}
	fmt.Fprintf(w, "  Submitted: %s (%s ago)\n", j.SubmittedAt.Local().Format(time.DateTime), age(j.SubmittedAt))
	if s := elapsed(j, now); s != "" {
		fmt.Fprintf(w, "  Elapsed:   %s\n", s)
	}
	if p := d.Progress; p != nil {
		l := p.Latest
		fmt.Fprintf(w, "  Progress:  step %d", l.Step)
		if l.Loss != nil {
			fmt.Fprintf(w, ", loss %.6g", *l.Loss)
		}
		if l.Tokens > 0 {
			fmt.Fprintf(w, ", %d tokens", l.Tokens)
		}
		fmt.Fprintf(w, " (attempt %d, %s ago)\n", l.Attempt, age(l.Time))
	}
	if par := j.Spec.Parallelism; par != nil {
		fmt.Fprintf(w, "  Grid:      tp=%d pp=%d dp=%d", max(par.TP, 1), max(par.PP, 1), par.DP)
		if par.Auto {
			fmt.Fprint(w, " (chosen by the planner)")
		}
		fmt.Fprintln(w)
	}
	measured := measuredTokensPerGPU(d)
	if pred := predicted(j); pred != nil || measured > 0 {
		fmt.Fprint(w, "  Tokens/s:  ")
		if measured > 0 {
			fmt.Fprintf(w, "%.0f per GPU measured", measured)
		} else {
			fmt.Fprint(w, "not measured yet")
		}
		if pred != nil {
			fmt.Fprintf(w, ", %.0f predicted (%s)", pred.TokensPerSecPerGPU, pred.Summary)
		}
		fmt.Fprintln(w)
	}
	for _, st := range d.Stragglers {
		fmt.Fprintf(w, "  Straggler: attempt %d rank %d on %s worked %.3gs per step against the gang's median %.3gs (step %.3gs), from %s\n",
			st.Attempt, st.Rank, st.Node, st.ComputeS, st.MedianS, st.StepS, st.Since.Local().Format(time.TimeOnly))
	}
	if n := len(d.Checkpoints); n > 0 {
		c := d.Checkpoints[n-1]
		fmt.Fprintf(w, "  Checkpoint: step %d at %s (%d committed)\n", c.Step, c.Path, n)
	}
	for i := len(j.Status.Attempts) - 1; i >= 0; i-- {
		a := &j.Status.Attempts[i]
		fmt.Fprintf(w, "\nAttempt %d: %s", a.Number, a.Phase)
		if a.Outcome != "" {
			if c := api.CauseOf(a); c != "" && string(c) != string(a.Outcome) {
				fmt.Fprintf(w, " (%s: %s)", a.Outcome, c)
			} else {
				fmt.Fprintf(w, " (%s)", a.Outcome)
			}
		}
		fmt.Fprintln(w)
		if a.Reason != "" {
			fmt.Fprintf(w, "  Reason:  %s\n", a.Reason)
		}
		if a.ResumeFrom != nil {
			fmt.Fprintf(w, "  Resumed: from step %d (%s)\n", a.ResumeFrom.Step, a.ResumeFrom.Path)
		}
		fmt.Fprintf(w, "  Master:  %s:%d\n", a.MasterAddr, a.MasterPort)
		fmt.Fprintf(w, "  Created: %s", a.CreatedAt.Local().Format(time.TimeOnly))
		if !a.RunningAt.IsZero() {
			fmt.Fprintf(w, ", all running after %.2fs", a.RunningAt.Sub(a.CreatedAt).Seconds())
		}
		if !a.EndedAt.IsZero() {
			fmt.Fprintf(w, ", ended %s", a.EndedAt.Local().Format(time.TimeOnly))
		}
		fmt.Fprintln(w)
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "  RANK\tNODE\tNODE RANK\tLOCAL\tGPUS\tSTATE\tEXIT\tPID")
		var pulls []string
		for _, rp := range a.Placement {
			state, exit, pid := "-", "-", "-"
			for _, rs := range d.Ranks {
				if rs.Attempt == a.Number && rs.Rank == rp.Rank {
					state = string(rs.State)
					if rs.Pulling != "" {
						state = "PullingImage"
						pulls = append(pulls, fmt.Sprintf("  Pulling: rank %d: %s", rp.Rank, rs.Pulling))
					}
					if rs.State.Terminal() {
						exit = strconv.Itoa(rs.ExitCode)
						if rs.Signal != "" {
							exit += " (" + rs.Signal + ")"
						}
					}
					if rs.PID > 0 {
						pid = strconv.Itoa(rs.PID)
					}
				}
			}
			gpus := make([]string, len(rp.GPUs))
			for k, g := range rp.GPUs {
				gpus[k] = strconv.Itoa(g)
			}
			fmt.Fprintf(tw, "  %d\t%s\t%d\t%d\t%s\t%s\t%s\t%s\n", rp.Rank, rp.Node, rp.NodeRank, rp.LocalRank, strings.Join(gpus, ","), state, exit, pid)
		}
		tw.Flush()
		for _, p := range pulls {
			fmt.Fprintln(w, p)
		}
	}
}

// elapsed says how long a job has run, from its first placement to its
// end (or now), and how long its running attempt has run, against its
// time limit if it has one; "" for a job never placed.
func elapsed(j *api.Job, now time.Time) string {
	if j.Status.StartedAt.IsZero() {
		return ""
	}
	s := fmt.Sprintf("%s since it was first placed", shortDur(now.Sub(j.Status.StartedAt)))
	if end := j.Status.FinishedAt; !end.IsZero() {
		s = fmt.Sprintf("%s from its first placement to its end", shortDur(end.Sub(j.Status.StartedAt)))
	}
	if a := j.Status.Current(); a != nil && a.Phase != api.AttemptEnded && !j.Status.Phase.Final() {
		ran := now.Sub(a.CreatedAt)
		s += fmt.Sprintf("; attempt %d has run %s", a.Number, shortDur(ran))
		if lim := j.Spec.TimeLimit.D(); lim > 0 {
			s += fmt.Sprintf(" of its time limit %s (%s left)", lim, shortDur(max(lim-ran, 0)))
		}
	}
	return s
}

// shortDur is d in whole seconds (tenths under a minute).
func shortDur(d time.Duration) time.Duration {
	if d < time.Minute {
		return d.Round(100 * time.Millisecond)
	}
	return d.Round(time.Second)
}

func describeNode(w io.Writer, n *api.Node) {
	fmt.Fprintf(w, "Node %s\n  State:    %s", n.Name, n.Status.State)
	if n.Status.Cordoned {
		fmt.Fprint(w, ", cordoned")
	}
	if n.Status.Draining {
		fmt.Fprint(w, ", draining")
	}
	if n.Status.Fault != "" {
		fmt.Fprint(w, ", out of service")
	}
	if n.Status.Lemon {
		fmt.Fprint(w, ", lemon")
	}
	fmt.Fprintln(w)
	if n.Status.Draining {
		how := "moving its gangs elsewhere"
		switch {
		case n.Status.DrainGraceful && !n.Status.DrainDeadline.IsZero():
			how = "letting its gangs finish until " + n.Status.DrainDeadline.Local().Format(time.DateTime) + ", then moving them"
		case n.Status.DrainGraceful:
			how = "letting its gangs finish"
		}
		fmt.Fprintf(w, "  Drain:    %s", how)
		if n.Status.DrainReason != "" {
			fmt.Fprintf(w, " (%s)", n.Status.DrainReason)
		}
		fmt.Fprintln(w)
	}
	if n.Status.Reason != "" {
		fmt.Fprintf(w, "  Reason:   %s\n", n.Status.Reason)
	}
	if n.Status.Fault != "" {
		fmt.Fprintf(w, "  Fault:    %s (%s ago)\n", n.Status.Fault, age(n.Status.FaultAt))
	}
	if k := len(n.Status.Faults); k > 0 {
		fmt.Fprintf(w, "  Faults:   %d recorded, last %s ago", k, age(n.Status.Faults[k-1]))
		if n.Status.Lemon {
			fmt.Fprint(w, "; a lemon: kept out of multi-node gangs until uncordoned")
		}
		fmt.Fprintln(w)
	}
	if !n.Status.HealthyAt.IsZero() {
		fmt.Fprintf(w, "  Healthy:  every check passing for %s\n", age(n.Status.HealthyAt))
	}
	fmt.Fprintf(w, "  Address:  %s\n  Agent:    %s\n  Seen:     %s ago\n", n.Address, n.AgentURL, age(n.Status.LastHeartbeat))
	fmt.Fprintf(w, "  CPUs:     %d, memory %.1f GiB\n  Cgroups:  %s\n", n.CPUs, float64(n.MemoryBytes)/(1<<30), dash(n.Cgroups))
	fmt.Fprintf(w, "  Labels:   %s\n", fmtLabels(n.Labels))
	fmt.Fprintf(w, "  GPUs:     %d (source %s)", len(n.GPUs), dash(n.GPUSource))
	if n.GPUReason != "" {
		fmt.Fprintf(w, " — %s", n.GPUReason)
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, g := range n.GPUs {
		health := dash(g.Health)
		if g.Fault != "" {
			health += ": " + g.Fault
		}
		fmt.Fprintf(tw, "    %d\t%s\t%s\t%d MiB\t%s\n", g.Index, g.UUID, g.Model, g.MemoryBytes>>20, health)
	}
	tw.Flush()
	if len(n.Status.Health) > 0 {
		fmt.Fprintln(w, "  Checks:")
		tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "    CHECK\tON\tSTATUS\tACTION\tSINCE\tMESSAGE")
		for _, h := range n.Status.Health {
			on := "node"
			if h.GPU >= 0 {
				on = fmt.Sprintf("GPU %d", h.GPU)
			}
			since := "-"
			if !h.Since.IsZero() {
				since = age(h.Since)
			}
			fmt.Fprintf(tw, "    %s\t%s\t%s\t%s\t%s\t%s\n", h.Check, on, h.Status, dash(string(h.Action)), since, dash(h.Message))
		}
		tw.Flush()
	}
}

func nodeActionCmd(action string) func(ctx context.Context, e *Env, args []string) int {
	return func(ctx context.Context, e *Env, args []string) int {
		fs := cmdkit.NewFlags(e.Stderr, action, "NODE")
		srv := serverFlag(fs, e)
		pos, code, ok := cmdkit.ParseArgs(fs, args)
		if !ok {
			return code
		}
		if len(pos) != 1 {
			fs.Usage()
			return 2
		}
		c, err := srv.client()
		if err != nil {
			return fail(e, err)
		}
		if _, err := c.NodeAction(ctx, pos[0], action); err != nil {
			return fail(e, err)
		}
		fmt.Fprintf(e.Stdout, "node %s: %sed\n", pos[0], strings.TrimSuffix(action, "e"))
		return 0
	}
}

func predicted(j *api.Job) *api.Prediction {
	if j.Spec.Parallelism == nil {
		return nil
	}
	return j.Spec.Parallelism.Predicted
}

// measuredTokensPerGPU is the token rate over the newest attempt's recent
// progress lines, per GPU; 0 when the lines carry no tokens.
func measuredTokensPerGPU(d *api.JobDetail) float64 {
	if d.Progress == nil || d.Job.Spec.GPUs() == 0 {
		return 0
	}
	var first, last *api.Progress
	for i := range d.Progress.Recent {
		p := &d.Progress.Recent[i]
		if p.Tokens <= 0 || p.Time.IsZero() {
			continue
		}
		if first == nil || p.Attempt != first.Attempt {
			first = p
		}
		last = p
	}
	if first == nil || last == first {
		return 0
	}
	dt := last.Time.Sub(first.Time).Seconds()
	if dt <= 0 {
		return 0
	}
	return float64(last.Tokens-first.Tokens) / dt / float64(d.Job.Spec.GPUs())
}
