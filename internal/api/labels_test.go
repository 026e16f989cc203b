package api

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseSelector(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Selector
	}{
		{"", nil},
		{"team=nlp", Selector{{"team", SelectEquals, "nlp"}}},
		{"team==nlp, tier!=low ,gpu,!spot", Selector{{"team", SelectEquals, "nlp"}, {"tier", SelectNotEquals, "low"}, {"gpu", SelectExists, ""}, {"spot", SelectNotExists, ""}}},
		{"example.com/team=a", Selector{{"example.com/team", SelectEquals, "a"}}},
		{"k=", Selector{{"k", SelectEquals, ""}}},
	} {
		got, err := ParseSelector(tc.in)
		if err != nil {
			t.Errorf("ParseSelector(%q): %v", tc.in, err)
			continue
		}
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("ParseSelector(%q) (-want +got):\n%s", tc.in, diff)
		}
	}
}

func TestParseSelectorErrors(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"a=b,,c", `term "": empty`},
		{"a=b,", `term "": empty`},
		{"=x", `term "=x": empty key`},
		{"team in (a,b)", "set-based terms"},
		{"-bad=x", `term "-bad=x": key "-bad"`},
		{"k=v v", `value "v v"`},
		{"Example.com/k=v", `prefix "Example.com"`},
		{"k=" + strings.Repeat("x", 64), "at most 63"},
		{"!", `term "!": empty key`},
	} {
		_, err := ParseSelector(tc.in)
		if !errors.Is(err, ErrSelector) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseSelector(%q) = %v; want an ErrSelector naming %q", tc.in, err, tc.want)
		}
	}
}

func TestSelectorMatches(t *testing.T) {
	labels := map[string]string{"team": "nlp", "tier": "high"}
	for _, tc := range []struct {
		sel  string
		want bool
	}{
		{"", true}, {"team=nlp", true}, {"team=cv", false}, {"team!=cv", true}, {"team!=nlp", false},
		{"missing!=x", true}, {"tier", true}, {"missing", false}, {"!missing", true}, {"!team", false},
		{"team=nlp,tier=high", true}, {"team=nlp,tier=low", false},
	} {
		s, err := ParseSelector(tc.sel)
		if err != nil {
			t.Fatal(err)
		}
		if got := s.Matches(labels); got != tc.want {
			t.Errorf("%q matches %v = %v; want %v", tc.sel, labels, got, tc.want)
		}
	}
}

func TestJobLabelsValidated(t *testing.T) {
	var fe FieldErrors
	checkJobLabels(&fe, "spec.labels", map[string]string{"team": "nlp", "bad key": "x", "ok": "-v"})
	err := fe.Err()
	if err == nil || !strings.Contains(err.Error(), `key "bad key"`) || !strings.Contains(err.Error(), `value "-v"`) || strings.Contains(err.Error(), "nlp") {
		t.Errorf("checkJobLabels: %v; want the bad key and the bad value named, not the good label", err)
	}
}

func FuzzParseSelector(f *testing.F) {
	for _, s := range []string{"a=b", "a!=b,c,!d", "x.io/k==v", ",", "a in (b)", "!"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		sel, err := ParseSelector(s)
		if err != nil {
			if !errors.Is(err, ErrSelector) {
				t.Fatalf("ParseSelector(%q): %v does not wrap ErrSelector", s, err)
			}
			return
		}
		// What it reads, written back, reads the same.
		again, err := ParseSelector(sel.String())
		if err != nil {
			t.Fatalf("ParseSelector(%q) of %q's String: %v", sel.String(), s, err)
		}
		if diff := cmp.Diff(sel, again); diff != "" {
			t.Fatalf("round trip of %q (-first +again):\n%s", s, diff)
		}
	})
}
