// Package cmdkit is what every gangway command and benchmark shares for
// its command line: one output vocabulary (-o table|json|yaml) and its
// printer, and flag sets that print usage one way and accept flags after
// positional arguments. YAML output is the JSON output re-spelled: the
// same field names in the same order, integers as integers. Commands whose
// output is one table also take -o csv (OutputFlagCSV, WriteCSV), and
// listings with more columns to show -o wide (OutputFlagWide). Every -o
// takes jsonpath=TEMPLATE (package jsonpath's subset of kubectl's).
//
// It imports the standard library, github.com/goccy/go-yaml and
// base/jsonpath.
package cmdkit

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/goccy/go-yaml"

	"github.com/gangway/gangway/internal/base/jsonpath"
)

// Format is an output format.
type Format string

// The formats every command accepts with -o.
const (
	Table Format = "table"
	JSON  Format = "json"
	YAML  Format = "yaml"
	// CSV is one table as comma-separated values (RFC 4180): a header row
	// of fixed column names, then a row per item. Only the commands that
	// ask for it with OutputFlagCSV take it.
	CSV Format = "csv"
	// Wide is the table with more columns. Only the commands that ask
	// for it with OutputFlagWide take it; their table writer reads it.
	Wide Format = "wide"
)

// jsonPathPrefix begins a -o jsonpath=TEMPLATE format.
const jsonPathPrefix = "jsonpath="

// JSONPath is the template of a jsonpath=TEMPLATE format, and whether f
// is one.
func (f Format) JSONPath() (string, bool) {
	return strings.CutPrefix(string(f), jsonPathPrefix)
}

// errFormat says which formats there are.
var errFormat = errors.New("want table, json or yaml")

// ParseFormat reads a -o value. "text", which some commands used to take,
// is read as table.
func ParseFormat(s string) (Format, error) {
	switch Format(strings.ToLower(s)) {
	case Table, "text":
		return Table, nil
	case JSON:
		return JSON, nil
	case YAML:
		return YAML, nil
	}
	if len(s) >= len(jsonPathPrefix)-1 && strings.EqualFold(s[:len(jsonPathPrefix)-1], "jsonpath") {
		tmpl, ok := strings.CutPrefix(s[len(jsonPathPrefix)-1:], "=")
		if !ok || tmpl == "" {
			return "", fmt.Errorf("-o %q: want jsonpath=TEMPLATE, as jsonpath='{.items[*].id}'", s)
		}
		if _, err := jsonpath.Parse(tmpl); err != nil {
			return "", fmt.Errorf("-o %q: %w", s, err)
		}
		return Format(jsonPathPrefix + tmpl), nil
	}
	return "", fmt.Errorf("-o %q: %w", s, errFormat)
}

// String implements flag.Value.
func (f *Format) String() string { return string(*f) }

// Set implements flag.Value.
func (f *Format) Set(s string) error {
	v, err := ParseFormat(s)
	if err != nil {
		if _, tmpl := strings.CutPrefix(strings.ToLower(s), "jsonpath"); tmpl {
			return err // what is wrong with the template
		}
		return errFormat // the flag package names the flag and the value
	}
	*f = v
	return nil
}

// Type names the value in pflag's usage.
func (f *Format) Type() string { return "format" }

// OutputFlag adds -o to fs, defaulting to table, and returns where the
// parsed value lands.
func OutputFlag(fs *flag.FlagSet) *Format {
	f := Table
	fs.Var(&f, "o", "output format: table, json, yaml or jsonpath=TEMPLATE")
	return &f
}

// OutputFlagCSV is OutputFlag for a command whose output is one table: -o
// also takes csv.
func OutputFlagCSV(fs *flag.FlagSet) *Format {
	f := Table
	fs.Var(csvFormat{f: &f}, "o", "output format: table, json, yaml, csv or jsonpath=TEMPLATE")
	return &f
}

// OutputFlagWide is OutputFlagCSV for a listing that has more columns to
// show: -o also takes wide.
func OutputFlagWide(fs *flag.FlagSet) *Format {
	f := Table
	fs.Var(csvFormat{f: &f, wide: true}, "o", "output format: table, wide (more columns), json, yaml, csv or jsonpath=TEMPLATE")
	return &f
}

// csvFormat is a Format flag that also takes csv, and with wide, wide.
type csvFormat struct {
	f    *Format
	wide bool
}

func (c csvFormat) String() string {
	if c.f == nil {
		return ""
	}
	return string(*c.f)
}

func (c csvFormat) Set(s string) error {
	if strings.EqualFold(s, string(CSV)) {
		*c.f = CSV
		return nil
	}
	if c.wide && strings.EqualFold(s, string(Wide)) {
		*c.f = Wide
		return nil
	}
	if err := c.f.Set(s); err != nil {
		if errors.Is(err, errFormat) && c.wide {
			return errors.New("want table, wide, json, yaml or csv")
		} else if errors.Is(err, errFormat) {
			return errors.New("want table, json, yaml or csv")
		}
		return err
	}
	return nil
}

// WriteCSV writes header and then rows as CSV with encoding/csv.
func WriteCSV(w io.Writer, header []string, rows [][]string) error {
	cw := csv.NewWriter(w)
	if err := cw.Write(header); err != nil {
		return err
	}
	if err := cw.WriteAll(rows); err != nil { // flushes
		return err
	}
	return cw.Error()
}

