package layout

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/gangway/gangway/"

// tiers lists the tiers of internal/ by path prefix, and what each may
// import besides the standard library and third-party modules. A package
// in no tier fails TestTiers, so a new folder has to be placed here.
var tiers = []struct {
	name     string
	prefixes []string
	may      []string // tier names
}{
	{"base", []string{"internal/base/"}, nil},
	{"api", []string{"internal/api"}, []string{"base"}},
	{"core", []string{"internal/topology", "internal/hardware", "internal/scheduler", "internal/launch", "internal/planner", "internal/goodput", "internal/slurm"}, []string{"base", "api"}},
	{"inference", []string{"internal/inference/"}, []string{"base", "api", "core"}},
	{"controlplane", []string{"internal/controlplane/"}, []string{"base", "api", "core", "inference"}},
	{"node", []string{"internal/node/"}, []string{"base", "api", "core"}},
	// sim may import api for its vocabulary alone: the causes its usage
	// report charges lost work to are the live accounting's.
	{"sim", []string{"internal/sim"}, []string{"base", "api", "core"}},
	{"bench", []string{"internal/bench/"}, []string{"base", "api", "core", "inference", "controlplane", "node", "sim"}},
	// cli may import the Go example trainer: `gangway train-example` runs
	// it, so that the demo has a real workload without Python.
	{"cli", []string{"internal/cli"}, []string{"base", "api", "core", "inference", "controlplane", "node", "sim", "bench", "examples"}},
	{"layout", []string{"internal/layout"}, nil},
	{"e2e", []string{"internal/e2e"}, []string{"base", "api", "core", "inference", "controlplane", "node", "sim", "bench", "cli"}},
	{"cmd", []string{"cmd/"}, []string{"base", "api", "core", "inference", "controlplane", "node", "sim", "bench", "cli"}},
	{"examples", []string{"examples/"}, nil},
}

// tierOf names the tier of a module-relative package path ("" if none).
func tierOf(rel string) string {
	for _, t := range tiers {
		for _, p := range t.prefixes {
			if rel == strings.TrimSuffix(p, "/") || strings.HasPrefix(rel, strings.TrimSuffix(p, "/")+"/") {
				return t.name
			}
		}
	}
	return ""
}

type pkg struct {
	ImportPath string
	Dir        string
	Doc        string
	Imports    []string
	GoFiles    []string
	Deps       []string
}

// listPackages runs go list over the module, once per test binary.
func listPackages(t *testing.T) []pkg {
	t.Helper()
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("the go tool is not on PATH; these tests read the tree through go list")
	}
	cmd := exec.Command("go", "list", "-json=ImportPath,Dir,Doc,Imports,GoFiles,Deps", module+"...")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=1")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	var pkgs []pkg
	dec := json.NewDecoder(bytes.NewReader(out))
	for dec.More() {
		var p pkg
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		pkgs = append(pkgs, p)
	}
	return pkgs
}

func rel(path string) string { return strings.TrimPrefix(path, module) }

// TestTiers: every package sits in a tier and imports only from the tiers
// its own may use.
func TestTiers(t *testing.T) {
	for _, p := range listPackages(t) {
		from := tierOf(rel(p.ImportPath))
		if from == "" {
			t.Errorf("%s is in no tier: add it to internal/layout's tiers", rel(p.ImportPath))
			continue
		}
		var may []string
		for _, tr := range tiers {
			if tr.name == from {
				may = append(tr.may, from)
			}
		}
		for _, imp := range p.Imports {
			if !strings.HasPrefix(imp, module) {
				continue
			}
			to := tierOf(rel(imp))
			if !slices.Contains(may, to) {
				t.Errorf("%s (tier %s) imports %s (tier %s): %s may import only %v", rel(p.ImportPath), from, rel(imp), to, from, may)
			}
		}
	}
}

var itImports = regexp.MustCompile(`(?s)It imports (.*?)(?:\.\s|\.$)`)
var internalRef = regexp.MustCompile(`\binternal/[a-z0-9/]+[a-z0-9]`)

