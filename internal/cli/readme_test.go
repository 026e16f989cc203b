package cli

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// shellLines returns the commands of the ```sh blocks of a Markdown file:
// continuations joined, comments dropped, split at ; and &&, each as its
// words (quotes removed).
func shellLines(t *testing.T, path string) [][]string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out [][]string
	for _, m := range regexp.MustCompile("(?s)```sh\n(.*?)```").FindAllSubmatch(b, -1) {
		text := strings.ReplaceAll(string(m[1]), "\\\n", " ")
		for _, line := range strings.Split(text, "\n") {
			out = append(out, splitShell(line)...)
		}
	}
	return out
}

// splitShell splits one line as sh would into commands of words, for the
// quoting READMEs use: '...', "...", # comments, ; and &&.
func splitShell(line string) [][]string {
	var cmds [][]string
	var words []string
	var w strings.Builder
	inWord := false
	end := func() {
		if inWord {
			words = append(words, w.String())
			w.Reset()
			inWord = false
		}
	}
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case c == '\'' || c == '"':
			j := strings.IndexByte(line[i+1:], c)
			if j < 0 {
				j = len(line) - i - 1
			}
			w.WriteString(line[i+1 : i+1+j])
			inWord = true
			i += j + 1
		case c == '#' && !inWord:
			i = len(line)
		case c == ';' || (c == '&' && i+1 < len(line) && line[i+1] == '&'):
			end()
			if len(words) > 0 {
				cmds = append(cmds, words)
			}
			words = nil
			if c == '&' {
				i++
			}
		case c == ' ' || c == '\t':
			end()
		default:
			w.WriteByte(c)
			inWord = true
		}
	}
	end()
	if len(words) > 0 {
		cmds = append(cmds, words)
	}
	return cmds
}

// readmeDocs are the Markdown files whose shell examples are checked.
func readmeDocs(t *testing.T) []string {
	docs, _ := filepath.Glob("../../docs/*.md")
	ex, _ := filepath.Glob("../../examples/*/README.md")
	return append(append([]string{"../../README.md"}, docs...), ex...)
}

// TestReadmeGangwayCommandsParse: every gangway command in the README's,
// docs' and examples' shell blocks names a command that exists, with flags
// it takes and values they accept (checked by parsing them, then asking
// for help instead of running).
func TestReadmeGangwayCommandsParse(t *testing.T) {
	n := 0
	for _, doc := range readmeDocs(t) {
		loopVars := map[string]string{} // for X in V ...: $X is V
		for _, words := range shellLines(t, doc) {
			if words[0] == "for" && len(words) > 3 && words[2] == "in" {
				loopVars["$"+words[1]] = words[3]
				continue
			}
			if words[0] == "do" {
				words = words[1:]
			}
			if len(words) > 0 && words[0] == "sudo" {
				words = words[1:]
			}
			if len(words) == 0 {
				continue
			}
			for i := range words {
				for k, v := range loopVars {
					words[i] = strings.ReplaceAll(words[i], k, v)
				}
			}
			switch {
			case len(words) > 2 && words[0] == "go" && words[1] == "run" && words[2] == "./cmd/gangway":
				words = words[3:]
			case words[0] == "gangway":
				words = words[1:]
			default:
				continue
			}
			n++
			var o, e bytes.Buffer
			// -h before a command after --, which is the job's.
			args := append(append([]string(nil), words...), "-h")
			if i := slices.Index(words, "--"); i >= 0 {
				args = append(append(append([]string(nil), words[:i]...), "-h"), words[i:]...)
			}
			if code := Main(context.Background(), args, &Env{Stdout: &o, Stderr: &e, Getenv: func(string) string { return "" }}); code != 0 {
				t.Errorf("%s: gangway %s: exit %d\n%s", doc, strings.Join(words, " "), code, firstLines(e.String(), 3))
			}
		}
	}
	if n < 40 {
		t.Errorf("checked %d gangway commands; the README alone has more", n)
	}
}

func firstLines(s string, n int) string {
	l := strings.SplitN(s, "\n", n+1)
	return strings.Join(l[:min(n, len(l))], "\n")
}

// TestReadmeInstallBuildsBinaries runs the README's install command (its go
// build with -o) and checks that it writes both binaries.
func TestReadmeInstallBuildsBinaries(t *testing.T) {
	if testing.Short() {
		t.Skip("builds two binaries")
	}
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("`(go build [^`]*)`").FindSubmatch(b)
	if m == nil {
		t.Fatal("the README gives no go build command")
	}
	words := splitShell(string(m[1]))[0]
	dir := t.TempDir()
	out := ""
	for i, w := range words {
		if i > 0 && words[i-1] == "-o" {
			out = w
			words[i] = dir + string(filepath.Separator)
		}
	}
	if out == "" {
		t.Fatalf("%q: without -o DIR/, go build of two packages writes no binary", m[1])
	}
	cmd := exec.Command(words[0], words[1:]...)
	cmd.Dir = "../.."
	cmd.Env = append(os.Environ(), "CGO_ENABLED=1")
	if o, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", m[1], err, o)
	}
	for _, bin := range []string{"gangway", "gangway-shim"} {
		if fi, err := os.Stat(filepath.Join(dir, bin)); err != nil || fi.Mode()&0o111 == 0 {
			t.Errorf("%s wrote no executable %s into %s: %v", m[1], bin, out, err)
		}
	}
}

// TestReadmeGoVersion: the Go the README asks for is go.mod's.
func TestReadmeGoVersion(t *testing.T) {
	mod, err := os.ReadFile("../../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^go (\S+)$`).FindSubmatch(mod)
	if m == nil {
		t.Fatal("go.mod has no go line")
	}
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	said := regexp.MustCompile(`with Go (\S+?)[ :,]`).FindSubmatch(readme)
	if said == nil {
		t.Fatal("the README names no Go version (\"with Go X.Y.Z\")")
	}
	if string(said[1]) != string(m[1]) {
		t.Errorf("the README asks for Go %s; go.mod needs %s", said[1], m[1])
	}
}

// TestReadmeSimulateRuns runs the README's gangway simulate commands from
// the repository's root: their traces ship with it.
func TestReadmeSimulateRuns(t *testing.T) {
	n := 0
	for _, words := range shellLines(t, "../../README.md") {
		if len(words) < 2 || words[0] != "gangway" || words[1] != "simulate" {
			continue
		}
		n++
		args := append([]string(nil), words[1:]...)
		for i := range args {
			if i > 0 && args[i-1] == "--trace" {
				if !filepath.IsLocal(args[i]) {
					t.Errorf("gangway simulate --trace %s: a clone of the repository has no such file; use one under examples/", args[i])
				}
				args[i] = filepath.Join("../..", args[i])
			}
			if i > 0 && args[i-1] == "--out" {
				args[i] = t.TempDir()
			}
		}
		var o, e bytes.Buffer
		if code := Main(context.Background(), args, &Env{Stdout: &o, Stderr: &e, Getenv: func(string) string { return "" }}); code != 0 {
			t.Errorf("gangway %s: exit %d\n%s", strings.Join(words[1:], " "), code, firstLines(e.String(), 5))
		}
	}
	if n == 0 {
		t.Error("the README has no gangway simulate command")
	}
}
