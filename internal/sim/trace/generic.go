package trace

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"time"
)

// The generic format's fields, as CSV columns and JSON keys:
//
//	id          job name (default j<line>)
//	submit      required: seconds since any origin, or an RFC 3339 /
//	            "YYYY-MM-DD HH:MM:SS" time (all rows alike)
//	duration    required: seconds, or a Go duration such as "2h30m"
//	gpus        required: GPUs the job asks for
//	gpu_milli   share of each GPU in thousandths (default 1000)
//	cpu_milli   host CPU in thousandths of a core
//	memory_mib  host memory
//	gpu_model   allowed GPU models, separated by '|'
//	queue, user tenant line and owner
var genericRequired = []string{"submit", "duration", "gpus"}
var genericOptional = []string{"id", "gpu_milli", "cpu_milli", "memory_mib", "gpu_model", "queue", "user"}

// ReadCSV reads gangway's generic CSV trace (see the field list above).
// Unknown columns are errors, so a misspelt column is never ignored.
func ReadCSV(r io.Reader, src string, opt Options) (*Trace, error) {
	t, err := newTable(r, src, genericRequired, genericOptional, true)
	if err != nil {
		return nil, err
	}
	b := genericBuilder{src: src, opt: opt}
	for {
		ok, err := t.next()
		if err != nil {
			return nil, err
		}
		if !ok {
			break
		}
		row := genericRow{line: t.line}
		for _, k := range append(append([]string(nil), genericRequired...), genericOptional...) {
			if t.has(k) {
				i := t.cols[k]
				if i < len(t.rec) {
					_, col := t.r.FieldPos(i)
					row.set(k, strings.TrimSpace(t.rec[i]), col, false)
				}
			}
		}
		if err := b.add(&row); err != nil {
			return nil, err
		}
	}
	return b.done()
}

// ReadJSONL reads gangway's generic trace as JSON lines: one object per
// line with the fields listed above; blank lines and lines starting with
// '#' are skipped. Unknown keys are errors.
func ReadJSONL(r io.Reader, src string, opt Options) (*Trace, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	b := genericBuilder{src: src, opt: opt}
	line := 0
	for sc.Scan() {
		line++
		raw := sc.Bytes()
		trim := bytes.TrimSpace(raw)
		if len(trim) == 0 || trim[0] == '#' {
			continue
		}
		row, err := decodeJSONRow(raw, src, line)
		if err != nil {
			return nil, err
		}
		if err := b.add(row); err != nil {
			return nil, err
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read %s line %d: %w", src, line+1, err)
	}
	return b.done()
}

func decodeJSONRow(raw []byte, src string, line int) (*genericRow, error) {
	var obj map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&obj); err != nil {
		col := 0
		var se *json.SyntaxError
		var te *json.UnmarshalTypeError
		switch {
		case errors.As(err, &se):
			col = int(se.Offset)
		case errors.As(err, &te):
			col = int(te.Offset)
			err = errors.New("want one JSON object per line")
		}
		return nil, &ParseError{Source: src, Line: line, Column: col, Err: err}
	}
	if obj == nil {
		return nil, &ParseError{Source: src, Line: line, Column: 1, Err: errors.New("want one JSON object per line, got null")}
	}
	if dec.More() {
		return nil, &ParseError{Source: src, Line: line, Column: int(dec.InputOffset()) + 1, Err: errors.New("more than one JSON value on the line")}
	}
	known := map[string]bool{}
	for _, k := range genericRequired {
		known[k] = true
	}
	for _, k := range genericOptional {
		known[k] = true
	}
	row := &genericRow{line: line}
	for k, v := range obj {
		col := keyColumn(raw, k)
		if !known[k] {
			return nil, &ParseError{Source: src, Line: line, Column: col, Field: k,
				Err: fmt.Errorf("unknown key (known: %s)", strings.Join(append(append([]string(nil), genericRequired...), genericOptional...), ", "))}
		}
		var s string
		quoted := false
		switch {
		case len(v) > 0 && v[0] == '"':
			if err := json.Unmarshal(v, &s); err != nil {
				return nil, &ParseError{Source: src, Line: line, Column: col, Field: k, Err: err}
			}
			quoted = true
		case string(v) == "null":
			continue
		case len(v) > 0 && (v[0] == '-' || (v[0] >= '0' && v[0] <= '9')):
			s = string(v)
		default:
			return nil, &ParseError{Source: src, Line: line, Column: col, Field: k, Err: fmt.Errorf("want a number or a string, got %s", truncate(string(v), 40))}
		}
		row.set(k, s, col, quoted)
	}
	return row, nil
}

// keyColumn finds the 1-based column of "key" in a JSON line.
func keyColumn(raw []byte, key string) int {
	q, _ := json.Marshal(key)
	if i := bytes.Index(raw, q); i >= 0 {
		return i + 1
	}
	return 0
}

type genericField struct {
	val    string
	col    int
	quoted bool
	set    bool
}

type genericRow struct {
	line   int
	fields map[string]genericField
}

func (r *genericRow) set(k, v string, col int, quoted bool) {
	if r.fields == nil {
		r.fields = map[string]genericField{}
	}
	r.fields[k] = genericField{val: v, col: col, quoted: quoted, set: true}
}

type genericBuilder struct {
	src  string
	opt  Options
	out  Trace
	abs  []float64
	wall int // 0 unknown, 1 wall-clock, -1 seconds
	ids  map[string]int
}

func (b *genericBuilder) fail(row *genericRow, k string, format string, args ...any) error {
	return &ParseError{Source: b.src, Line: row.line, Column: row.fields[k].col, Field: k, Err: fmt.Errorf(format, args...)}
}

