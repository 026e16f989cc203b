package api

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// ByteSize is a number of bytes written plainly or with a unit: "64G",
// "64Gi", "512M", "1.5T". K, M, G and T are 1024-based with or without
// the i (and a trailing B), as Slurm's --mem reads them, and as the
// Kubernetes forms Ki, Mi, Gi and Ti are; a bare number is bytes.
type ByteSize int64

// MarshalJSON writes the number of bytes.
func (b ByteSize) MarshalJSON() ([]byte, error) { return json.Marshal(int64(b)) }

// UnmarshalJSON accepts a number of bytes or a string ParseByteSize reads.
func (b *ByteSize) UnmarshalJSON(data []byte) error {
	var s string
	if err := json.Unmarshal(data, &s); err != nil {
		var n json.Number
		if err := json.Unmarshal(data, &n); err != nil {
			return fmt.Errorf("invalid size %s: %s", data, byteSizeForms)
		}
		s = n.String()
	}
	v, err := ParseByteSize(s)
	if err != nil {
		return err
	}
	*b = ByteSize(v)
	return nil
}

const byteSizeForms = `want bytes, or a number with K, M, G or T (1024-based; Ki, Gi, GB also read), such as "64G" or "512Mi"`

// ParseByteSize reads a size; errors name the value and the forms.
func ParseByteSize(s string) (int64, error) {
	num := strings.TrimSpace(s)
	num = strings.TrimSuffix(strings.TrimSuffix(num, "B"), "i")
	shift := 0
	if n := len(num); n > 0 {
		if i := strings.IndexByte("KMGTP", upper(num[n-1])); i >= 0 {
			shift, num = 10*(i+1), num[:n-1]
		}
	}
	if strings.HasPrefix(num, "-") || !isDecimal(num) {
		return 0, fmt.Errorf("invalid size %q: %s", s, byteSizeForms)
	}
	if v, err := strconv.ParseInt(num, 10, 64); err == nil {
		if v < 0 || v > (1<<63-1)>>shift {
			return 0, fmt.Errorf("invalid size %q: %s", s, byteSizeForms)
		}
		return v << shift, nil
	}
	f, err := strconv.ParseFloat(num, 64)
	if err != nil || f < 0 || f*float64(int64(1)<<shift) >= 1<<63 {
		return 0, fmt.Errorf("invalid size %q: %s", s, byteSizeForms)
	}
	return int64(f * float64(int64(1)<<shift)), nil
}

func upper(c byte) byte {
	if c >= 'a' && c <= 'z' {
		return c - 'a' + 'A'
	}
	return c
}
