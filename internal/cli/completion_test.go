package cli

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The bash completion works in a real bash: sourced, it registers itself
// (complete -p), and a completion call offers this build's commands,
// subjects and flags.
func TestBashCompletion(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash to complete in")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bin := t.TempDir()
	if err := os.Symlink(exe, filepath.Join(bin, "gangway")); err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(t.TempDir(), "gangway.bash")
	var out strings.Builder
	if code := Main(t.Context(), []string{"completion", "bash"}, &Env{Stdout: &out, Stderr: &out}); code != 0 {
		t.Fatalf("completion bash: %d %s", code, out.String())
	}
	os.WriteFile(script, []byte(out.String()), 0o644)
	complete := func(line string) []string {
		t.Helper()
		words := strings.Fields(line)
		if strings.HasSuffix(line, " ") {
			words = append(words, "")
		}
		prog := `source "$1"; complete -p gangway >/dev/null || exit 9; shift
COMP_WORDS=("$@"); COMP_CWORD=$(( $# - 1 )); _gangway; printf '%s\n' "${COMPREPLY[@]}"`
		cmd := exec.Command(bash, append([]string{"-c", prog, "bash", script}, words...)...)
		cmd.Env = append(os.Environ(), "PATH="+bin+":"+os.Getenv("PATH"), "GANGWAY_SERVER=https://127.0.0.1:1")
		b, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("bash completing %q: %v: %s", line, err, b)
		}
		return strings.Fields(string(b))
	}
	for line, want := range map[string]string{
		"gangway dr":                "drain",
		"gangway get j":             "jobs",
		"gangway drain --t":         "--timeout",
		"gangway completion z":      "zsh",
		"gangway req":               "requeue",
		"gangway cancel --sig":      "--signal",
		"gangway cancel --signal U": "USR1",
		"gangway submit --gres=":    "",
		// A subcommand's own flags, not its parent's.
		"gangway config set-context x --token-f": "--token-file",
		"gangway queue set team --pol":           "--policy",
		"gangway token create --ro":              "--role",
	} {
		got := complete(line)
		if want == "" {
			continue // ran without error
		}
		found := false
		for _, g := range got {
			found = found || g == want
		}
		if !found {
			t.Errorf("completing %q: %q, want %q among them", line, got, want)
		}
	}
}
