package client

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/gangway/gangway/internal/api"
	"github.com/gangway/gangway/internal/base/pki"
	"github.com/goccy/go-yaml"
)

// ConfigFile is the client configuration (~/.config/gangway/config), as
// kubeconfig: named contexts, each a server with the credentials to call
// it, and the one in use.
type ConfigFile struct {
	CurrentContext string    `yaml:"current-context,omitempty"`
	Contexts       []Context `yaml:"contexts"`
}

// Context is one server and the credentials to call it.
type Context struct {
	Name   string `yaml:"name"`
	Server string `yaml:"server"`
	Token  string `yaml:"token,omitempty"`
	// CAFile is the PEM file of the cluster CA; "" trusts the system's.
	CAFile string `yaml:"ca-file,omitempty"`
}

// Find returns the named context, or the current one for "".
func (f *ConfigFile) Find(name string) (*Context, error) {
	if name == "" {
		name = f.CurrentContext
	}
	if name == "" {
		return nil, nil
	}
	for i := range f.Contexts {
		if f.Contexts[i].Name == name {
			return &f.Contexts[i], nil
		}
	}
	names := make([]string, len(f.Contexts))
	for i, c := range f.Contexts {
		names[i] = c.Name
	}
	return nil, fmt.Errorf("no context %q in the client config (it has: %s)", name, strings.Join(names, ", "))
}

// DefaultConfigPath is where the client config lives for an environment
// (getenv): $GANGWAY_CONFIG, else $XDG_CONFIG_HOME/gangway/config, else
// $HOME/.config/gangway/config; "" when none of them is set.
func DefaultConfigPath(getenv func(string) string) string {
	if p := getenv("GANGWAY_CONFIG"); p != "" {
		return p
	}
	if d := getenv("XDG_CONFIG_HOME"); d != "" {
		return filepath.Join(d, "gangway", "config")
	}
	if h := getenv("HOME"); h != "" {
		return filepath.Join(h, ".config", "gangway", "config")
	}
	return ""
}

// LoadConfigFile reads a client config; a file that does not exist is an
// empty config.
func LoadConfigFile(path string) (*ConfigFile, error) {
	f := &ConfigFile{}
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return f, nil
	}
	if err != nil {
		return nil, fmt.Errorf("client config: %w", err)
	}
	if err := api.DecodeStrict(b, f); err != nil {
		return nil, fmt.Errorf("client config %s: %w", path, err)
	}
	return f, nil
}

// SaveContext adds c to the config at path (replacing a context of the
// same name) and, with current, makes it the one in use. The file is
// written whole, 0600 (it holds tokens), its directory made 0700.
func SaveContext(path string, c Context, current bool) error {
	f, err := LoadConfigFile(path)
	if err != nil {
		return err
	}
	i := slices.IndexFunc(f.Contexts, func(x Context) bool { return x.Name == c.Name })
	if i >= 0 {
		f.Contexts[i] = c
	} else {
		f.Contexts = append(f.Contexts, c)
	}
	if current || f.CurrentContext == "" {
		f.CurrentContext = c.Name
	}
	b, err := yaml.Marshal(f)
	if err != nil {
		return fmt.Errorf("client config: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("client config: %w", err)
	}
	return pki.WriteFile(path, b, 0o600)
}

// Resolve is what a command's flags and environment leave to the config:
// each field set wins over the context's.
type Resolve struct {
	Context string // --context / $GANGWAY_CONTEXT
	Server  string // --server / $GANGWAY_SERVER
	Token   string // --token / $GANGWAY_TOKEN
	CAFile  string // --ca-file / $GANGWAY_CA_FILE
}

// DefaultServer is the server a client calls when nothing names one.
const DefaultServer = "https://127.0.0.1:7070"

// ConfigFor is the Config for r over the client config at path ("": none).
func ConfigFor(path string, r Resolve) (Config, error) {
	var ctx *Context
	if path != "" {
		f, err := LoadConfigFile(path)
		if err != nil {
			return Config{}, err
		}
		if ctx, err = f.Find(r.Context); err != nil {
			return Config{}, err
		}
	} else if r.Context != "" {
		return Config{}, fmt.Errorf("--context %s: there is no client config ($GANGWAY_CONFIG or $HOME unset)", r.Context)
	}
	if ctx == nil {
		ctx = &Context{}
	}
	c := Config{Server: first(r.Server, ctx.Server, DefaultServer), Token: first(r.Token, ctx.Token), CAFile: first(r.CAFile, ctx.CAFile)}
	return c, nil
}

func first(s ...string) string {
	for _, v := range s {
		if v != "" {
			return v
		}
	}
	return ""
}