func (b *genericBuilder) num(row *genericRow, k string, def, min, max float64, integer bool) (float64, error) {
	f, ok := row.fields[k]
	if !ok || f.val == "" {
		if math.IsNaN(def) {
			return 0, &ParseError{Source: b.src, Line: row.line, Field: k, Err: errors.New("required field missing")}
		}
		return def, nil
	}
	v, err := strconv.ParseFloat(f.val, 64)
	if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
		return 0, b.fail(row, k, "%q is not a number", truncate(f.val, 40))
	}
	if integer && v != math.Trunc(v) {
		return 0, b.fail(row, k, "%v is not an integer", v)
	}
	if v < min || v > max {
		return 0, b.fail(row, k, "%v is out of range [%v, %v]", v, min, max)
	}
	return v, nil
}

func (b *genericBuilder) add(row *genericRow) error {
	j := Job{Line: row.line}
	sub, ok := row.fields["submit"]
	if !ok || sub.val == "" {
		return &ParseError{Source: b.src, Line: row.line, Field: "submit", Err: errors.New("required field missing")}
	}
	var at float64
	if v, err := strconv.ParseFloat(sub.val, 64); err == nil && !sub.quoted {
		if b.wall == 1 {
			return b.fail(row, "submit", "seconds, but earlier rows hold times")
		}
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return b.fail(row, "submit", "%q is not a number", sub.val)
		}
		b.wall = -1
		at = v
	} else {
		ts, err := parseInstant(sub.val)
		if err != nil {
			return b.fail(row, "submit", "%v", err)
		}
		if b.wall == -1 {
			return b.fail(row, "submit", "a time, but earlier rows hold seconds")
		}
		b.wall = 1
		if !b.opt.inWindow(ts) {
			b.out.Skipped++
			return nil
		}
		at = unixSeconds(ts)
	}
	d, ok := row.fields["duration"]
	if !ok || d.val == "" {
		return &ParseError{Source: b.src, Line: row.line, Field: "duration", Err: errors.New("required field missing")}
	}
	if v, err := strconv.ParseFloat(d.val, 64); err == nil {
		if v < 0 || math.IsNaN(v) || math.IsInf(v, 0) {
			return b.fail(row, "duration", "%v: want a finite number of seconds ≥ 0", v)
		}
		j.Duration = v
	} else if dd, err := time.ParseDuration(d.val); err == nil && dd >= 0 {
		j.Duration = dd.Seconds()
	} else {
		return b.fail(row, "duration", "%q is neither seconds nor a duration like 2h30m", truncate(d.val, 40))
	}
	g, err := b.num(row, "gpus", math.NaN(), 0, maxGPUs, true)
	if err != nil {
		return err
	}
	j.GPUs = int(g)
	m, err := b.num(row, "gpu_milli", 1000, 1, 1000, true)
	if err != nil {
		return err
	}
	j.GPUMilli = int(m)
	if j.GPUMilli < 1000 && j.GPUs != 1 {
		return b.fail(row, "gpu_milli", "%d with gpus %d: only single-GPU jobs may share a GPU", j.GPUMilli, j.GPUs)
	}
	c, err := b.num(row, "cpu_milli", 0, 0, 1<<40, true)
	if err != nil {
		return err
	}
	j.CPUMilli = int64(c)
	mem, err := b.num(row, "memory_mib", 0, 0, 1<<40, true)
	if err != nil {
		return err
	}
	j.MemoryMiB = int64(mem)
	if mdl := row.fields["gpu_model"].val; mdl != "" {
		for _, s := range strings.Split(mdl, "|") {
			if s = strings.TrimSpace(s); s == "" {
				return b.fail(row, "gpu_model", "empty model in %q", mdl)
			}
			j.GPUModels = append(j.GPUModels, s)
		}
	}
	j.Queue = row.fields["queue"].val
	j.User = row.fields["user"].val
	j.ID = row.fields["id"].val
	if j.ID == "" {
		j.ID = "j" + strconv.Itoa(row.line)
	}
	if b.ids == nil {
		b.ids = map[string]int{}
	}
	if prev, dup := b.ids[j.ID]; dup {
		return b.fail(row, "id", "%q already used on line %d", j.ID, prev)
	}
	b.ids[j.ID] = row.line
	if j.GPUs == 0 && !b.opt.KeepCPUJobs {
		b.out.Skipped++
		return nil
	}
	b.out.Jobs = append(b.out.Jobs, j)
	b.abs = append(b.abs, at)
	return nil
}

func (b *genericBuilder) done() (*Trace, error) {
	t, err := finish(&b.out, b.abs, b.wall == 1)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", b.src, err)
	}
	return t, nil
}

// WriteCSV writes jobs in the generic CSV format that ReadCSV reads.
func WriteCSV(w io.Writer, jobs []Job) error {
	bw := bufio.NewWriter(w)
	fmt.Fprintln(bw, "id,submit,duration,gpus,gpu_milli,cpu_milli,memory_mib,gpu_model,queue,user")
	for _, j := range jobs {
		m := j.GPUMilli
		if m == 0 {
			m = 1000
		}
		fmt.Fprintf(bw, "%s,%s,%s,%d,%d,%d,%d,%s,%s,%s\n", csvQuote(j.ID),
			strconv.FormatFloat(j.Submit, 'f', -1, 64), strconv.FormatFloat(j.Duration, 'f', -1, 64),
			j.GPUs, m, j.CPUMilli, j.MemoryMiB, csvQuote(strings.Join(j.GPUModels, "|")), csvQuote(j.Queue), csvQuote(j.User))
	}
	return bw.Flush()
}

func csvQuote(s string) string {
	if strings.ContainsAny(s, ",\"\n\r") || strings.TrimSpace(s) != s {
		return `"` + strings.ReplaceAll(s, `"`, `""`) + `"`
	}
	return s
}
