package trace

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"time"
)

// table reads a CSV file with a header row and hands out fields by column
// name, turning bad values into *ParseError with line and column.
type table struct {
	r    *csv.Reader
	src  string
	cols map[string]int
	rec  []string
	line int
}

// newTable reads the header. Every name in required must be present; with
// strict, every header column must be in required or optional.
func newTable(r io.Reader, src string, required, optional []string, strict bool) (*table, error) {
	cr := csv.NewReader(r)
	cr.ReuseRecord = true
	cr.FieldsPerRecord = 0
	head, err := cr.Read()
	if err == io.EOF {
		return nil, &ParseError{Source: src, Line: 1, Err: errors.New("empty file: expected a header row")}
	}
	if err != nil {
		return nil, csvErr(src, err)
	}
	t := &table{r: cr, src: src, cols: map[string]int{}}
	known := map[string]bool{}
	for _, c := range required {
		known[c] = true
	}
	for _, c := range optional {
		known[c] = true
	}
	for i, c := range head {
		name := strings.TrimSpace(strings.TrimPrefix(c, "\ufeff"))
		_, col := cr.FieldPos(i)
		if _, dup := t.cols[name]; dup {
			return nil, &ParseError{Source: src, Line: 1, Column: col, Field: name, Err: errors.New("column appears twice in the header")}
		}
		if strict && !known[name] {
			return nil, &ParseError{Source: src, Line: 1, Column: col, Field: name,
				Err: fmt.Errorf("unknown column (known: %s)", strings.Join(append(append([]string(nil), required...), optional...), ", "))}
		}
		t.cols[name] = i
	}
	for _, c := range required {
		if _, ok := t.cols[c]; !ok {
			return nil, &ParseError{Source: src, Line: 1, Field: c, Err: fmt.Errorf("required column missing from header %q", truncate(strings.Join(head, ","), 200))}
		}
	}
	return t, nil
}

func csvErr(src string, err error) error {
	var pe *csv.ParseError
	if errors.As(err, &pe) {
		return &ParseError{Source: src, Line: pe.Line, Column: pe.Column, Err: pe.Err}
	}
	return fmt.Errorf("read %s: %w", src, err)
}

// next reads the next row; false at the end.
func (t *table) next() (bool, error) {
	rec, err := t.r.Read()
	if err == io.EOF {
		return false, nil
	}
	if err != nil {
		return false, csvErr(t.src, err)
	}
	t.rec = rec
	t.line, _ = t.r.FieldPos(0)
	return true, nil
}

func (t *table) has(name string) bool { _, ok := t.cols[name]; return ok }

func (t *table) str(name string) string {
	i, ok := t.cols[name]
	if !ok || i >= len(t.rec) {
		return ""
	}
	return strings.TrimSpace(t.rec[i])
}

func (t *table) fail(name string, format string, args ...any) error {
	i, ok := t.cols[name]
	col := 0
	if ok && i < len(t.rec) {
		_, col = t.r.FieldPos(i)
	}
	return &ParseError{Source: t.src, Line: t.line, Column: col, Field: name, Err: fmt.Errorf(format, args...)}
}

// float parses a finite number, at least min.
func (t *table) float(name string, min float64) (float64, error) {
	s := t.str(name)
	if s == "" {
		return 0, t.fail(name, "empty; want a number")
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
		return 0, t.fail(name, "%q is not a number", truncate(s, 40))
	}
	if v < min {
		return 0, t.fail(name, "%v is below the minimum %v", v, min)
	}
	return v, nil
}

// int parses an integer in [min, max]; a float with no fraction ("8.0") is
// accepted because pandas writes integers that way.
func (t *table) int(name string, min, max int64) (int64, error) {
	s := t.str(name)
	if s == "" {
		return 0, t.fail(name, "empty; want an integer")
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		f, ferr := strconv.ParseFloat(s, 64)
		if ferr != nil || f != math.Trunc(f) || math.Abs(f) > 1<<53 {
			return 0, t.fail(name, "%q is not an integer", truncate(s, 40))
		}
		v = int64(f)
	}
	if v < min || v > max {
		return 0, t.fail(name, "%d is out of range [%d, %d]", v, min, max)
	}
	return v, nil
}

// optInt is int with a default for an absent column or empty field.
func (t *table) optInt(name string, def, min, max int64) (int64, error) {
	if t.str(name) == "" {
		return def, nil
	}
	return t.int(name, min, max)
}

const dateTimeLayout = "2006-01-02 15:04:05"

// instant parses a wall-clock time: "2006-01-02 15:04:05" (UTC), RFC 3339,
// or a bare date.
func (t *table) instant(name string) (time.Time, error) {
	s := t.str(name)
	v, err := parseInstant(s)
	if err != nil {
		return time.Time{}, t.fail(name, "%v", err)
	}
	return v, nil
}

func parseInstant(s string) (time.Time, error) {
	if s == "" {
		return time.Time{}, errors.New("empty; want a time like 2017-10-01 00:00:45")
	}
	for _, layout := range []string{dateTimeLayout, time.RFC3339Nano, "2006-01-02T15:04:05", "2006-01-02"} {
		if v, err := time.Parse(layout, s); err == nil {
			return v.UTC(), nil
		}
	}
	return time.Time{}, fmt.Errorf("%q is not a time (want YYYY-MM-DD HH:MM:SS or RFC 3339)", truncate(s, 40))
}

func unixSeconds(t time.Time) float64 {
	return float64(t.Unix()) + float64(t.Nanosecond())/1e9
}

// maxGPUs bounds per-job GPU counts so that arithmetic never overflows.
const maxGPUs = 1 << 20
