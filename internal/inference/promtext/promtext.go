// Package promtext writes and reads the Prometheus text exposition format
// (version 0.0.4), the format vLLM and gangway's gateway serve on /metrics.
//
// It is deliberately small: the engine simulator and the gateway write a
// handful of counters, gauges and histograms, and the gateway reads back
// plain samples. It imports only the standard library.
package promtext

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"
)

// ContentType is the media type of the text format.
const ContentType = "text/plain; version=0.0.4; charset=utf-8"

// Label is one name="value" pair.
type Label struct {
	Name, Value string
}

// Sample is one line of the exposition: a metric name, its labels and value.
type Sample struct {
	Name   string
	Labels []Label
	Value  float64
}

// Label returns the value of the named label, or "" when absent.
func (s Sample) Label(name string) string {
	for _, l := range s.Labels {
		if l.Name == name {
			return l.Value
		}
	}
	return ""
}

// Writer writes metric families. Errors are sticky: the first one is kept and
// returned by Err, later writes are skipped.
type Writer struct {
	w   *bufio.Writer
	err error
}

// NewWriter returns a Writer on w. Call Flush when done.
func NewWriter(w io.Writer) *Writer { return &Writer{w: bufio.NewWriter(w)} }

// Flush writes buffered data and returns the first error seen.
func (w *Writer) Flush() error {
	if w.err != nil {
		return w.err
	}
	w.err = w.w.Flush()
	return w.err
}

func (w *Writer) printf(format string, args ...any) {
	if w.err != nil {
		return
	}
	_, w.err = fmt.Fprintf(w.w, format, args...)
}

// Header writes the HELP and TYPE lines of a family. typ is counter, gauge,
// histogram or untyped.
func (w *Writer) Header(name, typ, help string) {
	w.printf("# HELP %s %s\n# TYPE %s %s\n", name, escapeHelp(help), name, typ)
}

// Sample writes one sample line.
func (w *Writer) Sample(name string, labels []Label, v float64) {
	w.printf("%s%s %s\n", name, formatLabels(labels), formatFloat(v))
}

// Gauge writes a one-sample gauge family.
func (w *Writer) Gauge(name, help string, labels []Label, v float64) {
	w.Header(name, "gauge", help)
	w.Sample(name, labels, v)
}

// Counter writes a one-sample counter family. name should end in _total.
func (w *Writer) Counter(name, help string, labels []Label, v float64) {
	w.Header(name, "counter", help)
	w.Sample(name, labels, v)
}

// Histogram writes the buckets, sum and count of h under name, without the
// family header (so several label sets can share one header).
func (w *Writer) Histogram(name string, labels []Label, h *Histogram) {
	var cum uint64
	for i, ub := range h.Bounds {
		cum += h.Counts[i]
		w.Sample(name+"_bucket", append(append([]Label(nil), labels...), Label{"le", formatFloat(ub)}), float64(cum))
	}
	cum += h.Counts[len(h.Bounds)]
	w.Sample(name+"_bucket", append(append([]Label(nil), labels...), Label{"le", "+Inf"}), float64(cum))
	w.Sample(name+"_sum", labels, h.Sum)
	w.Sample(name+"_count", labels, float64(cum))
}

// Histogram is a fixed-bucket histogram. It is not safe for concurrent use;
// its owner guards it.
type Histogram struct {
	Bounds []float64 // upper bounds, ascending; +Inf is implicit
	Counts []uint64  // len(Bounds)+1, the last one for +Inf
	Sum    float64
}

// NewHistogram returns an empty histogram with the given ascending bounds.
func NewHistogram(bounds []float64) *Histogram {
	b := append([]float64(nil), bounds...)
	sort.Float64s(b)
	return &Histogram{Bounds: b, Counts: make([]uint64, len(b)+1)}
}

// Observe adds one value.
func (h *Histogram) Observe(v float64) {
	i := sort.SearchFloat64s(h.Bounds, v) // first bound >= v
	h.Counts[i]++
	h.Sum += v
}

// Count is the number of observations.
func (h *Histogram) Count() uint64 {
	var n uint64
	for _, c := range h.Counts {
		n += c
	}
	return n
}

// Quantile estimates the q-quantile (0..1) by linear interpolation inside
// the bucket, as Prometheus' histogram_quantile does. It returns NaN when
// the histogram is empty.
func (h *Histogram) Quantile(q float64) float64 {
	n := h.Count()
	if n == 0 {
		return math.NaN()
	}
	rank := q * float64(n)
	var cum float64
	for i, c := range h.Counts {
		prev := cum
		cum += float64(c)
		if cum >= rank && c > 0 {
			if i == len(h.Bounds) {
				return h.Bounds[len(h.Bounds)-1]
			}
			lo := 0.0
			if i > 0 {
				lo = h.Bounds[i-1]
			}
			return lo + (h.Bounds[i]-lo)*(rank-prev)/float64(c)
		}
	}
	return h.Bounds[len(h.Bounds)-1]
}

func formatLabels(ls []Label) string {
	if len(ls) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteByte('{')
	for i, l := range ls {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(l.Name)
		b.WriteString(`="`)
		b.WriteString(escapeValue(l.Value))
		b.WriteByte('"')
	}
	b.WriteByte('}')
	return b.String()
}

