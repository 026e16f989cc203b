package api

import (
	"bytes"
	"testing"
)

func TestTailWriter(t *testing.T) {
	for _, tc := range []struct {
		name   string
		n      int
		writes []string
		after  string // written after Release
		want   string
	}{
		{"fewer lines than n", 5, []string{"a\nb\n"}, "", "a\nb\n"},
		{"last n", 2, []string{"a\nb\nc\nd\n"}, "", "c\nd\n"},
		{"lines across writes", 2, []string{"a\nb", "b\nc", "c\n"}, "", "bb\ncc\n"},
		{"unfinished last line counts", 2, []string{"a\nb\nc"}, "", "b\nc"},
		{"passes through after release", 1, []string{"a\nb\n"}, "c\nd", "b\nc\nd"},
		{"zero keeps everything", 0, []string{"a\nb\n"}, "c\n", "a\nb\nc\n"},
		{"nothing written", 3, nil, "x\n", "x\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b bytes.Buffer
			tw := NewTailWriter(&b, tc.n)
			for _, w := range tc.writes {
				if _, err := tw.Write([]byte(w)); err != nil {
					t.Fatal(err)
				}
			}
			if err := tw.Release(); err != nil {
				t.Fatal(err)
			}
			_ = tw.Release()
			_, _ = tw.Write([]byte(tc.after))
			if got := b.String(); got != tc.want {
				t.Errorf("got %q; want %q", got, tc.want)
			}
		})
	}
}

func TestPrefixLines(t *testing.T) {
	if got := string(PrefixLines([]byte("x"), []byte("> "), []byte("a\nb\nc"))); got != "x> a\n> b\n> c" {
		t.Errorf("PrefixLines = %q", got)
	}
}
