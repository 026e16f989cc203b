package topology

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestExpandHostlist(t *testing.T) {
	tests := []struct {
		name string
		expr string
		want []string
	}{
		{"plain", "login", []string{"login"}},
		{"range", "n[1-3]", []string{"n1", "n2", "n3"}},
		{"padded with single", "node[001-003,010]", []string{"node001", "node002", "node003", "node010"}},
		{"padding kept past width", "n[08-10]", []string{"n08", "n09", "n10"}},
		{"unpadded", "n[8-10]", []string{"n8", "n9", "n10"}},
		{"single in brackets", "n[3]", []string{"n3"}},
		{"suffix", "n[1-2]-ib", []string{"n1-ib", "n2-ib"}},
		{"product leftmost slowest", "r[1-2]n[1-2]", []string{"r1n1", "r1n2", "r2n1", "r2n2"}},
		{"list", "a,b[1-2],c", []string{"a", "b1", "b2", "c"}},
		{"name chars", "gb200-rack_1.n:2+x@y", []string{"gb200-rack_1.n:2+x@y"}},
		{"duplicates kept", "n1,n[1-2]", []string{"n1", "n1", "n2"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ExpandHostlist(tc.expr)
			if err != nil {
				t.Fatalf("ExpandHostlist(%q): %v", tc.expr, err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("ExpandHostlist(%q) (-want +got):\n%s", tc.expr, diff)
			}
		})
	}
}

func TestExpandHostlistErrors(t *testing.T) {
	tests := []struct {
		name, expr, want string
	}{
		{"empty", "", `hostlist "": column 1: empty host list`},
		{"unclosed", "n[1-3", `hostlist "n[1-3": column 2: unclosed '['`},
		{"descending", "n[3-1]", `hostlist "n[3-1]": column 3: range 3-1 is descending`},
		{"letters in range", "n[a-b]", `hostlist "n[a-b]": column 3: invalid character 'a' in range; want digits`},
		{"letter after dash", "n[1-x]", `hostlist "n[1-x]": column 5: invalid character 'x' in range; want digits`},
		{"empty item", "n,,m", `hostlist "n,,m": column 3: empty name in host list`},
		{"trailing comma", "n1,", `hostlist "n1,": column 4: empty name in host list`},
		{"empty brackets", "n[]", `hostlist "n[]": column 3: empty '[]'`},
		{"empty range", "n[1,,2]", `hostlist "n[1,,2]": column 5: empty range in '[]'`},
		{"missing bound", "n[1-]", `hostlist "n[1-]": column 5: missing number in range`},
		{"stray close", "n[1-3]]", `hostlist "n[1-3]]": column 7: unexpected ']'`},
		{"nested", "n[1-[2]]", `hostlist "n[1-[2]]": column 5: nested '['`},
		{"space", "n 1", `hostlist "n 1": column 2: invalid character ' ' in name`},
		{"too many digits", "n[0-1234567890]", `hostlist "n[0-1234567890]": column 5: number "1234567890" has more than 9 digits`},
		{"too big", "n[0-999999999]", fmt.Sprintf(`hostlist "n[0-999999999]": column 1: expands to more than %d names`, maxExpand)},
		{"product too big", "a[0-9999]b[0-9999]", fmt.Sprintf(`hostlist "a[0-9999]b[0-9999]": column 1: expands to more than %d names`, maxExpand)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ExpandHostlist(tc.expr)
			if err == nil {
				t.Fatalf("ExpandHostlist(%q) = %q, want error %q", tc.expr, got, tc.want)
			}
			if err.Error() != tc.want {
				t.Errorf("ExpandHostlist(%q) error:\n got %q\nwant %q", tc.expr, err, tc.want)
			}
		})
	}
}

