package cli

import (
	"bytes"
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/gangway/gangway/internal/api/client"
	"github.com/gangway/gangway/internal/base/cmdkit"
)

// Shell completion works as cobra's does: the script each shell sources
// asks the binary (`gangway __complete WORDS...`) for the candidates, so
// they are always this build's commands and flags, and job IDs and node
// names come from the server the user's config names.

const bashCompletion = `# bash completion for gangway: source <(gangway completion bash)
_gangway() {
    local cur words
    cur="${COMP_WORDS[COMP_CWORD]}"
    words=("${COMP_WORDS[@]:1:COMP_CWORD}")
    COMPREPLY=()
    local IFS=$'\n'
    COMPREPLY=($(gangway __complete "${words[@]}" 2>/dev/null))
    return 0
}
complete -o default -F _gangway gangway
`

const zshCompletion = `#compdef gangway
# zsh completion for gangway: source <(gangway completion zsh)
_gangway() {
    local -a cands
    cands=("${(@f)$(gangway __complete "${(@)words[2,CURRENT]}" 2>/dev/null)}")
    compadd -a cands
}
compdef _gangway gangway
`

const fishCompletion = `# fish completion for gangway: gangway completion fish | source
function __gangway_complete
    set -l words (commandline -opc)[2..-1] (commandline -ct)
    gangway __complete $words 2>/dev/null
end
complete -c gangway -f -a '(__gangway_complete)'
`

// runCompletion is `gangway completion bash|zsh|fish`.
func runCompletion(ctx context.Context, e *Env, args []string) int {
	fs := cmdkit.NewFlags(e.Stderr, "completion", "bash|zsh|fish")
	pos, code, ok := cmdkit.ParseArgs(fs, args)
	if !ok {
		return code
	}
	if len(pos) != 1 {
		fs.Usage()
		return 2
	}
	switch pos[0] {
	case "bash":
		fmt.Fprint(e.Stdout, bashCompletion)
	case "zsh":
		fmt.Fprint(e.Stdout, zshCompletion)
	case "fish":
		fmt.Fprint(e.Stdout, fishCompletion)
	default:
		fmt.Fprintf(e.Stderr, "gangway completion: %q: want bash, zsh or fish\n", pos[0])
		return 2
	}
	return 0
}

var flagLine = regexp.MustCompile(`(?m)^\s+-(\S+)`)

// flagsOf lists the flags of the command args start with, from its own
// -h: a subcommand's (queue set, config set-context) when args name one.
func flagsOf(ctx context.Context, e *Env, args []string) []string {
	cmd := []string{args[0], "-h"}
	if len(args) >= 2 && slices.Contains(subjects[args[0]], args[1]) {
		cmd = []string{args[0], args[1], "-h"}
	}
	var out, errOut bytes.Buffer
	Main(ctx, cmd, &Env{Stdout: &out, Stderr: &errOut, Getenv: e.Getenv, Getwd: e.Getwd})
	var flags []string
	for _, m := range flagLine.FindAllStringSubmatch(errOut.String()+out.String(), -1) {
		f := "--" + m[1]
		if len(m[1]) == 1 {
			f = "-" + m[1]
		}
		if !slices.Contains(flags, f) {
			flags = append(flags, f)
		}
	}
	return flags
}

// subjects are what a command's first argument names, for completion.
var subjects = map[string][]string{
	"get":        {"jobs", "nodes", "queues", "deployments"},
	"describe":   {"job", "node", "deployment"},
	"completion": {"bash", "zsh", "fish"},
	"queue":      {"set", "delete"},
	"token":      {"create", "list", "revoke"},
	"report":     {"usage"},
	"delete":     {"deployment"},
	"node":       {"revoke"},
	"config":     {"set-context", "use-context", "get-contexts", "current-context"},
}

// flagValues are what a flag takes, for completion of the word after it.
var flagValues = map[string][]string{
	"--signal": {"USR1", "USR2", "TERM", "INT", "HUP"},
}

// runComplete is the hidden `gangway __complete WORDS...`: the candidates
// for the last word, one per line.
func runComplete(ctx context.Context, e *Env, args []string) int {
	cur := ""
	if len(args) > 0 {
		cur, args = args[len(args)-1], args[:len(args)-1]
	}
	var cands []string
	switch {
	case len(args) == 0:
		for _, c := range commands() {
			if !c.hidden {
				cands = append(cands, c.name)
			}
		}
	case strings.HasPrefix(cur, "-"):
		cands = flagsOf(ctx, e, args)
	case len(args) == 2 && args[0] == "config" && (args[1] == "use-context" || args[1] == "set-context"):
		if f, err := client.LoadConfigFile(client.DefaultConfigPath(e.Getenv)); err == nil {
			for _, c := range f.Contexts {
				cands = append(cands, c.Name)
			}
		}
	case flagValues[args[len(args)-1]] != nil:
		cands = flagValues[args[len(args)-1]]
	case len(args) == 1 && subjects[args[0]] != nil:
		cands = subjects[args[0]]
	default:
		cands = serverNames(ctx, e, args)
	}
	for _, c := range cands {
		if strings.HasPrefix(c, cur) {
			fmt.Fprintln(e.Stdout, c)
		}
	}
	return 0
}

// serverNames are the job IDs or node names a command's next argument
// may be, from the server, within a second; none when it cannot be asked.
func serverNames(ctx context.Context, e *Env, args []string) []string {
	var kind string
	switch {
	case slices.Contains([]string{"logs", "cancel", "priority", "hold", "release", "requeue"}, args[0]), len(args) >= 2 && args[0] == "describe" && args[1] == "job":
		kind = "job"
	case slices.Contains([]string{"cordon", "uncordon", "drain"}, args[0]), len(args) >= 2 && args[0] == "describe" && args[1] == "node":
		kind = "node"
	default:
		return nil
	}
	fs := cmdkit.NewFlags(&bytes.Buffer{}, "complete", "")
	srv := serverFlag(fs, e)
	c, err := srv.client()
	if err != nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	var out []string
	if kind == "node" {
		l, err := c.Nodes(ctx)
		if err != nil {
			return nil
		}
		for _, n := range l.Nodes {
			out = append(out, n.Name)
		}
		return out
	}
	l, err := c.Jobs(ctx, client.JobQuery{Live: true, Limit: 200})
	if err != nil {
		return nil
	}
	for _, j := range l.Jobs {
		out = append(out, j.ID)
	}
	return out
}
