package gateway

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/gangway/gangway/internal/base/yamlpos"
	"github.com/goccy/go-yaml"
)

// Keys says which API keys may call the gateway. The gateway calls Lookup
// once for every request that names a key (Authorization: Bearer, or
// x-api-key), from many goroutines at once: it must be safe for
// concurrent use and must not block. Config.Keys nil means no
// authentication.
type Keys interface {
	// Lookup returns what key may do, or false for a key it does not
	// know. Implementations compare secrets by their SHA-256 (KeyFile) or
	// in constant time, never with ==.
	Lookup(key string) (KeyInfo, bool)
}

// KeyInfo is one API key's identity and limits. The gateway keeps one
// pair of rate limiters and one usage record per Name: two keys with the
// same name share them.
type KeyInfo struct {
	// Name identifies the key in metrics (label key), logs and Usage; it
	// is never the secret.
	Name string
	// RequestsPerMinute bounds the requests the key may send: a token
	// bucket that holds a minute's worth and refills evenly. 0: no limit.
	RequestsPerMinute int
	// TokensPerMinute bounds prompt plus completion tokens the same way.
	// A request reserves its prompt tokens and its max_tokens (or the
	// gateway's DefaultMaxTokens) when admitted, and the reservation is
	// settled to the completion tokens the engine produced when it ends.
	// 0: no limit.
	TokensPerMinute int
	// Models are the models the key may use; empty: all.
	Models []string
}

// allows reports whether the key may use model.
func (k KeyInfo) allows(model string) bool {
	return len(k.Models) == 0 || slices.Contains(k.Models, model)
}

// KeyPrefix starts every key NewKey makes.
const KeyPrefix = "sk-gw-"

// NewKey makes a random API key (KeyPrefix and 32 bytes from crypto/rand,
// base64url) and its SHA-256 in hex, for a key file's sha256 field: the
// secret goes to the client, the hash into the file.
func NewKey() (secret, sha256hex string) {
	b := make([]byte, 32)
	rand.Read(b) // never fails (crypto/rand since Go 1.24)
	secret = KeyPrefix + base64.RawURLEncoding.EncodeToString(b)
	sum := sha256.Sum256([]byte(secret))
	return secret, hex.EncodeToString(sum[:])
}

// KeyFile is a fixed set of keys read from a file (LoadKeyFile). It holds
// each key's SHA-256, never its secret, and looks keys up by hash: a
// lookup's time does not depend on how much of a guess matches a key.
type KeyFile struct {
	byHash map[[sha256.Size]byte]KeyInfo
	names  []string
}

var _ Keys = (*KeyFile)(nil)

// Lookup implements Keys.
func (f *KeyFile) Lookup(key string) (KeyInfo, bool) {
	k, ok := f.byHash[sha256.Sum256([]byte(key))]
	return k, ok
}

// Names returns the keys' names in file order.
func (f *KeyFile) Names() []string { return slices.Clone(f.names) }

// MaxKeyFileBytes bounds a key file (goccy/go-yaml allocates some tens of
// bytes per byte it reads).
const MaxKeyFileBytes = 1 << 20

// MinKeyLength is the shortest plaintext key a key file may hold.
const MinKeyLength = 16

// ErrKeyFile is wrapped by every error that a key file's contents cause.
var ErrKeyFile = errors.New("gateway: invalid key file")

// LoadKeyFile reads a key file (see ParseKeyFile).
func LoadKeyFile(path string) (*KeyFile, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read key file: %w", err)
	}
	f, err := ParseKeyFile(data)
	if err != nil {
		return nil, fmt.Errorf("key file %s: %w", path, err)
	}
	return f, nil
}

// keyFileDoc is a key file's wire form.
type keyFileDoc struct {
	Keys []keyEntry `yaml:"keys"`
}

type keyEntry struct {
	Name              string   `yaml:"name"`
	Key               string   `yaml:"key"`
	SHA256            string   `yaml:"sha256"`
	RequestsPerMinute int      `yaml:"requestsPerMinute"`
	TokensPerMinute   int      `yaml:"tokensPerMinute"`
	Models            []string `yaml:"models"`
}

var keyNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$`)

// ParseKeyFile parses a key file, YAML or JSON:
//
//	keys:
//	  - name: team-a                 # letters, digits, . _ -; unique
//	    sha256: 9f86d0...            # hex SHA-256 of the key (NewKey prints both)
//	    requestsPerMinute: 600       # 0 or absent: no limit
//	    tokensPerMinute: 200000      # prompt + completion; 0 or absent: no limit
//	    models: [llama3-8b]          # absent or empty: every model
//	  - name: ci
//	    key: sk-gw-...               # the plaintext key instead (hashed on load)
//
// Decoding is strict: an unknown field, a wrong type or an invalid value
// is an error that wraps ErrKeyFile and names the field
// ("keys[2].requestsPerMinute") with its line and column. Names and keys
// must be unique.
func ParseKeyFile(data []byte) (f *KeyFile, err error) {
	// go-yaml v1.19.2 panics on some malformed input (see
	// planner.ParseCatalog); report it as the malformed input it is.
	defer func() {
		if r := recover(); r != nil {
			f, err = nil, fmt.Errorf("%w: malformed YAML (the decoder failed: %v)", ErrKeyFile, r)
		}
	}()
	if len(data) > MaxKeyFileBytes {
		return nil, fmt.Errorf("%w: %d bytes; at most %d", ErrKeyFile, len(data), MaxKeyFileBytes)
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, fmt.Errorf("%w: empty file; want a keys: list", ErrKeyFile)
	}
	var doc keyFileDoc
	if err := yaml.UnmarshalWithOptions(data, &doc, yaml.Strict()); err != nil {
		return nil, fmt.Errorf("%w: %s", ErrKeyFile, yamlpos.Describe(data, err))
	}
	if len(doc.Keys) == 0 {
		return nil, fmt.Errorf("%w: keys: no keys (a gateway with a key file and no keys would refuse everyone)", ErrKeyFile)
	}
	f = &KeyFile{byHash: make(map[[sha256.Size]byte]KeyInfo, len(doc.Keys))}
	byName := map[string]int{}
	hashAt := map[[sha256.Size]byte]int{}
	for i, e := range doc.Keys {
		field, msg := e.check()
		var sum [sha256.Size]byte
		if msg == "" {
			sum = e.sum()
			if j, dup := byName[e.Name]; dup {
				field, msg = "name", fmt.Sprintf("duplicate name %q (keys[%d] has it)", e.Name, j)
			} else if j, dup := hashAt[sum]; dup {
				field, msg = "key", fmt.Sprintf("the same key as keys[%d]", j)
				if e.Key == "" {
					field = "sha256"
				}
			}
		}
		if msg != "" {
			path := fmt.Sprintf("keys[%d]", i)
			return nil, fmt.Errorf("%w: %s%s.%s: %s", ErrKeyFile, yamlpos.Of(data, "$."+path, field), path, field, msg)
		}
		byName[e.Name], hashAt[sum] = i, i
		f.byHash[sum] = KeyInfo{Name: e.Name, RequestsPerMinute: e.RequestsPerMinute, TokensPerMinute: e.TokensPerMinute, Models: e.Models}
		f.names = append(f.names, e.Name)
	}
	return f, nil
}

// check returns the first invalid field of e and what is wrong with it.
func (e keyEntry) check() (field, msg string) {
	switch {
	case e.Name == "":
		return "name", "required"
	case !keyNameRE.MatchString(e.Name):
		return "name", fmt.Sprintf("%q: want 1 to 63 letters, digits, '.', '_' or '-', starting with a letter or digit", e.Name)
	case e.Key == "" && e.SHA256 == "":
		return "sha256", "one of key or sha256 is required"
	case e.Key != "" && e.SHA256 != "":
		return "key", "give key or sha256, not both"
	case e.Key != "" && len(e.Key) < MinKeyLength:
		return "key", fmt.Sprintf("%d characters; at least %d (NewKey makes %d)", len(e.Key), MinKeyLength, len(KeyPrefix)+43)
	case e.Key != "" && strings.TrimSpace(e.Key) != e.Key:
		return "key", "has leading or trailing space"
	case e.SHA256 != "" && !isSHA256Hex(e.SHA256):
		return "sha256", fmt.Sprintf("want %d hex digits, got %q", 2*sha256.Size, e.SHA256)
	case e.RequestsPerMinute < 0:
		return "requestsPerMinute", "must not be negative (got " + strconv.Itoa(e.RequestsPerMinute) + "; 0: no limit)"
	case e.TokensPerMinute < 0:
		return "tokensPerMinute", "must not be negative (got " + strconv.Itoa(e.TokensPerMinute) + "; 0: no limit)"
	}
	seen := map[string]bool{}
	for j, m := range e.Models {
		switch {
		case m == "":
			return fmt.Sprintf("models[%d]", j), "empty model name"
		case seen[m]:
			return fmt.Sprintf("models[%d]", j), fmt.Sprintf("duplicate model %q", m)
		}
		seen[m] = true
	}
	return "", ""
}

// sum is e's key's SHA-256; e has passed check.
func (e keyEntry) sum() [sha256.Size]byte {
	if e.Key != "" {
		return sha256.Sum256([]byte(e.Key))
	}
	var s [sha256.Size]byte
	hex.Decode(s[:], []byte(strings.ToLower(e.SHA256)))
	return s
}

func isSHA256Hex(s string) bool {
	if len(s) != 2*sha256.Size {
		return false
	}
	_, err := hex.DecodeString(s)
	return err == nil
}