// TestPackageDocs: every package has a doc comment; under internal/ it has
// an "It imports …" sentence that names every internal package it
// imports (by path, or by the path's tail) and names by path none it does
// not, and "only the standard library" is true when it says so.
func TestPackageDocs(t *testing.T) {
	for _, p := range listPackages(t) {
		r := rel(p.ImportPath)
		if p.Doc == "" {
			t.Errorf("%s has no package doc comment", r)
			continue
		}
		if !strings.HasPrefix(r, "internal/") {
			continue
		}
		text := fullDoc(t, p)
		m := itImports.FindStringSubmatch(text)
		if m == nil {
			t.Errorf("%s: its doc comment has no \"It imports …\" sentence", r)
			continue
		}
		sentence := strings.Join(strings.Fields(m[1]), " ")
		var internal, thirdParty []string
		for _, imp := range p.Imports {
			switch {
			case strings.HasPrefix(imp, module):
				internal = append(internal, rel(imp))
			case strings.Contains(strings.SplitN(imp, "/", 2)[0], "."):
				thirdParty = append(thirdParty, imp)
			}
		}
		if strings.HasPrefix(sentence, "any gangway package") && tierOf(r) == "cli" {
			continue // the top of the tree; TestTiers holds it to its tier
		}
		if strings.HasPrefix(sentence, "only the standard library") && len(internal)+len(thirdParty) > 0 {
			t.Errorf("%s says it imports only the standard library; it imports %v", r, append(internal, thirdParty...))
		}
		for _, imp := range internal {
			if !mentions(sentence, imp) {
				t.Errorf("%s imports %s, which its doc's \"It imports %s\" does not name", r, imp, sentence)
			}
		}
		for _, ref := range internalRef.FindAllString(sentence, -1) {
			if !slices.Contains(internal, ref) {
				t.Errorf("%s's doc says it imports %s, which it does not", r, ref)
			}
		}
	}
}

// mentions reports whether sentence names imp by its path or by a tail of
// it ("internal/controlplane/store", "controlplane/store" or "store").
func mentions(sentence, imp string) bool {
	parts := strings.Split(imp, "/")
	for i := range parts {
		tail := strings.Join(parts[i:], "/")
		if regexp.MustCompile(`(^|[^\w/])` + regexp.QuoteMeta(tail) + `($|[^\w/])`).MatchString(sentence) {
			return true
		}
	}
	return false
}

// fullDoc returns the package's whole doc comment (go list keeps only its
// first sentence): the comment above the package clause of the file that
// has one.
func fullDoc(t *testing.T, p pkg) string {
	t.Helper()
	for _, f := range p.GoFiles {
		data, err := os.ReadFile(filepath.Join(p.Dir, f))
		if err != nil {
			t.Fatal(err)
		}
		var doc []string
		sc := bufio.NewScanner(bytes.NewReader(data))
		for sc.Scan() {
			line := sc.Text()
			switch {
			case strings.HasPrefix(line, "//go:build"):
				doc = nil
			case strings.HasPrefix(line, "//"):
				doc = append(doc, strings.TrimSpace(strings.TrimPrefix(line, "//")))
			case strings.HasPrefix(line, "package "):
				if len(doc) > 0 && strings.HasPrefix(doc[0], "Package ") {
					return strings.Join(doc, "\n")
				}
				doc = nil
			default:
				doc = nil
			}
			if strings.HasPrefix(line, "package ") {
				break
			}
		}
	}
	return ""
}

// TestLinks: what must never be linked into a binary or a library.
func TestLinks(t *testing.T) {
	never := []struct{ pkg, dep, why string }{
		{"cmd/gangway-shim", "go.etcd.io/etcd/server", "the rank supervisor runs on every node beside the ranks and must stay small"},
		{"cmd/gangway-shim", module + "internal/controlplane/", "the rank supervisor knows nothing of the control plane"},
		{"internal/node/driver", "go.etcd.io/etcd/server", "the supervisor's package links no control plane"},
		{"cmd/gangway-shim", "github.com/docker/docker", "the supervisor runs a container rank's shim and cleanup as commands of the gangway binary; it links no engine client"},
		{"internal/controlplane/server", "github.com/docker/docker", "only nodes talk to a container engine"},
	}
	pkgs := map[string]pkg{}
	for _, p := range listPackages(t) {
		pkgs[rel(p.ImportPath)] = p
	}
	for _, n := range never {
		p, ok := pkgs[n.pkg]
		if !ok {
			t.Errorf("%s: no such package", n.pkg)
			continue
		}
		for _, d := range p.Deps {
			if strings.HasPrefix(d, n.dep) {
				t.Errorf("%s links %s: %s", n.pkg, d, n.why)
				break
			}
		}
	}
}

// TestFileSizes: no control-plane source file over 600 lines, the size at
// which a file stops being readable in one sitting.
func TestFileSizes(t *testing.T) {
	const most = 600
	err := filepath.WalkDir("../controlplane", func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if n := bytes.Count(data, []byte("\n")); n > most {
			t.Errorf("%s has %d lines (at most %d): split it at a seam", path, n, most)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
