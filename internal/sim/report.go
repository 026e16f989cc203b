package sim

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
)

// WriteJSONLines writes one JSON object per summary, one per line.
func WriteJSONLines(w io.Writer, sums []Summary) error {
	enc := json.NewEncoder(w)
	for _, s := range sums {
		if err := enc.Encode(s); err != nil {
			return fmt.Errorf("write summary %s: %w", s.Policy, err)
		}
	}
	return nil
}

var summaryColumns = []string{"policy", "placement", "jobs", "avg_jct_s", "p50_jct_s", "p95_jct_s", "p99_jct_s",
	"avg_queue_s", "max_queue_s", "makespan_s", "gpu_utilization", "preemptions", "goodput", "unfinished", "frag_blocked_share", "ettr",
	"max_wait_s", "waited_over_24h_share", "slowdown_avg", "slowdown_p50", "slowdown_p99", "slowdown_max"}

// WriteSummaryCSV writes summaries as CSV with a header row.
func WriteSummaryCSV(w io.Writer, sums []Summary) error {
	bw := bufio.NewWriter(w)
	fmt.Fprintln(bw, strings.Join(summaryColumns, ","))
	for _, s := range sums {
		f := func(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }
		fmt.Fprintln(bw, strings.Join([]string{s.Policy, s.Placement, strconv.Itoa(s.Jobs), f(s.AvgJCT), f(s.P50JCT), f(s.P95JCT), f(s.P99JCT),
			f(s.AvgQueue), f(s.MaxQueue), f(s.Makespan), f(s.GPUUtilization), strconv.Itoa(s.Preemptions), f(s.Goodput),
			strconv.Itoa(s.Unfinished), f(s.FragBlocked), f(s.ETTR),
			f(s.MaxWait), f(s.WaitedOver24h), f(s.AvgSlowdown), f(s.P50Slowdown), f(s.P99Slowdown), f(s.MaxSlowdown)}, ","))
	}
	return bw.Flush()
}

// WriteTable writes summaries as an aligned table for people.
func WriteTable(w io.Writer, sums []Summary) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "policy\tjobs\tavg JCT s\tp50\tp95\tp99\tavg queue s\tmax queue s\tmax wait s\twait >24h\tslowdown p50\tp99\tmax\tmakespan s\tutil\tpreempt\tgoodput\tfrag-blocked\t")
	for _, s := range sums {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%.2f%%\t%s\t%s\t%s\t%s\t%.3f\t%d\t%.4f\t%.3f\t\n", s.Policy, s.Jobs,
			Thousands(s.AvgJCT), Thousands(s.P50JCT), Thousands(s.P95JCT), Thousands(s.P99JCT),
			Thousands(s.AvgQueue), Thousands(s.MaxQueue), Thousands(s.MaxWait), 100*s.WaitedOver24h,
			Ratio(s.P50Slowdown), Ratio(s.P99Slowdown), Ratio(s.MaxSlowdown),
			Thousands(s.Makespan), s.GPUUtilization, s.Preemptions, s.Goodput, s.FragBlocked)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, s := range sums {
		if s.Unfinished > 0 {
			fmt.Fprintf(w, "%s: %d jobs unfinished at the horizon\n", s.Policy, s.Unfinished)
		}
		switch {
		case s.Interruptions != nil:
			fmt.Fprintf(w, "%s: interruptions %s; GPU-hours lost %s; effective training time %.2f%%\n",
				s.Policy, fmtCounts(s.Interruptions), fmtHours(s.GPUHoursLost), 100*s.ETTR)
		case len(s.GPUHoursLost) > 0:
			fmt.Fprintf(w, "%s: GPU-hours lost %s\n", s.Policy, fmtHours(s.GPUHoursLost))
		}
	}
	return nil
}

func fmtCounts(m map[string]int) string {
	if len(m) == 0 {
		return "none"
	}
	keys := slices.Sorted(maps.Keys(m))
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}

func fmtHours(m map[string]float64) string {
	if len(m) == 0 {
		return "none"
	}
	keys := slices.Sorted(maps.Keys(m))
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %s", k, Thousands(m[k])))
	}
	return strings.Join(parts, ", ")
}

// Ratio prints a ratio such as a slowdown with two significant decimals
// below 10, one below 100, and as Thousands above.
func Ratio(v float64) string {
	switch a := math.Abs(v); {
	case a < 10:
		return strconv.FormatFloat(v, 'f', 2, 64)
	case a < 100:
		return strconv.FormatFloat(v, 'f', 1, 64)
	}
	return Thousands(v)
}

// Thousands prints v rounded to an integer with thousands separators.
func Thousands(v float64) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return strconv.FormatFloat(v, 'f', -1, 64)
	}
	s := strconv.FormatInt(int64(math.Round(math.Abs(v))), 10)
	var b strings.Builder
	if v < -0.5 {
		b.WriteByte('-')
	}
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// WriteJobsCSV writes one row per job.
func WriteJobsCSV(w io.Writer, jobs []JobResult) error {
	bw := bufio.NewWriter(w)
	fmt.Fprintln(bw, "id,gpus,submit_s,duration_s,start_s,end_s,jct_s,queue_s,max_wait_s,preemptions,failures,nodes,slowdown")
	f := func(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }
	for _, j := range jobs {
		fmt.Fprintf(bw, "%s,%d,%s,%s,%s,%s,%s,%s,%s,%d,%d,%s,%s\n", csvField(j.ID), j.GPUs, f(j.Submit), f(j.Duration),
			f(j.Start), f(j.End), f(j.JCT()), f(j.Queue), f(j.MaxWait), j.Preemptions, j.Failures, csvField(j.Nodes), f(j.Slowdown()))
	}
	return bw.Flush()
}

// WriteSeriesCSV writes the time series of one run.
func WriteSeriesCSV(w io.Writer, r *Result) error {
	bw := bufio.NewWriter(w)
	fmt.Fprintln(bw, "t_s,pending,busy_gpus,healthy_gpus,gpus")
	s := r.Series
	for i := range s.T {
		fmt.Fprintf(bw, "%s,%d,%d,%d,%d\n", strconv.FormatFloat(s.T[i], 'f', -1, 64), s.Pending[i], s.Busy[i], s.Healthy[i], r.GPUs)
	}
	return bw.Flush()
}

func csvField(s string) string {
	if strings.ContainsAny(s, ",\"\n\r") {
		return `"` + strings.ReplaceAll(s, `"`, `""`) + `"`
	}
	return s
}
