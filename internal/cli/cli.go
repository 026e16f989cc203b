// Package cli implements gangway's commands: the server, the agent, the
// user commands (submit, get, top, describe, logs, events, cancel, cordon,
// drain, report) and the demo. Main is the whole program, callable from tests. The user commands
// reach the server through internal/api/client.
//
// It imports any gangway package (it is the top of the tree); nothing
// imports it but cmd/gangway.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"sync"

	"github.com/gangway/gangway/internal/api/client"
	"github.com/gangway/gangway/internal/base/cpuprof"
	"github.com/gangway/gangway/internal/base/version"
	"github.com/gangway/gangway/internal/cli/infcli"
	"github.com/gangway/gangway/internal/cli/plancli"
	"github.com/gangway/gangway/internal/cli/simcli"
)

// Env is the process environment the commands see.
type Env struct {
	Stdout, Stderr io.Writer
	Getenv         func(string) string
	// Getwd is the working directory; nil: os.Getwd.
	Getwd func() (string, error)
}

type command struct {
	name, args, summary string
	hidden              bool
	run                 func(ctx context.Context, e *Env, args []string) int
}

func commands() []command {
	return []command{
		{name: "demo", args: "[--scenario S] [-o json]", summary: "run a 4-node cluster locally, kill a node (or --scenario server-restart: the server; leader-failover: the leading replica of three; gpu-fault: an Xid 79 on a GPU; straggler: a slowed node) mid-training and watch the job recover", run: runDemo},
		{name: "server", args: "--data-dir DIR [--listen :7070]", summary: "run the control plane (embedded etcd, API, scheduler)", run: runServer},
		{name: "agent", args: "--server URL [--fake-gpus 8]", summary: "run the node agent on a GPU machine", run: runAgent},
		{name: "submit", args: "JOB.yaml | SCRIPT.sbatch | --ranks N -- CMD...", summary: "submit a job: a spec, a Slurm batch script (#SBATCH headers, sbatch's options), or a command", run: runSubmit},
		{name: "get", args: "jobs|nodes|queues|deployments", summary: "list jobs (--watch: follow them; --all --since 7d: finished ones too, as sacct), nodes (GPUs used and free), queues or deployments; -l selects by labels; -o wide, json, yaml, csv or jsonpath=TEMPLATE", run: runGet},
		{name: "top", args: "nodes|jobs", summary: "GPU use now: per node (GPUs used, utilisation, memory, temperature, power) or per running job (its GPUs' utilisation, step, loss, tokens/s)", run: runTop},
		{name: "describe", args: "job ID | node N | deployment N (or job/ID ...)", summary: "show attempts, placement, checkpoints, progress, why a job waits, and recent events", run: runDescribe},
		{name: "logs", args: "ID [--rank N | --all-ranks] [--tail N] [--since D] [--timestamps] [--previous] [-f]", summary: "print or follow a rank's stdout and stderr (stderr lines marked [stderr]), or every rank's ([rank N] before each line); -f follows the job through its attempts", run: runLogs},
		{name: "events", args: "[-f] [--job ID] [--node N]", summary: "show what happened: jobs scheduled, started, checkpointed, preempted, restarted; nodes lost, GPU faults; deployments scaled (-f follows)", run: runEvents},
		{name: "cancel", args: "ID... | --user U | --name N | -l SELECTOR", summary: "stop jobs for good: by ID, or as scancel by --user, --name, --queue and --state, or by labels (-l); --signal SIG only signals their ranks", run: runCancel},
		{name: "hold", args: "ID...", summary: "keep waiting jobs from being placed until released (as scontrol hold; sbatch --hold submits held)", run: runHold},
		{name: "release", args: "ID...", summary: "let held jobs be placed again", run: runRelease},
		{name: "requeue", args: "ID...", summary: "stop running jobs (checkpoint signal first, as a preemption) and put them back to wait under their IDs (as scontrol requeue)", run: runRequeue},
		{name: "deploy", args: "DEPLOYMENT.yaml", summary: "create or update an inference deployment", run: runDeploy},
		{name: "scale", args: "DEPLOYMENT N", summary: "set a deployment's replica count", run: runScale},
		{name: "delete", args: "deployment NAME | job ID...", summary: "stop a deployment's replicas and remove it; delete job (or job/ID) is cancel, as kubectl users type it", run: runDelete},
		{name: "queue", args: "set|delete NAME [flags]", summary: "create or change a queue (guarantee, borrow limit, weight, cohort, policy: gangway by default, or backfill, fifo, ...)", run: runQueue},
		{name: "priority", args: "JOB PRIORITY", summary: "change a job's priority", run: runPriority},
		{name: "cordon", args: "NODE", summary: "stop placing new ranks on a node", run: nodeActionCmd("cordon")},
		{name: "uncordon", args: "NODE", summary: "allow placing on a node again", run: nodeActionCmd("uncordon")},
		{name: "drain", args: "NODE [--reason R] [--timeout D | --now]", summary: "stop placing on a node and let its gangs finish (as Slurm's drain; --timeout then moves them, --now at once); waits until it is empty", run: runDrain},
		{name: "node", args: "revoke NODE", summary: "cut a node off: its certificate is refused until it joins again", run: runNode},
		{name: "token", args: "create|list|revoke", summary: "make, list or revoke users' and agents' (join) tokens", run: runToken},
		{name: "ca", args: "create DIR", summary: "make a cluster CA for several server replicas to share (--tls-ca, --tls-ca-key)", run: runCA},
		{name: "config", args: "set-context|use-context|get-contexts|current-context", summary: "client contexts as kubectl's: a server and its credentials (--token-file, --ca) each, the current one used by every command (~/.config/gangway/config.yaml)", run: runConfig},
		{name: "whoami", summary: "say who the server takes you for, and the account your jobs run as", run: runWhoami},
		{name: "report", args: "usage [--by B] [--since 7d]", summary: "GPU-hours by queue, user or job: useful, and lost by cause (node lost, GPU fault, hang, preemption, user error, …), restarts and pending time", run: runReport},
		{name: "audit", args: "[--who U] [--since D]", summary: "show the newest mutating requests: who, what, from where, result", run: runAudit},
		{name: "plan", args: "--model M --gpus N --gpu G", summary: "choose TP/PP/DP and predict memory, step time and MFU", run: wrap(plancli.Main)},
		{name: "simulate", args: "--trace FILE [--policy P ...]", summary: "replay a cluster trace through the real scheduler in virtual time (and the studies: parity, openb, goodput, overload)", run: wrap(simcli.Main)},
		{name: "engine-sim", args: "[--model M --gpu G --tp N]", summary: "serve a simulated vLLM engine (OpenAI API, vLLM metrics)", run: wrap(infcli.EngineSim)},
		{name: "gateway", args: "--endpoints URL,... [--policy P]", summary: "run the OpenAI gateway in front of engine replicas", run: wrap(infcli.Gateway)},
		{name: "bench", args: "KIND [-o json]", summary: "measure: scheduler, e2e (a live cluster), heartbeats (the server under 5,000 agents), inference (gateway, routing), durability (a server killed mid-submission)", run: runBench},
		{name: "chaos", args: "[--faults N --seed S] [-o json]", summary: "inject agent, network, GPU and control-plane faults into a live cluster (three replicas) and check no job is lost, duplicated or run twice", run: runChaos},
		{name: "completion", args: "bash|zsh|fish", summary: "print shell completion: source <(gangway completion bash)", run: runCompletion},
		{name: "__complete", hidden: true, run: runComplete},
		{name: "version", summary: "print the version (also --version)", run: func(ctx context.Context, e *Env, args []string) int {
			fmt.Fprintln(e.Stdout, "gangway", version.Version)
			return 0
		}},
		{name: "supervise", hidden: true, run: runSupervise},
		{name: "cg-exec", hidden: true, run: runCgExec},
		{name: "container-rank", hidden: true, run: runContainerRank},
		{name: "container-reap", hidden: true, run: runContainerReap},
		{name: "train-example", hidden: true, run: runTrainExample},
		{name: "chaos-rank", hidden: true, run: runChaosRank},
		{name: "preflight-rank", hidden: true, run: runPreflightRank},
	}
}

