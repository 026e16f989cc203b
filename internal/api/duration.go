package api

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// Duration is a time.Duration that travels as a Go duration string ("90s",
// "5m") in JSON and YAML, so specs stay readable. It is read in Go's form,
// in Slurm's ("2:00:00", "1-00:00:00", "30:00") or as a bare number, which
// is minutes, as Slurm's --time takes it (ParseDuration).
type Duration time.Duration

// D returns the value as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// MarshalJSON writes the duration as a string such as "1m30s".
func (d Duration) MarshalJSON() ([]byte, error) {
	return json.Marshal(time.Duration(d).String())
}

// UnmarshalJSON accepts what ParseDuration does, as a string or a number.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		var f json.Number
		if err := json.Unmarshal(b, &f); err != nil {
			return fmt.Errorf("invalid duration %s: %s", b, durationForms)
		}
		s = f.String()
	}
	v, err := ParseDuration(s)
	if err != nil {
		return err
	}
	*d = Duration(v)
	return nil
}

const durationForms = `want a Go duration ("90s", "1h30m"), Slurm's form ("2:00:00", "1-00:00:00", "30:00", "1-12"), or a number of minutes`

// maxDuration bounds what ParseDuration returns: about 292 years.
const maxDuration = time.Duration(1<<63 - 1)

// ParseDuration reads a duration in any of the forms a user brings:
//   - Go's: "90s", "1h30m", "2.5h";
//   - Slurm's --time: "MM", "MM:SS", "HH:MM:SS", "D-HH", "D-HH:MM",
//     "D-HH:MM:SS";
//   - a bare number (JSON or YAML number, or a string of one): minutes, as
//     in Slurm, so `timeLimit: 60` is an hour, not a minute.
//
// Errors name the value and the accepted forms.
func ParseDuration(s string) (time.Duration, error) {
	t := strings.TrimSpace(s)
	if t == "" {
		return 0, fmt.Errorf("invalid duration %q: %s", s, durationForms)
	}
	if f, err := strconv.ParseFloat(t, 64); err == nil && isDecimal(t) {
		m := f * float64(time.Minute)
		if math.IsNaN(m) || math.Abs(m) >= float64(maxDuration) {
			return 0, fmt.Errorf("invalid duration %q: too long", s)
		}
		return time.Duration(m), nil
	}
	if d, err := time.ParseDuration(t); err == nil {
		return d, nil
	}
	if d, ok := slurmDuration(t); ok {
		return d, nil
	}
	return 0, fmt.Errorf("invalid duration %q: %s", s, durationForms)
}

// isDecimal: digits, at most one dot, an optional leading minus; not
// ParseFloat's other forms ("1e3", "0x10", "Inf").
func isDecimal(s string) bool {
	s = strings.TrimPrefix(s, "-")
	dot := false
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '.' && !dot:
			dot = true
		case c < '0' || c > '9':
			return false
		}
	}
	return s != "" && s != "."
}

// slurmDuration reads Slurm's [D-]HH:MM:SS family.
func slurmDuration(s string) (time.Duration, bool) {
	days := int64(-1)
	if i := strings.IndexByte(s, '-'); i >= 0 {
		d, ok := slurmField(s[:i])
		if !ok {
			return 0, false
		}
		days, s = d, s[i+1:]
	}
	parts := strings.Split(s, ":")
	if len(parts) > 3 {
		return 0, false
	}
	v := make([]int64, len(parts))
	for i, p := range parts {
		n, ok := slurmField(p)
		if !ok {
			return 0, false
		}
		v[i] = n
	}
	var h, m, sec int64
	switch {
	case days < 0 && len(v) == 1:
		m = v[0]
	case days < 0 && len(v) == 2:
		m, sec = v[0], v[1]
	case days < 0:
		h, m, sec = v[0], v[1], v[2]
	default:
		h = v[0]
		if len(v) > 1 {
			m = v[1]
		}
		if len(v) > 2 {
			sec = v[2]
		}
		h += 24 * days
	}
	total := float64(h)*3600 + float64(m)*60 + float64(sec) // no overflow
	if total*float64(time.Second) >= float64(maxDuration) {
		return 0, false
	}
	return time.Duration(h)*time.Hour + time.Duration(m)*time.Minute + time.Duration(sec)*time.Second, true
}

// slurmField is one number of Slurm's form: digits only.
func slurmField(s string) (int64, bool) {
	if s == "" || len(s) > 12 {
		return 0, false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	return n, err == nil
}
