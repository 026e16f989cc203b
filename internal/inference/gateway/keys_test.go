package gateway

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func sha256Hex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

const goodKeyFile = `
keys:
  - name: team-a
    sha256: ` + "%HASH%" + `
    requestsPerMinute: 600
    tokensPerMinute: 200000
    models: [llama3-8b]
  - name: ci
    key: sk-gw-0123456789abcdef
`

func TestParseKeyFile(t *testing.T) {
	secret, hash := NewKey()
	data := strings.Replace(goodKeyFile, "%HASH%", strings.ToUpper(hash), 1)
	f, err := ParseKeyFile([]byte(data))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, key string
		want      KeyInfo
		ok        bool
	}{
		{"by hash (upper-case hex)", secret, KeyInfo{Name: "team-a", RequestsPerMinute: 600, TokensPerMinute: 200000, Models: []string{"llama3-8b"}}, true},
		{"plaintext, hashed on load", "sk-gw-0123456789abcdef", KeyInfo{Name: "ci"}, true},
		{"the hash is not the key", hash, KeyInfo{}, false},
		{"a prefix of a key", "sk-gw-0123456789abcde", KeyInfo{}, false},
		{"empty", "", KeyInfo{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := f.Lookup(tc.key)
			if ok != tc.ok {
				t.Fatalf("Lookup ok = %v, want %v", ok, tc.ok)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("KeyInfo (-want +got):\n%s", diff)
			}
		})
	}
	if diff := cmp.Diff([]string{"team-a", "ci"}, f.Names()); diff != "" {
		t.Errorf("Names (-want +got):\n%s", diff)
	}
}

