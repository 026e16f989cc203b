package api

import (
	"errors"
	"strings"
	"testing"
)

func TestParseIdempotencyKey(t *testing.T) {
	for _, c := range []struct {
		in, want string
		ok       bool
	}{
		{"8e03978e-40d5-43e8-bc93-6894a57f9324", "8e03978e-40d5-43e8-bc93-6894a57f9324", true},
		{`"8e03978e"`, "8e03978e", true},
		{"a b/c:d", "a b/c:d", true},
		{strings.Repeat("x", MaxIdempotencyKey), strings.Repeat("x", MaxIdempotencyKey), true},
		{"", "", false},
		{`""`, "", false},
		{strings.Repeat("x", MaxIdempotencyKey+1), "", false},
		{"caf\u00e9", "", false},
		{"tab\there", "", false},
		{`"in"side"`, "", false},
	} {
		got, err := ParseIdempotencyKey(c.in)
		if (err == nil) != c.ok || got != c.want {
			t.Errorf("ParseIdempotencyKey(%q) = %q, %v; want %q, ok %v", c.in, got, err, c.want, c.ok)
		}
		if err != nil && (!errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), IdempotencyKeyHeader)) {
			t.Errorf("ParseIdempotencyKey(%q): %v; want ErrInvalid naming the header", c.in, err)
		}
	}
}

func FuzzParseIdempotencyKey(f *testing.F) {
	for _, s := range []string{"k", `"k"`, "", strings.Repeat("x", 300), "caf\u00e9"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		k, err := ParseIdempotencyKey(s)
		if err != nil {
			return
		}
		if k == "" || len(k) > MaxIdempotencyKey {
			t.Fatalf("%q gave key %q", s, k)
		}
		for i := 0; i < len(k); i++ {
			if k[i] < 0x20 || k[i] > 0x7e {
				t.Fatalf("%q gave key %q with byte %#x", s, k, k[i])
			}
		}
	})
}