func TestFormatHostlist(t *testing.T) {
	seq := func(prefix string, lo, hi int, width int) []string {
		var out []string
		for i := lo; i <= hi; i++ {
			out = append(out, fmt.Sprintf("%s%0*d", prefix, width, i))
		}
		return out
	}
	tests := []struct {
		name  string
		names []string
		want  string
	}{
		{"empty", nil, ""},
		{"one", []string{"n1"}, "n1"},
		{"range and single", []string{"n1", "n2", "n3", "n5"}, "n[1-3,5]"},
		{"padded", append(seq("node", 1, 16, 3), "node020"), "node[001-016,020]"},
		{"unsorted input", []string{"n10", "n9", "n8"}, "n[8-10]"},
		{"padded absorbs unpadded of same width", []string{"n08", "n09", "n10"}, "n[08-10]"},
		{"different widths stay apart", []string{"n1", "n01"}, "n01,n1"},
		{"plain names", []string{"login", "n1"}, "login,n1"},
		{"duplicates", []string{"a1", "a1", "b", "b"}, "a1,b"},
		{"groups by prefix", []string{"r2n1", "r1n2", "r1n1"}, "r1n[1-2],r2n1"},
		{"suffix is plain", []string{"n1-ib", "n2-ib"}, "n1-ib,n2-ib"},
		{"natural order of groups", []string{"rack10-1", "rack2-1", "rack2-2"}, "rack2-[1-2],rack10-1"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := FormatHostlist(tc.names)
			if got != tc.want {
				t.Errorf("FormatHostlist(%q) = %q, want %q", tc.names, got, tc.want)
			}
			if got == "" {
				return
			}
			back, err := ExpandHostlist(got)
			if err != nil {
				t.Fatalf("ExpandHostlist(%q): %v", got, err)
			}
			if diff := cmp.Diff(uniqueSorted(tc.names), uniqueSorted(back)); diff != "" {
				t.Errorf("round trip changed the set (-want +got):\n%s", diff)
			}
		})
	}
}

func uniqueSorted(names []string) []string {
	out := slices.Clone(names)
	slices.Sort(out)
	return slices.Compact(out)
}

func TestNaturalCompare(t *testing.T) {
	want := []string{"a", "n01", "n1", "n2", "n9", "n10", "n10a", "n10b", "n100", "rack2-n1", "rack10-n1", "x"}
	got := slices.Clone(want)
	slices.Reverse(got)
	slices.SortFunc(got, naturalCompare)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("natural order (-want +got):\n%s", diff)
	}
	for _, s := range want {
		if c := naturalCompare(s, s); c != 0 {
			t.Errorf("naturalCompare(%q, %q) = %d, want 0", s, s, c)
		}
	}
}

func FuzzExpandHostlist(f *testing.F) {
	lowerMaxExpand(f)
	for _, s := range []string{"n[1-3]", "node[001-016,020],login1", "r[1-2]n[01-02]", "n[", "a,,b", "n[08-10]x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, expr string) {
		names, err := ExpandHostlist(expr)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "hostlist ") {
				t.Fatalf("error without context: %v", err)
			}
			return
		}
		if len(names) == 0 {
			t.Fatalf("ExpandHostlist(%q) gave no names and no error", expr)
		}
		if len(names) > 10000 {
			return // valid but slow to round-trip; keep the fuzzer fast
		}
		for _, n := range names {
			if checkName("node", n) != nil {
				t.Fatalf("ExpandHostlist(%q) gave invalid name %q", expr, n)
			}
		}
		back, err := ExpandHostlist(FormatHostlist(names))
		if err != nil {
			t.Fatalf("re-expand of %q: %v", FormatHostlist(names), err)
		}
		if diff := cmp.Diff(uniqueSorted(names), uniqueSorted(back)); diff != "" {
			t.Fatalf("format/expand round trip of %q (-want +got):\n%s", expr, diff)
		}
	})
}

// lowerMaxExpand keeps fuzz inputs like "n[0-999999]" from spending seconds
// expanding; the limit itself is tested with its real value elsewhere.
func lowerMaxExpand(f *testing.F) {
	old := maxExpand
	maxExpand = 20000
	f.Cleanup(func() { maxExpand = old })
}
