package cli

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/gangway/gangway/internal/api/client"
	"github.com/gangway/gangway/internal/base/cmdkit"
)

// runConfig is `gangway config set-context|use-context|get-contexts|
// current-context`, kubectl config's verbs over the client config
// (client.DefaultConfigPath: $GANGWAY_CONFIG, else
// $XDG_CONFIG_HOME/gangway/config.yaml, else
// ~/.config/gangway/config.yaml), whose current context every client
// command uses where --server, --token, --ca-file (or their $GANGWAY_*
// variables) do not say otherwise.
func runConfig(ctx context.Context, e *Env, args []string) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" {
		fmt.Fprint(e.Stderr, configUsage)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	switch args[0] {
	case "set-context":
		return configSetContext(e, args[1:])
	case "use-context", "get-contexts", "current-context":
		fs := cmdkit.NewFlags(e.Stderr, "config "+args[0], map[string]string{"use-context": "NAME"}[args[0]])
		pos, code, ok := cmdkit.ParseArgs(fs, args[1:])
		if !ok {
			return code
		}
		if want := map[string]int{"use-context": 1}[args[0]]; len(pos) != want {
			fs.Usage()
			return 2
		}
		path, ok := configPath(e)
		if !ok {
			return 1
		}
		f, err := client.LoadConfigFile(path)
		if err != nil {
			return fail(e, err)
		}
		switch args[0] {
		case "use-context":
			if _, err := f.Find(pos[0]); err != nil {
				return fail(e, err)
			}
			f.CurrentContext = pos[0]
			if err := client.SaveConfigFile(path, f); err != nil {
				return fail(e, err)
			}
			fmt.Fprintf(e.Stdout, "Switched to context %q.\n", pos[0])
		case "current-context":
			if f.CurrentContext == "" {
				fmt.Fprintf(e.Stderr, "gangway config: current-context is not set in %s (gangway config use-context NAME)\n", path)
				return 1
			}
			fmt.Fprintln(e.Stdout, f.CurrentContext)
		default:
			tw := tabwriter.NewWriter(e.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "CURRENT\tNAME\tSERVER\tTOKEN\tCA")
			for _, c := range f.Contexts {
				cur, tok, ca := "", "-", c.CAFile
				if c.Name == f.CurrentContext {
					cur = "*"
				}
				switch {
				case c.TokenFile != "":
					tok = c.TokenFile
				case c.Token != "":
					tok = "(in the config)"
				}
				if ca == "" {
					ca = "(system)"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", cur, c.Name, c.Server, tok, ca)
			}
			tw.Flush()
		}
		return 0
	}
	fmt.Fprintf(e.Stderr, "gangway config: %q: want set-context, use-context, get-contexts or current-context\n", args[0])
	return 2
}

// configPath is the client config's path; ok false (said on stderr) when
// the environment names none.
func configPath(e *Env) (string, bool) {
	path := client.DefaultConfigPath(e.Getenv)
	if path == "" {
		fmt.Fprintln(e.Stderr, "gangway config: no client config: set $GANGWAY_CONFIG, $XDG_CONFIG_HOME or $HOME")
	}
	return path, path != ""
}

const configUsage = `Usage: gangway config set-context NAME [--server URL] [--token-file F | --token T] [--ca F] [--use]
       gangway config use-context NAME
       gangway config get-contexts
       gangway config current-context

Contexts as kubectl's: each a server and the credentials to call it, kept
in $GANGWAY_CONFIG, else $XDG_CONFIG_HOME/gangway/config.yaml, else
~/.config/gangway/config.yaml. Every client command uses the current
context (--context NAME or $GANGWAY_CONTEXT: another) where --server,
--token and --ca-file, or $GANGWAY_SERVER, $GANGWAY_TOKEN and
$GANGWAY_CA_FILE, do not say otherwise.
`

// configSetContext is `gangway config set-context NAME`: the context made,
// or the flags given changed in it (the rest kept), as kubectl's.
func configSetContext(e *Env, args []string) int {
	fs := cmdkit.NewFlags(e.Stderr, "config set-context", "NAME [--server URL] [--token-file F | --token T] [--ca F] [--use]")
	server := fs.String("server", "", "the server's URL (several replicas': separated by commas)")
	tokenFile := fs.String("token-file", "", "a file holding the bearer token, read at each use (the token stays out of the config)")
	token := fs.String("token", "", "the bearer token itself, kept in the config (0600)")
	ca := fs.String("ca", "", "PEM file of the cluster CA to trust (default: the system's)")
	use := fs.Bool("use", false, "make it the current context too")
	pos, code, ok := cmdkit.ParseArgs(fs, args)
	if !ok {
		return code
	}
	if len(pos) != 1 || pos[0] == "" {
		fs.Usage()
		return 2
	}
	path, ok := configPath(e)
	if !ok {
		return 1
	}
	if *token != "" && *tokenFile != "" {
		fmt.Fprintln(e.Stderr, "gangway config set-context: --token and --token-file: give one")
		return 2
	}
	abs := func(flag, p string) (string, bool) {
		a, err := filepath.Abs(p)
		if err == nil {
			_, err = os.Stat(a)
		}
		if err != nil {
			fmt.Fprintf(e.Stderr, "gangway config set-context: --%s: %v\n", flag, err)
			return "", false
		}
		return a, true
	}
	f, err := client.LoadConfigFile(path)
	if err != nil {
		return fail(e, err)
	}
	i := slices.IndexFunc(f.Contexts, func(c client.Context) bool { return c.Name == pos[0] })
	verb := "modified"
	if i < 0 {
		verb = "created"
		if *server == "" {
			fmt.Fprintf(e.Stderr, "gangway config set-context: context %q is new: give its --server\n", pos[0])
			return 2
		}
		f.Contexts = append(f.Contexts, client.Context{Name: pos[0]})
		i = len(f.Contexts) - 1
	}
	c := &f.Contexts[i]
	if *server != "" {
		c.Server = strings.TrimRight(*server, "/")
	}
	if *tokenFile != "" {
		if c.TokenFile, ok = abs("token-file", *tokenFile); !ok {
			return 2
		}
		c.Token = ""
	}
	if *token != "" {
		c.Token, c.TokenFile = *token, ""
	}
	if *ca != "" {
		if c.CAFile, ok = abs("ca", *ca); !ok {
			return 2
		}
	}
	if *use || f.CurrentContext == "" {
		f.CurrentContext = c.Name
	}
	if err := client.SaveConfigFile(path, f); err != nil {
		fmt.Fprintf(e.Stderr, "gangway config set-context: %v\n", err)
		return 2
	}
	fmt.Fprintf(e.Stdout, "Context %q %s in %s.\n", c.Name, verb, path)
	return 0
}