// wrap adapts a subsystem's Main(ctx, args, stdout, stderr) to a command.
func wrap(main func(context.Context, []string, io.Writer, io.Writer) int) func(context.Context, *Env, []string) int {
	return func(ctx context.Context, e *Env, args []string) int { return main(ctx, args, e.Stdout, e.Stderr) }
}

// Main runs the gangway command line and returns the exit status.
func Main(ctx context.Context, args []string, e *Env) int {
	if e.Getenv == nil {
		e.Getenv = os.Getenv
	}
	if e.Getwd == nil {
		e.Getwd = os.Getwd
	}
	if len(args) == 1 && (args[0] == "--version" || args[0] == "-version") {
		args[0] = "version"
	}
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(e.Stdout)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	for _, c := range commands() {
		if c.name == args[0] {
			defer cpuprof.Start(e.Getenv("GANGWAY_CPUPROFILE"), c.name, e.Stderr)()
			return c.run(ctx, e, args[1:])
		}
	}
	fmt.Fprintf(e.Stderr, "gangway: unknown command %q\n\n", args[0])
	usage(e.Stderr)
	return 2
}

func usage(w io.Writer) {
	fmt.Fprint(w, `gangway: a GPU cluster orchestrator for distributed training and inference.

Usage: gangway COMMAND [flags]

Commands:
`)
	for _, c := range commands() {
		if c.hidden {
			continue
		}
		fmt.Fprintf(w, "  %-9s %-32s %s\n", c.name, c.args, c.summary)
	}
	fmt.Fprint(w, `
User commands take --server URL, --token and --ca-file (default: $GANGWAY_SERVER,
$GANGWAY_TOKEN, $GANGWAY_CA_FILE, else the current context of the client config
~/.config/gangway/config.yaml, which "gangway server" writes on its first start
and "gangway config set-context" edits) and -o table|json|yaml
(get jobs and report usage also -o csv).
Run "gangway COMMAND -h" for a command's flags.
`)
}

