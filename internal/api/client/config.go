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

// ConfigFile is the client configuration (~/.config/gangway/config.yaml),
// as kubeconfig: named contexts, each a server with the credentials to
// call it, and the one in use. `gangway config` edits it.
type ConfigFile struct {
	CurrentContext string    `yaml:"current-context,omitempty"`
	Contexts       []Context `yaml:"contexts"`
}

// Context is one server and the credentials to call it.
type Context struct {
	Name   string `yaml:"name"`
	Server string `yaml:"server"`
	Token  string `yaml:"token,omitempty"`
	// TokenFile holds the token instead (read at each use, surrounding
	// space trimmed): the token stays out of this file.
	TokenFile string `yaml:"token-file,omitempty"`
	// CAFile is the PEM file of the cluster CA; "" trusts the system's.
	CAFile string `yaml:"ca-file,omitempty"`
}

// Validate checks what decoding cannot: every context named once, with a
// server, one way to its token at most; the current context one of them.
func (f *ConfigFile) Validate() error {
	seen := map[string]bool{}
	for i, c := range f.Contexts {
		switch {
		case c.Name == "":
			return fmt.Errorf("contexts[%d]: no name", i)
		case seen[c.Name]:
			return fmt.Errorf("contexts[%d]: a second context named %q", i, c.Name)
		case c.Server == "":
			return fmt.Errorf("context %q: no server", c.Name)
		case !strings.HasPrefix(c.Server, "https://") && !strings.HasPrefix(c.Server, "http://"):
			return fmt.Errorf("context %q: server %q: want an http:// or https:// URL", c.Name, c.Server)
		case c.Token != "" && c.TokenFile != "":
			return fmt.Errorf("context %q: token and token-file: give one", c.Name)
		}
		seen[c.Name] = true
	}
	if f.CurrentContext != "" && !seen[f.CurrentContext] {
		return fmt.Errorf("current-context %q: no context of that name", f.CurrentContext)
	}
	return nil
}

// token is the context's token: as written, or read from its token file.
func (c *Context) token() (string, error) {
	if c.TokenFile == "" {
		return c.Token, nil
	}
	b, err := os.ReadFile(c.TokenFile)
	if err != nil {
		return "", fmt.Errorf("context %q: token-file: %w", c.Name, err)
	}
	return strings.TrimSpace(string(b)), nil
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
// (getenv): $GANGWAY_CONFIG, else $XDG_CONFIG_HOME/gangway/config.yaml,
// else $HOME/.config/gangway/config.yaml; "" when none of them is set. A
// config written by earlier versions (.../gangway/config) is used while
// there is no config.yaml beside it.
func DefaultConfigPath(getenv func(string) string) string {
	if p := getenv("GANGWAY_CONFIG"); p != "" {
		return p
	}
	dir := ""
	if d := getenv("XDG_CONFIG_HOME"); d != "" {
		dir = filepath.Join(d, "gangway")
	} else if h := getenv("HOME"); h != "" {
		dir = filepath.Join(h, ".config", "gangway")
	} else {
		return ""
	}
	p := filepath.Join(dir, "config.yaml")
	if _, err := os.Stat(p); errors.Is(err, os.ErrNotExist) {
		if st, err := os.Stat(filepath.Join(dir, "config")); err == nil && st.Mode().IsRegular() {
			return filepath.Join(dir, "config")
		}
	}
	return p
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
	if err := f.Validate(); err != nil {
		return nil, fmt.Errorf("client config %s: %w", path, err)
	}
	return f, nil
}

// SaveConfigFile writes f to path whole, 0600 (it may hold tokens), its
// directory made 0700.
func SaveConfigFile(path string, f *ConfigFile) error {
	if err := f.Validate(); err != nil {
		return fmt.Errorf("client config: %w", err)
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
	return SaveConfigFile(path, f)
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
	c := Config{Server: first(r.Server, ctx.Server, DefaultServer), Token: r.Token, CAFile: first(r.CAFile, ctx.CAFile)}
	if c.Token == "" {
		t, err := ctx.token()
		if err != nil {
			return Config{}, err
		}
		c.Token = t
	}
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
