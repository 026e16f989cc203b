package api

import (
	"slices"
	"strings"
	"testing"
)

func TestParseArray(t *testing.T) {
	for _, c := range []struct {
		in      string
		want    []int
		limit   int
		wantErr string
	}{
		{in: "0-3", want: []int{0, 1, 2, 3}},
		{in: "1,3,5-7", want: []int{1, 3, 5, 6, 7}},
		{in: "0-15:4", want: []int{0, 4, 8, 12}},
		{in: "7", want: []int{7}},
		{in: "0-9%2", want: []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, limit: 2},
		{in: " 2 , 4 ", want: []int{2, 4}},
		{in: "", wantErr: "no indices"},
		{in: "%3", wantErr: "no indices"},
		{in: "5-3", wantErr: "ends before it starts"},
		{in: "1,1", wantErr: "index 1 given twice"},
		{in: "0-4,3", wantErr: "index 3 given twice"},
		{in: "0-9:0", wantErr: "step"},
		{in: "0-9%0", wantErr: "limit"},
		{in: "0-9%x", wantErr: "limit"},
		{in: "a-b", wantErr: "is not an index"},
		{in: "-5", wantErr: "is not an index"},
		{in: "+5", wantErr: "is not an index"},
		{in: "0-10000", wantErr: "more than 10000 tasks"},
		{in: "0-999999999999", wantErr: "is not an index"},
	} {
		got, err := ParseArray(c.in)
		if c.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), c.wantErr) {
				t.Errorf("ParseArray(%q) = %v, %v; want an error with %q", c.in, got, err, c.wantErr)
			}
			continue
		}
		if err != nil || !slices.Equal(got.Indices, c.want) || got.Limit != c.limit {
			t.Errorf("ParseArray(%q) = %+v, %v; want %v limit %d", c.in, got, err, c.want, c.limit)
		}
	}
	if s := (ArraySpec{Indices: []int{5, 0, 1, 2, 9}, Limit: 3}).String(); s != "0-2,5,9%3" {
		t.Errorf("String = %q", s)
	}
}

func FuzzParseArray(f *testing.F) {
	for _, s := range []string{"0-999", "1,3,5-9", "0-15:4%2", "7", "5-3", "1,,2", "%", "0-1:"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		a, err := ParseArray(s)
		if err != nil {
			if !strings.Contains(err.Error(), "array ") {
				t.Fatalf("error %q does not name the array", err)
			}
			return
		}
		if len(a.Indices) == 0 || len(a.Indices) > MaxArrayTasks || a.Limit < 0 {
			t.Fatalf("%q: %d indices, limit %d", s, len(a.Indices), a.Limit)
		}
		seen := map[int]bool{}
		for _, k := range a.Indices {
			if k < 0 || seen[k] {
				t.Fatalf("%q: bad or repeated index %d", s, k)
			}
			seen[k] = true
		}
		// What String writes parses back to the same set and limit.
		b, err := ParseArray(a.String())
		if err != nil {
			t.Fatalf("%q -> %q: %v", s, a.String(), err)
		}
		x, y := slices.Sorted(slices.Values(a.Indices)), slices.Sorted(slices.Values(b.Indices))
		if !slices.Equal(x, y) || a.Limit != b.Limit {
			t.Fatalf("%q -> %q does not round-trip", s, a.String())
		}
	})
}
