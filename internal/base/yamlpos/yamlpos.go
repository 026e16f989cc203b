// Package yamlpos words goccy/go-yaml's errors for people: one line
// "[line:column] key: problem" with the types in YAML's terms, and the
// position of a field found by path, for errors found after decoding
// (a duplicate name, a value out of range). The planner's catalog and the
// gateway's key file both report through it.
//
// It imports the standard library and github.com/goccy/go-yaml.
package yamlpos

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/goccy/go-yaml"
	"github.com/goccy/go-yaml/parser"
)

var (
	posRE  = regexp.MustCompile(`^\[(\d+):(\d+)\] `)
	typeRE = regexp.MustCompile(`cannot unmarshal (\S+) into Go (?:struct field \S+|value) of type (\S+)`)
)

// Describe turns a decoder error on data into "[line:col] key: problem",
// naming the key on that line and the types in YAML terms.
func Describe(data []byte, err error) string {
	msg := yaml.FormatError(err, false, false)
	msg = strings.TrimSpace(strings.SplitN(msg, "\n", 2)[0])
	m := posRE.FindStringSubmatch(msg)
	if m == nil {
		return msg
	}
	rest := msg[len(m[0]):]
	if t := typeRE.FindStringSubmatch(rest); t != nil {
		rest = fmt.Sprintf("want %s, got %s", t[2], t[1])
	}
	line, _ := strconv.Atoi(m[1])
	lines := strings.Split(string(data), "\n")
	if line >= 1 && line <= len(lines) {
		text := strings.TrimLeft(strings.TrimSpace(lines[line-1]), "- ")
		if key, _, ok := strings.Cut(text, ":"); ok && !strings.ContainsAny(key, "{}[], ") && key != "" && !strings.Contains(rest, key) {
			rest = key + ": " + rest
		}
	}
	return m[0] + rest
}

// Of returns "[line:column] " of field of the entry at path (a YAML path
// such as "$.gpus[2]"), or of the entry when the field is absent or "",
// or "" when neither can be found.
func Of(data []byte, path, field string) string {
	file, err := parser.ParseBytes(data, 0)
	if err != nil {
		return ""
	}
	for _, p := range []string{path + "." + field, path} {
		if field == "" && p != path {
			continue
		}
		yp, err := yaml.PathString(p)
		if err != nil {
			continue
		}
		n, err := yp.FilterFile(file)
		if err != nil || n == nil || n.GetToken() == nil {
			continue
		}
		pos := n.GetToken().Position
		return fmt.Sprintf("[%d:%d] ", pos.Line, pos.Column)
	}
	return ""
}
