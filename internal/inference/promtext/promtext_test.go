package promtext

import (
	"bytes"
	"math"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func TestRoundTrip(t *testing.T) {
	var buf bytes.Buffer
	w := NewWriter(&buf)
	w.Gauge("vllm:num_requests_running", "Running.", []Label{{"model_name", `q"x\y`}}, 3)
	w.Counter("vllm:prefix_cache_hits_total", "Hits.", nil, 1e9)
	h := NewHistogram([]float64{0.1, 1})
	h.Observe(0.05)
	h.Observe(0.5)
	h.Observe(5)
	w.Header("lat_seconds", "histogram", "Latency.\nsecond line")
	w.Histogram("lat_seconds", []Label{{"p", "rr"}}, h)
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	got, err := Parse(&buf)
	if err != nil {
		t.Fatalf("parse: %v\n%s", err, buf.String())
	}
	want := []Sample{
		{"vllm:num_requests_running", []Label{{"model_name", `q"x\y`}}, 3},
		{"vllm:prefix_cache_hits_total", nil, 1e9},
		{"lat_seconds_bucket", []Label{{"p", "rr"}, {"le", "0.1"}}, 1},
		{"lat_seconds_bucket", []Label{{"p", "rr"}, {"le", "1"}}, 2},
		{"lat_seconds_bucket", []Label{{"p", "rr"}, {"le", "+Inf"}}, 3},
		{"lat_seconds_sum", []Label{{"p", "rr"}}, 5.55},
		{"lat_seconds_count", []Label{{"p", "rr"}}, 3},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("samples (-want +got):\n%s", d)
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{"no name", "{a=\"b\"} 1", "line 1 column 1: want a metric name"},
		{"no value", "foo", "line 1 column 4: missing value"},
		{"bad value", "# c\nfoo abc", "line 2 column 5: bad value \"abc\""},
		{"open label", `foo{a="b} 1`, "unterminated value of label \"a\""},
		{"no equals", `foo{a "b"} 1`, "want '=' after label \"a\""},
		{"bad ts", `foo 1 x`, "bad timestamp \"x\""},
		{"bad escape", `foo{a="\q"} 1`, `unknown escape \q`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse(strings.NewReader(tc.in))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Parse(%q) error = %v, want containing %q", tc.in, err, tc.want)
			}
		})
	}
}

func TestParseAcceptsTimestampsAndSpecials(t *testing.T) {
	got, err := Parse(strings.NewReader("a 1 1700000000000\nb{x=\"1\",} +Inf\nc NaN\n\n  # comment\n"))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 || got[0].Value != 1 || !math.IsInf(got[1].Value, 1) || !math.IsNaN(got[2].Value) || got[1].Label("x") != "1" {
		t.Fatalf("got %+v", got)
	}
}

func TestHistogramQuantile(t *testing.T) {
	h := NewHistogram([]float64{1, 2, 4})
	for i := 0; i < 100; i++ {
		h.Observe(1.5)
	}
	if q := h.Quantile(0.5); q < 1 || q > 2 {
		t.Errorf("median = %v, want in (1,2]", q)
	}
	if !math.IsNaN(NewHistogram([]float64{1}).Quantile(0.5)) {
		t.Error("empty histogram quantile should be NaN")
	}
}

func FuzzParse(f *testing.F) {
	f.Add("a 1\n")
	f.Add(`vllm:x{model_name="m",le="+Inf"} 3 17` + "\n")
	f.Add(`b{a="\n\"\\"} NaN`)
	f.Fuzz(func(t *testing.T, in string) {
		samples, err := Parse(strings.NewReader(in))
		if err != nil {
			return
		}
		// Whatever parses must survive a write and re-parse unchanged.
		var buf bytes.Buffer
		w := NewWriter(&buf)
		for _, s := range samples {
			w.Sample(s.Name, s.Labels, s.Value)
		}
		if err := w.Flush(); err != nil {
			t.Fatal(err)
		}
		again, err := Parse(&buf)
		if err != nil {
			t.Fatalf("re-parse of %q: %v", buf.String(), err)
		}
		if len(again) != len(samples) {
			t.Fatalf("re-parse gave %d samples, want %d", len(again), len(samples))
		}
	})
}

// ParseOnly returns what Parse does for the metrics it keeps, on any
// input Parse accepts; and it skips the lines of others unparsed.
func FuzzParseOnlyAgrees(f *testing.F) {
	f.Add("a 1\nb 2\na{x=\"y\"} 3\n")
	f.Add("# HELP a x\n# TYPE a gauge\na 1\nb{le=\"+Inf\"} 2\n")
	f.Fuzz(func(t *testing.T, in string) {
		names := map[string]bool{"a": true, "vllm:x": true}
		only, err := ParseOnly(strings.NewReader(in), names)
		all, errAll := Parse(strings.NewReader(in))
		if errAll != nil {
			return
		}
		if err != nil {
			t.Fatalf("%q: ParseOnly failed where Parse did not: %v", in, err)
		}
		var want []Sample
		for _, s := range all {
			if names[s.Name] {
				want = append(want, s)
			}
		}
		if d := cmp.Diff(want, only, cmpopts.EquateNaNs(), cmpopts.EquateEmpty()); d != "" {
			t.Fatalf("%q: (-Parse +ParseOnly)\n%s", in, d)
		}
	})
}

func TestParseOnlySkipsOtherLines(t *testing.T) {
	got, err := ParseOnly(strings.NewReader("bad line {{{\nkeep 1\n"), map[string]bool{"keep": true})
	if err != nil || len(got) != 1 || got[0].Value != 1 {
		t.Errorf("got %v, %v", got, err)
	}
}
