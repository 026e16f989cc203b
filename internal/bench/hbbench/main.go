package hbbench

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"text/tabwriter"
	"time"

	"github.com/gangway/gangway/internal/api/client"
	"github.com/gangway/gangway/internal/base/cmdkit"
)

// Targets from BENCHMARKS.md §1.
const (
	targetCores    = 1.0
	targetRSSBytes = 2 << 30
)

// Main is `gangway bench heartbeats`.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("bench heartbeats", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, "Usage: gangway bench heartbeats [-o json] [--agents 5000] [--interval 2s] [--window 30s]\n\n"+
			"Starts a server in this process and AGENTS emulated agents in a child process (each registers\n"+
			"a node with fake GPUs, heartbeats every INTERVAL and long-polls its assignments over its own\n"+
			"connections), and prints the server's CPU (cores) and peak memory over WINDOW, the\n"+
			"heartbeats' latency, and how many nodes were marked lost (there should be none).\n"+
			"Target: 5,000 agents every 2 s on at most 1 core and 2 GiB.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	var cfg Config
	out := cmdkit.OutputFlag(fs)
	fs.IntVar(&cfg.Agents, "agents", 5000, "emulated agents (nodes)")
	fs.IntVar(&cfg.GPUsPerNode, "gpus-per-node", 8, "fake GPUs each node registers")
	fs.DurationVar(&cfg.Interval, "interval", 2*time.Second, "heartbeat interval (nodes are lost after 4.5 missed, while a witness is heard)")
	fs.DurationVar(&cfg.Window, "window", 30*time.Second, "how long to measure once every agent registered")
	fs.StringVar(&cfg.Dir, "dir", "", "working directory (default: a temporary one)")
	timeout := fs.Duration("timeout", 10*time.Minute, "bound on the whole run")
	loadURL := fs.String("load", "", "internal: be the agents' process, against this server")
	if code, ok := cmdkit.ParseNoArgs(fs, args); !ok {
		return code
	}
	if *loadURL != "" {
		// The admin's token and the CA come in the environment, kept out
		// of the process list.
		join := client.Config{Server: *loadURL, Token: os.Getenv("GANGWAY_TOKEN"), CAFile: os.Getenv("GANGWAY_CA_FILE")}
		if err := RunLoad(ctx, join, cfg.Agents, cfg.GPUsPerNode, os.Stdin, stdout); err != nil {
			fmt.Fprintf(stderr, "gangway bench heartbeats --load: %v\n", err)
			return 1
		}
		return 0
	}
	if err := cfg.Validate(); err != nil {
		fmt.Fprintf(stderr, "gangway bench heartbeats: %v\n", err)
		return 2
	}
	cfg.Progress = stderr
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	res, err := Run(ctx, cfg)
	if err != nil {
		fmt.Fprintf(stderr, "gangway bench heartbeats: %v\n", err)
		return 1
	}
	if err := cmdkit.Print(stdout, *out, res, func(w io.Writer) error { WriteTable(w, res); return nil }); err != nil {
		fmt.Fprintf(stderr, "gangway bench heartbeats: %v\n", err)
		return 1
	}
	return 0
}

// WriteTable prints a result for a person.
func WriteTable(w io.Writer, r *Result) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "agents\t%d (%d fake GPUs each), heartbeat every %gs, window %.1fs\n", r.Agents, r.GPUsPerNode, r.IntervalS, r.WindowS)
	fmt.Fprintf(tw, "registered in\t%.1f s\n", r.RegisterS)
	fmt.Fprintf(tw, "server CPU\t%.3f cores\t(target ≤ %.0f)\n", r.ServerCores, targetCores)
	fmt.Fprintf(tw, "server peak RSS\t%.0f MiB\t(target ≤ %d MiB); Go heap peak %.0f MiB\n",
		float64(r.ServerPeakRSSBytes)/(1<<20), targetRSSBytes>>20, float64(r.ServerPeakHeap)/(1<<20))
	fmt.Fprintf(tw, "heartbeats\t%d (%.0f/s), %d failed\n", r.Heartbeats, r.HeartbeatsPerS, r.HeartbeatErrors)
	fmt.Fprintf(tw, "heartbeat latency\tp50 %.2f ms, p99 %.2f ms, max %.2f ms\n", r.HeartbeatP50Ms, r.HeartbeatP99Ms, r.HeartbeatMaxMs)
	fmt.Fprintf(tw, "nodes after the window\t%d ready, %d lost\n", r.NodesReady, r.NodesLost)
	if r.InProcess {
		fmt.Fprintln(tw, "note\tagents ran in the server's process: its CPU includes theirs")
	}
	tw.Flush()
}
