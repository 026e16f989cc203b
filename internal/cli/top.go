package cli

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/gangway/gangway/internal/api"
	"github.com/gangway/gangway/internal/base/cmdkit"
)

// runTop prints what the GPUs do now, from the readings the agents'
// heartbeats bring the server (one every --gpu-metrics-interval): per
// node, or per running job.
func runTop(ctx context.Context, e *Env, args []string) int {
	fs := cmdkit.NewFlags(e.Stderr, "top", "nodes|jobs [flags]")
	srv := serverFlag(fs, e)
	out := cmdkit.OutputFlag(fs)
	user := fs.String("user", "", "jobs: only this user's")
	me := fs.Bool("me", false, "jobs: only mine")
	pos, code, ok := cmdkit.ParseArgs(fs, args)
	if !ok {
		return code
	}
	if len(pos) != 1 {
		fs.Usage()
		return 2
	}
	nodes := pos[0] == "nodes" || pos[0] == "node"
	if !nodes && pos[0] != "jobs" && pos[0] != "job" {
		fmt.Fprintf(e.Stderr, "gangway top: unknown kind %q (want nodes or jobs)\n", pos[0])
		return 2
	}
	if nodes && (*user != "" || *me) || *me && *user != "" {
		fmt.Fprintln(e.Stderr, "gangway top: --user and --me apply to jobs (gangway top jobs), one or the other")
		return 2
	}
	c, err := srv.client()
	if err != nil {
		return fail(e, err)
	}
	if nodes {
		l, err := c.Nodes(ctx)
		if err != nil {
			return fail(e, err)
		}
		rows := make([]nodeTop, len(l.Nodes))
		for i, n := range l.Nodes {
			rows[i] = topOfNode(n)
		}
		return exitOn(e, cmdkit.Print(e.Stdout, *out, rows, func(w io.Writer) error { return printTopNodes(w, rows, time.Now()) }))
	}
	if *me {
		w, err := c.WhoAmI(ctx)
		if err != nil {
			return fail(e, err)
		}
		*user = w.Name
	}
	l, err := c.TopJobs(ctx, *user)
	if err != nil {
		return fail(e, err)
	}
	return exitOn(e, cmdkit.Print(e.Stdout, *out, l.Jobs, func(w io.Writer) error { return printTopJobs(w, l.Jobs) }))
}

// nodeTop is one node as `gangway top nodes` shows it (and -o json
// writes it). The figures are over its GPUs that have a reading
// (Sampled): their mean utilisation, the memory they use of theirs in
// all, the hottest one's temperature and the power they draw together;
// -1 when none gives it.
type nodeTop struct {
	Name        string    `json:"name"`
	State       string    `json:"state"`
	GPUs        int       `json:"gpus"`
	UsedGPUs    int       `json:"usedGPUs"`
	Sampled     int       `json:"sampled"`
	UtilPercent float64   `json:"utilPercent"`
	MemUsedMiB  float64   `json:"memUsedMiB"`
	MemTotalMiB float64   `json:"memTotalMiB"`
	MaxTempC    float64   `json:"maxTempC"`
	PowerW      float64   `json:"powerW"`
	ReadAt      time.Time `json:"readAt,omitzero"`
}

// topOfNode sums up n's newest readings.
func topOfNode(n *api.Node) nodeTop {
	t := nodeTop{Name: n.Name, State: nodeState(n), GPUs: len(n.GPUs), UsedGPUs: n.Status.UsedGPUs}
	sum := api.NewGPUSummary()
	tel := n.Status.Telemetry
	for i := range n.GPUs {
		g := &n.GPUs[i]
		if smp := tel.Sample(g.Index); smp != nil {
			sum.Add(smp)
			if smp.MemUsedMiB >= 0 {
				t.MemTotalMiB += float64(g.MemoryBytes) / (1 << 20)
			}
		}
	}
	if tel != nil {
		t.ReadAt = tel.At
	}
	t.Sampled, t.UtilPercent, t.MemUsedMiB, t.MaxTempC, t.PowerW = sum.Sampled, sum.UtilPercent, sum.MemUsedMiB, sum.MaxTempC, sum.PowerW
	return t
}

// printTopNodes writes nodes as a table: GPUs used of all, then the
// readings, and how long ago they were read.
func printTopNodes(w io.Writer, nodes []nodeTop, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tSTATE\tUSED\tUTIL\tMEMORY\tTEMP\tPOWER\tREAD")
	for _, n := range nodes {
		mem := "-"
		if n.MemUsedMiB >= 0 {
			mem = fmt.Sprintf("%.0f/%.0f GiB", n.MemUsedMiB/1024, n.MemTotalMiB/1024)
		}
		read := "-"
		if !n.ReadAt.IsZero() {
			read = age(n.ReadAt) + " ago"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d/%d\t%s\t%s\t%s\t%s\t%s\n", n.Name, n.State, n.UsedGPUs, n.GPUs,
			figure(n.UtilPercent, "%.0f%%"), mem, figure(n.MaxTempC, "%.0f°C"), figure(n.PowerW, "%.0f W"), read)
	}
	return tw.Flush()
}

// printTopJobs writes running jobs as a table: their GPUs' readings and
// their progress.
func printTopJobs(w io.Writer, jobs []api.JobTop) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tNAME\tUSER\tQUEUE\tGPUS\tNODES\tUTIL\tMEMORY\tSTEP\tLOSS\tTOKENS/S")
	for _, j := range jobs {
		mem, step, loss := "-", "-", "-"
		if j.Sampled > 0 {
			mem = fmt.Sprintf("%.0f GiB", j.MemUsedMiB/1024)
		}
		if !j.ProgressAt.IsZero() {
			step = strconv.FormatInt(j.Step, 10)
		}
		if j.Loss != nil {
			loss = fmt.Sprintf("%.4g", *j.Loss)
		}
		tps := "-"
		if j.TokensPerSec > 0 {
			tps = fmt.Sprintf("%.0f", j.TokensPerSec)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", j.ID, dash(j.Name), dash(j.User), j.Queue,
			strconv.FormatFloat(j.GPUs, 'f', -1, 64), truncate(strings.Join(j.Nodes, ","), 40), figure(j.UtilPercent, "%.0f%%"), mem, step, loss, tps)
	}
	return tw.Flush()
}

// figure writes v in format, "-" for one not read (negative).
func figure(v float64, format string) string {
	if v < 0 {
		return "-"
	}
	return fmt.Sprintf(format, v)
}