// Print writes v to w in format f; table calls the command's own table
// writer (nil: the format is refused for this command).
func Print(w io.Writer, f Format, v any, table func(io.Writer) error) error {
	switch f {
	case JSON:
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	case YAML:
		y, err := MarshalYAML(v)
		if err != nil {
			return err
		}
		_, err = w.Write(y)
		return err
	case Table, Wide, "":
		if table == nil {
			return errors.New("this command has no table output: use -o json or -o yaml")
		}
		return table(w)
	case CSV:
		return errors.New("this command has no CSV output: use -o json or -o yaml")
	}
	if tmpl, ok := f.JSONPath(); ok {
		return printJSONPath(w, tmpl, v)
	}
	return fmt.Errorf("unknown output format %q", f)
}

// printJSONPath writes v through a jsonpath template: v as its JSON, a
// list as {"items": [...]}, as kubectl's lists are.
func printJSONPath(w io.Writer, tmpl string, v any) error {
	t, err := jsonpath.Parse(tmpl)
	if err != nil {
		return err
	}
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var data any
	if err := dec.Decode(&data); err != nil {
		return err
	}
	if l, ok := data.([]any); ok {
		data = map[string]any{"items": l}
	}
	return t.Execute(w, data)
}

// MarshalYAML encodes v as YAML with its JSON field names and order (json
// tags, omitempty and time formats apply as for the API) and integers
// written as integers.
func MarshalYAML(v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	tree, err := ordered(dec)
	if err != nil {
		return nil, err
	}
	return yaml.Marshal(tree)
}

// ordered reads one JSON value from dec, keeping object keys in order
// (yaml.MapSlice) and numbers as int64 where they are integers.
func ordered(dec *json.Decoder) (any, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			m := yaml.MapSlice{}
			for dec.More() {
				k, err := dec.Token()
				if err != nil {
					return nil, err
				}
				v, err := ordered(dec)
				if err != nil {
					return nil, err
				}
				m = append(m, yaml.MapItem{Key: k, Value: v})
			}
			_, err := dec.Token() // '}'
			return m, err
		case '[':
			s := []any{}
			for dec.More() {
				v, err := ordered(dec)
				if err != nil {
					return nil, err
				}
				s = append(s, v)
			}
			_, err := dec.Token() // ']'
			return s, err
		}
	case json.Number:
		if i, err := t.Int64(); err == nil {
			return i, nil
		}
		return t.Float64()
	}
	return tok, nil
}

// NewFlags returns a flag set for `gangway NAME ARGS` that reports errors
// and prints usage on stderr.
func NewFlags(stderr io.Writer, name, args string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: gangway %s %s\n\nFlags:\n", name, args)
		fs.PrintDefaults()
	}
	return fs
}

// Parse parses args with fs, allowing flags after positional arguments
// ("logs 3 -f"), and returns the positional ones. Everything after "--" is
// returned as is, "--" included, so a caller can tell a command apart. It
// returns flag.ErrHelp for -h and the flag package's error otherwise
// (already printed to fs's output).
func Parse(fs *flag.FlagSet, args []string) ([]string, error) {
	var tail []string
	for i, a := range args {
		if a == "--" {
			args, tail = args[:i], args[i:]
			break
		}
	}
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		args = fs.Args()
		if len(args) == 0 {
			return append(pos, tail...), nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}

// PrintItem writes v as one item of a stream that a command prints as it
// goes (a row per policy, per packer): with json a line of its own (JSON
// lines), with yaml a document of its own, with jsonpath the template
// applied to it. It writes nothing for table,
// whose rows the command prints itself.
func PrintItem(w io.Writer, f Format, v any) error {
	switch f {
	case JSON:
		return json.NewEncoder(w).Encode(v)
	case YAML:
		y, err := MarshalYAML(v)
		if err != nil {
			return err
		}
		if _, err := io.WriteString(w, "---\n"); err != nil {
			return err
		}
		_, err = w.Write(y)
		return err
	}
	if tmpl, ok := f.JSONPath(); ok {
		return printJSONPath(w, tmpl, v)
	}
	return nil
}

// Exit statuses of a command line that could not be parsed.
const (
	ExitHelp  = 0 // -h: usage was asked for and printed
	ExitUsage = 2 // a bad flag or argument, already reported
)

// ParseArgs is Parse for a command's main: it returns the positional
// arguments, or ok false with the exit status to return (ExitHelp after
// -h, ExitUsage after an error the flag package has printed).
func ParseArgs(fs *flag.FlagSet, args []string) (pos []string, code int, ok bool) {
	pos, err := Parse(fs, args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		return nil, ExitHelp, false
	case err != nil:
		return nil, ExitUsage, false
	}
	return pos, 0, true
}

// ParseNoArgs is ParseArgs for a command that takes flags only: a
// positional argument is reported on fs's output as unexpected.
func ParseNoArgs(fs *flag.FlagSet, args []string) (code int, ok bool) {
	pos, code, ok := ParseArgs(fs, args)
	if ok && len(pos) > 0 {
		fmt.Fprintf(fs.Output(), "gangway %s: unexpected argument %q\n", fs.Name(), pos[0])
		return ExitUsage, false
	}
	return code, ok
}