// conn is how a command reaches the server: its --server, --token,
// --context and --ca-file, each over its environment variable
// ($GANGWAY_SERVER, $GANGWAY_TOKEN, $GANGWAY_CONTEXT, $GANGWAY_CA_FILE),
// each over the client config's context ($GANGWAY_CONFIG, else
// ~/.config/gangway/config.yaml), which `gangway server` writes on its
// first start and `gangway config` edits.
type conn struct {
	e                              *Env
	server, token, context, caFile *string
}

func serverFlag(fs *flag.FlagSet, e *Env) *conn {
	return &conn{e: e,
		server:  fs.String("server", "", "gangway server URL, or several replicas' separated by commas (default $GANGWAY_SERVER, the client config's context, or "+client.DefaultServer+")"),
		token:   fs.String("token", "", "bearer token (default $GANGWAY_TOKEN or the client config's)"),
		context: fs.String("context", "", "client config context to use (default $GANGWAY_CONTEXT or the config's current one)"),
		caFile:  fs.String("ca-file", "", "PEM file of the cluster CA to trust (default $GANGWAY_CA_FILE or the client config's)"),
	}
}

// config resolves the command's client configuration.
func (c *conn) config() (client.Config, error) {
	or := func(flag *string, env string) string {
		if *flag != "" {
			return *flag
		}
		return c.e.Getenv(env)
	}
	cfg, err := client.ConfigFor(client.DefaultConfigPath(c.e.Getenv), client.Resolve{
		Context: or(c.context, "GANGWAY_CONTEXT"), Server: or(c.server, "GANGWAY_SERVER"),
		Token: or(c.token, "GANGWAY_TOKEN"), CAFile: or(c.caFile, "GANGWAY_CA_FILE"),
	})
	if err != nil {
		return cfg, err
	}
	cfg.Server = strings.TrimRight(cfg.Server, "/")
	return cfg, nil
}

// client is the API client of a user command. It shares the process's
// connections when it can, so that a command leaves no pool of its own
// behind when it returns (Main runs many in one test).
func (c *conn) client() (*client.Client, error) {
	cfg, err := c.config()
	if err != nil {
		return nil, err
	}
	return newClient(cfg)
}

// newClient makes a client for cfg, on a transport shared by every
// client with the same CA file.
func newClient(cfg client.Config) (*client.Client, error) {
	tr, err := sharedTransport(cfg.CAFile)
	if err != nil {
		return nil, err
	}
	cfg.Transport = tr
	return client.New(cfg)
}

var (
	transportsMu sync.Mutex
	transports   = map[string]*http.Transport{}
)

// sharedTransport is one transport per CA file for the whole process.
func sharedTransport(caFile string) (*http.Transport, error) {
	transportsMu.Lock()
	defer transportsMu.Unlock()
	if t := transports[caFile]; t != nil {
		return t, nil
	}
	t := http.DefaultTransport.(*http.Transport).Clone()
	tc, err := client.TLSConfig(client.Config{CAFile: caFile})
	if err != nil {
		return nil, err
	}
	t.TLSClientConfig = tc
	transports[caFile] = t
	return t, nil
}

// fail prints err for a person and returns exit status 1.
func fail(e *Env, err error) int {
	var ae *client.APIError
	if errors.As(err, &ae) && len(ae.Fields) > 0 {
		fmt.Fprintln(e.Stderr, "gangway: rejected:")
		for _, f := range ae.Fields {
			fmt.Fprintf(e.Stderr, "  %s\n", f.Error())
		}
		return 1
	}
	if errors.Is(err, client.ErrUnreachable) {
		fmt.Fprintf(e.Stderr, "gangway: %v (set --server or GANGWAY_SERVER)\n", err)
		return 1
	}

	fmt.Fprintf(e.Stderr, "gangway: %v\n", err)
	return 1
}

func newLogger(w io.Writer, level string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(strings.ToUpper(level))); err != nil {
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", level)
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: l})), nil
}
