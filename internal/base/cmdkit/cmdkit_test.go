package cmdkit

import (
	"bytes"
	"errors"
	"flag"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

type res struct {
	Name        string            `json:"name"`
	CPUs        float64           `json:"cpus"`
	MemoryBytes int64             `json:"memoryBytes"`
	Share       float64           `json:"share"`
	Note        string            `json:"note,omitempty"`
	Labels      map[string]string `json:"labels"`
	Started     time.Time         `json:"started"`
	Ranks       []int             `json:"ranks"`
	Quoted      string            `json:"quoted"`
}

func TestMarshalYAML(t *testing.T) {
	v := res{Name: "train", CPUs: 2, MemoryBytes: 85520809984, Share: 0.25,
		Labels:  map[string]string{"zone": "b", "rack": "a"},
		Started: time.Date(2026, 12, 2, 8, 0, 0, 0, time.UTC), Ranks: []int{0, 1}, Quoted: "123"}
	got, err := MarshalYAML(v)
	if err != nil {
		t.Fatal(err)
	}
	want := `name: train
cpus: 2
memoryBytes: 85520809984
share: 0.25
labels:
  rack: a
  zone: b
started: "2026-12-02T08:00:00Z"
ranks:
- 0
- 1
quoted: "123"
`
	if d := cmp.Diff(want, string(got)); d != "" {
		t.Errorf("YAML (-want +got):\n%s", d)
	}
}

func TestMarshalYAMLEmpty(t *testing.T) {
	for _, tc := range []struct {
		name string
		v    any
		want string
	}{
		{"nil slice", []int(nil), "null\n"},
		{"empty list", []int{}, "[]\n"},
		{"empty object", struct{}{}, "{}\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := MarshalYAML(tc.v)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}

func TestParseFormat(t *testing.T) {
	for in, want := range map[string]Format{"table": Table, "text": Table, "json": JSON, "YAML": YAML} {
		if got, err := ParseFormat(in); err != nil || got != want {
			t.Errorf("ParseFormat(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	_, err := ParseFormat("xml")
	if err == nil || !strings.Contains(err.Error(), `-o "xml": want table, json or yaml`) {
		t.Errorf("ParseFormat(xml) error = %v", err)
	}
}

func TestOutputFlag(t *testing.T) {
	var stderr bytes.Buffer
	fs := NewFlags(&stderr, "get", "jobs")
	o := OutputFlag(fs)
	if *o != Table {
		t.Fatalf("default = %q, want table", *o)
	}
	if _, err := Parse(fs, []string{"jobs", "-o", "yaml"}); err != nil || *o != YAML {
		t.Fatalf("-o yaml: %q, %v", *o, err)
	}
	fs = NewFlags(&stderr, "get", "jobs")
	OutputFlag(fs)
	if _, err := Parse(fs, []string{"-o", "csv"}); err == nil {
		t.Fatal("-o csv accepted")
	}
	if !strings.Contains(stderr.String(), `invalid value "csv" for flag -o: want table, json or yaml`) {
		t.Errorf("stderr = %q", stderr.String())
	}
}

func TestOutputFlagCSV(t *testing.T) {
	for _, tc := range []struct {
		arg  string
		want Format
	}{{"csv", CSV}, {"CSV", CSV}, {"json", JSON}, {"text", Table}} {
		fs := NewFlags(io.Discard, "get", "jobs")
		o := OutputFlagCSV(fs)
		if _, err := Parse(fs, []string{"-o", tc.arg}); err != nil || *o != tc.want {
			t.Errorf("-o %s: %q, %v; want %q", tc.arg, *o, err, tc.want)
		}
	}
	var stderr bytes.Buffer
	fs := NewFlags(&stderr, "get", "jobs")
	OutputFlagCSV(fs)
	if _, err := Parse(fs, []string{"-o", "xml"}); err == nil {
		t.Fatal("-o xml accepted")
	}
	if !strings.Contains(stderr.String(), `invalid value "xml" for flag -o: want table, json, yaml or csv`) {
		t.Errorf("stderr = %q", stderr.String())
	}
	fs = NewFlags(&stderr, "get", "jobs")
	OutputFlagCSV(fs)
	stderr.Reset()
	fs.PrintDefaults()
	if !strings.Contains(stderr.String(), "(default table)") {
		t.Errorf("usage does not show the default:\n%s", stderr.String())
	}
}

// TestWriteCSV: a header, then the rows, quoted where a field needs it,
// as encoding/csv reads them back.
func TestWriteCSV(t *testing.T) {
	var b bytes.Buffer
	rows := [][]string{{"7", "train, big", `say "hi"`}, {"8", "", "two\nlines"}}
	if err := WriteCSV(&b, []string{"ID", "NAME", "REASON"}, rows); err != nil {
		t.Fatal(err)
	}
	want := "ID,NAME,REASON\n7,\"train, big\",\"say \"\"hi\"\"\"\n8,,\"two\nlines\"\n"
	if b.String() != want {
		t.Errorf("got %q, want %q", b.String(), want)
	}
	if err := Print(&b, CSV, rows, nil); err == nil || !strings.Contains(err.Error(), "no CSV output") {
		t.Errorf("Print csv: %v; want an error saying there is no CSV output", err)
	}
}

func TestPrint(t *testing.T) {
	v := map[string]int{"a": 1}
	var b bytes.Buffer
	if err := Print(&b, JSON, v, nil); err != nil || b.String() != "{\n  \"a\": 1\n}\n" {
		t.Errorf("json: %q, %v", b.String(), err)
	}
	b.Reset()
	if err := Print(&b, Table, v, func(w io.Writer) error { _, err := io.WriteString(w, "A\n1\n"); return err }); err != nil || b.String() != "A\n1\n" {
		t.Errorf("table: %q, %v", b.String(), err)
	}
	if err := Print(&b, Table, v, nil); err == nil {
		t.Error("table without a table writer: no error")
	}
}

func TestParseInterspersed(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want []string
		f    bool
	}{
		{"flags after positionals", []string{"3", "-f"}, []string{"3"}, true},
		{"flags first", []string{"-f", "3"}, []string{"3"}, true},
		{"after -- untouched", []string{"--ranks", "-f", "--", "python", "-f"}, []string{"--", "python", "-f"}, true},
		{"none", nil, nil, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fs := NewFlags(io.Discard, "x", "")
			f := fs.Bool("f", false, "")
			fs.Bool("ranks", false, "")
			got, err := Parse(fs, tc.args)
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tc.want, got); d != "" || *f != tc.f {
				t.Errorf("positionals (-want +got): %s; -f = %v", d, *f)
			}
		})
	}
	fs := NewFlags(io.Discard, "x", "")
	if _, err := Parse(fs, []string{"-h"}); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("-h: %v, want flag.ErrHelp", err)
	}
}

func TestPrintItem(t *testing.T) {
	type row struct {
		Policy string  `json:"policy"`
		JCT    float64 `json:"avg_jct"`
	}
	rows := []row{{"fifo", 3600}, {"srtf", 12.5}}
	for _, tc := range []struct {
		f    Format
		want string
	}{
		{JSON, "{\"policy\":\"fifo\",\"avg_jct\":3600}\n{\"policy\":\"srtf\",\"avg_jct\":12.5}\n"},
		{YAML, "---\npolicy: fifo\navg_jct: 3600\n---\npolicy: srtf\navg_jct: 12.5\n"},
		{Table, ""},
	} {
		var b bytes.Buffer
		for _, r := range rows {
			if err := PrintItem(&b, tc.f, r); err != nil {
				t.Fatal(err)
			}
		}
		if b.String() != tc.want {
			t.Errorf("%s: got %q, want %q", tc.f, b.String(), tc.want)
		}
	}
}

func TestParseExitCodes(t *testing.T) {
	tests := []struct {
		name     string
		args     []string
		noArgs   bool
		wantCode int
		wantOK   bool
		stderr   string
	}{
		{"ok", []string{"-n", "3"}, true, 0, true, ""},
		{"help", []string{"-h"}, true, ExitHelp, false, "Usage: gangway bench x"},
		{"bad flag", []string{"--nope"}, true, ExitUsage, false, "flag provided but not defined: -nope"},
		{"bad value", []string{"-n", "many"}, true, ExitUsage, false, `invalid value "many" for flag -n`},
		{"stray argument", []string{"extra"}, true, ExitUsage, false, `gangway bench x: unexpected argument "extra"`},
		{"argument allowed", []string{"extra", "-n", "1"}, false, 0, true, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var stderr bytes.Buffer
			fs := NewFlags(&stderr, "bench x", "[-n N]")
			fs.Int("n", 0, "")
			var code int
			var ok bool
			if tc.noArgs {
				code, ok = ParseNoArgs(fs, tc.args)
			} else {
				_, code, ok = ParseArgs(fs, tc.args)
			}
			if code != tc.wantCode || ok != tc.wantOK || !strings.Contains(stderr.String(), tc.stderr) {
				t.Errorf("code %d ok %v stderr %q; want %d %v containing %q", code, ok, stderr.String(), tc.wantCode, tc.wantOK, tc.stderr)
			}
		})
	}
}

func TestOutputFlagWideAndJSONPath(t *testing.T) {
	for _, tc := range []struct {
		arg     string
		wide    bool
		want    Format
		wantErr string
	}{
		{"wide", true, Wide, ""},
		{"WIDE", true, Wide, ""},
		{"csv", true, CSV, ""},
		{"wide", false, "", "want table, json, yaml or csv"},
		{"xml", true, "", "want table, wide, json, yaml or csv"},
		{"jsonpath={.items[*].id}", true, "jsonpath={.items[*].id}", ""},
		{"JSONPath={.A}", false, "jsonpath={.A}", ""},
		{"jsonpath=", true, "", "want jsonpath=TEMPLATE"},
		{"jsonpath", true, "", "want jsonpath=TEMPLATE"},
		{"jsonpath={.items[x]}", true, "", "index [x]"},
		{"jsonpath={range .items[*]}", false, "", "{range} without an {end}"},
	} {
		var stderr bytes.Buffer
		fs := NewFlags(&stderr, "get", "jobs")
		var o *Format
		if tc.wide {
			o = OutputFlagWide(fs)
		} else {
			o = OutputFlagCSV(fs)
		}
		_, err := Parse(fs, []string{"-o", tc.arg})
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(stderr.String(), tc.wantErr) {
				t.Errorf("-o %s: %v, stderr %q; want an error naming %q", tc.arg, err, stderr.String(), tc.wantErr)
			}
			continue
		}
		if err != nil || *o != tc.want {
			t.Errorf("-o %s: %q, %v; want %q", tc.arg, *o, err, tc.want)
		}
	}
}

func TestPrintJSONPath(t *testing.T) {
	type item struct {
		ID   string `json:"id"`
		GPUs int    `json:"gpus"`
	}
	for _, tc := range []struct {
		name string
		v    any
		tmpl string
		want string
	}{
		{"a list is items", []item{{"1", 8}, {"2", 16}}, `{range .items[*]}{.id}={.gpus}{"\n"}{end}`, "1=8\n2=16\n"},
		{"one object", item{"7", 4}, "{.id} {.gpus}", "7 4"},
	} {
		var b bytes.Buffer
		if err := Print(&b, Format("jsonpath="+tc.tmpl), tc.v, nil); err != nil || b.String() != tc.want {
			t.Errorf("%s: %q, %v; want %q", tc.name, b.String(), err, tc.want)
		}
	}
}