func TestParseKeyFileJSON(t *testing.T) {
	f, err := ParseKeyFile([]byte(`{"keys":[{"name":"j","key":"sk-gw-jjjjjjjjjjjjjjjj","tokensPerMinute":5}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if got, ok := f.Lookup("sk-gw-jjjjjjjjjjjjjjjj"); !ok || got.TokensPerMinute != 5 {
		t.Errorf("Lookup = %+v, %v", got, ok)
	}
}

// Every error names the field (keys[i].field) and, where the field is in
// the file, its line and column.
func TestParseKeyFileErrors(t *testing.T) {
	h := sha256Hex("sk-gw-0123456789abcdef")
	for _, tc := range []struct {
		name, data string
		want       string // regexp
	}{
		{"empty", "", `empty file`},
		{"no keys", "keys: []\n", `keys: no keys`},
		{"unknown top-level field", "keys: []\nusers: []\n", `\[2:1\] unknown field "users"`},
		{"unknown field in an entry", "keys:\n  - name: a\n    key: sk-gw-0123456789abcdef\n    rpm: 5\n", `\[4:5\] unknown field "rpm"`},
		{"wrong type", "keys:\n  - name: a\n    key: sk-gw-0123456789abcdef\n    requestsPerMinute: lots\n", `\[4:24\] requestsPerMinute: .*`},
		{"no name", "keys:\n  - key: sk-gw-0123456789abcdef\n", `keys\[0\]\.name: required`},
		{"bad name", "keys:\n  - name: \"a b\"\n    key: sk-gw-0123456789abcdef\n", `\[2:11\] keys\[0\]\.name: "a b": want`},
		{"neither key nor sha256", "keys:\n  - name: a\n", `keys\[0\]\.sha256: one of key or sha256 is required`},
		{"both key and sha256", "keys:\n  - name: a\n    key: sk-gw-0123456789abcdef\n    sha256: " + h + "\n", `\[3:10\] keys\[0\]\.key: give key or sha256, not both`},
		{"short key", "keys:\n  - name: a\n    key: short\n", `keys\[0\]\.key: 5 characters; at least 16`},
		{"bad hash", "keys:\n  - name: a\n    sha256: abc\n", `\[3:13\] keys\[0\]\.sha256: want 64 hex digits, got "abc"`},
		{"negative requests", "keys:\n  - name: a\n    key: sk-gw-0123456789abcdef\n  - name: b\n    key: sk-gw-1123456789abcdef\n  - name: c\n    key: sk-gw-2123456789abcdef\n    requestsPerMinute: -1\n",
			`\[8:24\] keys\[2\]\.requestsPerMinute: must not be negative \(got -1; 0: no limit\)`},
		{"negative tokens", "keys:\n  - name: a\n    key: sk-gw-0123456789abcdef\n    tokensPerMinute: -5\n", `keys\[0\]\.tokensPerMinute: must not be negative`},
		{"empty model", "keys:\n  - name: a\n    key: sk-gw-0123456789abcdef\n    models: [m, \"\"]\n", `keys\[0\]\.models\[1\]: empty model name`},
		{"duplicate model", "keys:\n  - name: a\n    key: sk-gw-0123456789abcdef\n    models: [m, m]\n", `keys\[0\]\.models\[1\]: duplicate model "m"`},
		{"duplicate name", "keys:\n  - name: a\n    key: sk-gw-0123456789abcdef\n  - name: a\n    key: sk-gw-1123456789abcdef\n", `\[4:11\] keys\[1\]\.name: duplicate name "a" \(keys\[0\] has it\)`},
		{"duplicate key", "keys:\n  - name: a\n    key: sk-gw-0123456789abcdef\n  - name: b\n    key: sk-gw-0123456789abcdef\n", `keys\[1\]\.key: the same key as keys\[0\]`},
		{"duplicate key by hash", "keys:\n  - name: a\n    key: sk-gw-0123456789abcdef\n  - name: b\n    sha256: " + h + "\n", `keys\[1\]\.sha256: the same key as keys\[0\]`},
		{"not a mapping", "- a\n- b\n", `.+`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, err := ParseKeyFile([]byte(tc.data))
			if err == nil {
				t.Fatalf("parsed: %+v", f)
			}
			if !errors.Is(err, ErrKeyFile) {
				t.Errorf("error %v does not wrap ErrKeyFile", err)
			}
			if !regexp.MustCompile(tc.want).MatchString(err.Error()) {
				t.Errorf("error %q, want it to match %q", err, tc.want)
			}
		})
	}
}

func TestLoadKeyFile(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "keys.yaml")
	if err := os.WriteFile(p, []byte("keys:\n  - name: a\n    key: sk-gw-0123456789abcdef\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadKeyFile(p); err != nil {
		t.Errorf("LoadKeyFile: %v", err)
	}
	if _, err := LoadKeyFile(filepath.Join(dir, "absent.yaml")); err == nil || !strings.Contains(err.Error(), "absent.yaml") {
		t.Errorf("absent file: %v", err)
	}
	bad := filepath.Join(dir, "bad.yaml")
	os.WriteFile(bad, []byte("keys: []\n"), 0o600)
	if _, err := LoadKeyFile(bad); err == nil || !strings.Contains(err.Error(), bad) || !errors.Is(err, ErrKeyFile) {
		t.Errorf("bad file: %v", err)
	}
}

func TestNewKey(t *testing.T) {
	s1, h1 := NewKey()
	s2, _ := NewKey()
	if !strings.HasPrefix(s1, KeyPrefix) || len(s1) != len(KeyPrefix)+43 {
		t.Errorf("key %q: want %s and 43 base64url characters", s1, KeyPrefix)
	}
	if s1 == s2 {
		t.Error("two keys alike")
	}
	if h1 != sha256Hex(s1) {
		t.Errorf("hash %s is not the key's SHA-256", h1)
	}
}

func FuzzParseKeyFile(f *testing.F) {
	f.Add([]byte(strings.Replace(goodKeyFile, "%HASH%", sha256Hex("x"), 1)))
	f.Add([]byte(`{"keys":[{"name":"j","key":"sk-gw-jjjjjjjjjjjjjjjj"}]}`))
	f.Add([]byte("keys:\n  - name: a\n    key: sk-gw-0123456789abcdef\n    models: [m, m]\n"))
	f.Add([]byte("keys: [{name: a, sha256: !!binary x}]"))
	f.Add([]byte("{"))
	f.Fuzz(func(t *testing.T, data []byte) {
		kf, err := ParseKeyFile(data)
		if err != nil {
			if !errors.Is(err, ErrKeyFile) {
				t.Fatalf("error %v does not wrap ErrKeyFile", err)
			}
			return
		}
		if len(kf.byHash) == 0 || len(kf.byHash) != len(kf.names) {
			t.Fatalf("%d keys for %d names", len(kf.byHash), len(kf.names))
		}
		seen := map[string]bool{}
		for _, k := range kf.byHash {
			if !keyNameRE.MatchString(k.Name) || seen[k.Name] || k.RequestsPerMinute < 0 || k.TokensPerMinute < 0 {
				t.Fatalf("accepted %+v", k)
			}
			seen[k.Name] = true
		}
	})
}

// TestREADMEKeyFile: the key file the README shows parses.
func TestREADMEKeyFile(t *testing.T) {
	b, err := os.ReadFile("../../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)```yaml\n(keys:.*?)```").FindSubmatch(b)
	if m == nil {
		t.Fatal("the README shows no key file")
	}
	kf, err := ParseKeyFile(m[1])
	if err != nil {
		t.Fatalf("the README's key file: %v", err)
	}
	if _, ok := kf.Lookup("sk-gw-example-key-do-not-use-0001"); !ok {
		t.Error("the README's key file does not admit the key its hash is of")
	}
}