func formatFloat(v float64) string {
	switch {
	case math.IsInf(v, 1):
		return "+Inf"
	case math.IsInf(v, -1):
		return "-Inf"
	case math.IsNaN(v):
		return "NaN"
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}

var valueEscaper = strings.NewReplacer(`\`, `\\`, "\n", `\n`, `"`, `\"`)
var helpEscaper = strings.NewReplacer(`\`, `\\`, "\n", `\n`)

func escapeValue(s string) string { return valueEscaper.Replace(s) }
func escapeHelp(s string) string  { return helpEscaper.Replace(s) }

// Parse reads the text format and returns its samples in order. Comment and
// blank lines are skipped; timestamps are accepted and dropped. A malformed
// line is an error naming its line number and column.
func Parse(r io.Reader) ([]Sample, error) { return ParseOnly(r, nil) }

// ParseOnly is Parse keeping only the samples of the metrics in names
// (nil keeps all); the lines of other metrics are skipped without being
// parsed (or checked), which is what makes scraping a vLLM /metrics for
// three gauges cheap.
func ParseOnly(r io.Reader, names map[string]bool) ([]Sample, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	var out []Sample
	line := 0
	for sc.Scan() {
		line++
		if names != nil {
			b := bytes.TrimLeft(sc.Bytes(), " \t")
			n := 0
			for n < len(b) && isNameChar(b[n], n == 0) {
				n++
			}
			if n == 0 || !names[string(b[:n])] {
				continue // comments and blank lines have no name either
			}
		}
		text := strings.TrimRight(sc.Text(), "\r")
		t := strings.TrimLeft(text, " \t")
		if t == "" || t[0] == '#' {
			continue
		}
		s, err := parseLine(t)
		if err != nil {
			col := len(text) - len(t) + err.col + 1
			return nil, fmt.Errorf("metrics line %d column %d: %s", line, col, err.msg)
		}
		out = append(out, s)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read metrics after line %d: %w", line, err)
	}
	return out, nil
}

type lineError struct {
	col int
	msg string
}

func isNameChar(c byte, first bool) bool {
	if c == '_' || c == ':' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') {
		return true
	}
	return !first && c >= '0' && c <= '9'
}

func parseLine(t string) (Sample, *lineError) {
	var s Sample
	i := 0
	for i < len(t) && isNameChar(t[i], i == 0) {
		i++
	}
	if i == 0 {
		return s, &lineError{0, fmt.Sprintf("want a metric name, found %q", t[0])}
	}
	s.Name = t[:i]
	if i < len(t) && t[i] == '{' {
		i++
		for {
			for i < len(t) && (t[i] == ' ' || t[i] == ',') {
				i++
			}
			if i < len(t) && t[i] == '}' {
				i++
				break
			}
			j := i
			for j < len(t) && isNameChar(t[j], j == i) {
				j++
			}
			if j == i {
				return s, &lineError{i, "want a label name"}
			}
			name := t[i:j]
			if j >= len(t) || t[j] != '=' {
				return s, &lineError{j, fmt.Sprintf("want '=' after label %q", name)}
			}
			j++
			if j >= len(t) || t[j] != '"' {
				return s, &lineError{j, fmt.Sprintf("want '\"' to open the value of label %q", name)}
			}
			j++
			var v strings.Builder
			closed := false
			for j < len(t) {
				c := t[j]
				if c == '\\' && j+1 < len(t) {
					switch t[j+1] {
					case 'n':
						v.WriteByte('\n')
					case '\\', '"':
						v.WriteByte(t[j+1])
					default:
						return s, &lineError{j, fmt.Sprintf("unknown escape \\%c in label %q", t[j+1], name)}
					}
					j += 2
					continue
				}
				if c == '"' {
					closed = true
					j++
					break
				}
				v.WriteByte(c)
				j++
			}
			if !closed {
				return s, &lineError{j, fmt.Sprintf("unterminated value of label %q", name)}
			}
			s.Labels = append(s.Labels, Label{name, v.String()})
			i = j
		}
	}
	rest := strings.TrimLeft(t[i:], " \t")
	if len(rest) == len(t[i:]) && rest != "" {
		return s, &lineError{i, "want a space before the value"}
	}
	fields := strings.Fields(rest)
	if len(fields) == 0 {
		return s, &lineError{len(t), "missing value"}
	}
	if len(fields) > 2 {
		return s, &lineError{len(t) - len(rest), "too many fields after the metric"}
	}
	v, err := parseValue(fields[0])
	if err != nil {
		return s, &lineError{len(t) - len(rest), fmt.Sprintf("bad value %q", fields[0])}
	}
	if len(fields) == 2 {
		if _, err := strconv.ParseInt(fields[1], 10, 64); err != nil {
			return s, &lineError{len(t) - len(rest) + len(fields[0]) + 1, fmt.Sprintf("bad timestamp %q", fields[1])}
		}
	}
	s.Value = v
	return s, nil
}

func parseValue(f string) (float64, error) {
	switch f {
	case "+Inf", "Inf":
		return math.Inf(1), nil
	case "-Inf":
		return math.Inf(-1), nil
	case "NaN":
		return math.NaN(), nil
	}
	return strconv.ParseFloat(f, 64)
}
