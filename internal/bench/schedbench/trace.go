package schedbench

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// TraceJob is one job of a trace as the benchmark uses it: its size and
// how long it ran.
type TraceJob struct {
	GPUs     int
	Duration time.Duration
}

// LoadTrace reads a Philly-style CSV (the Pollux artifact's columns:
// timestamp, duration, num_gpus, gpu_time, cluster) and returns each row's
// num_gpus and duration. Columns are found by name in the header; other
// columns are ignored. name labels errors ("philly.csv:12: ...").
func LoadTrace(r io.Reader, name string) ([]TraceJob, error) {
	cr := csv.NewReader(r)
	cr.FieldsPerRecord = -1
	cr.ReuseRecord = true
	header, err := cr.Read()
	if err != nil {
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("%s: empty file: want a header with num_gpus and duration", name)
		}
		return nil, fmt.Errorf("%s: header: %w", name, err)
	}
	gpuCol, durCol := -1, -1
	for i, h := range header {
		switch strings.TrimSpace(strings.TrimPrefix(h, "\ufeff")) {
		case "num_gpus":
			gpuCol = i
		case "duration":
			durCol = i
		}
	}
	if gpuCol < 0 || durCol < 0 {
		return nil, fmt.Errorf("%s:1: header %q lacks num_gpus or duration", name, strings.Join(header, ","))
	}
	var out []TraceJob
	for {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		line, _ := cr.FieldPos(0)
		if len(rec) <= max(gpuCol, durCol) {
			return nil, fmt.Errorf("%s:%d: %d columns, want at least %d", name, line, len(rec), max(gpuCol, durCol)+1)
		}
		g, err := strconv.Atoi(strings.TrimSpace(rec[gpuCol]))
		if err != nil || g < 1 || g > 1<<20 {
			return nil, fmt.Errorf("%s:%d: column num_gpus: %q is not a GPU count from 1 to %d", name, line, rec[gpuCol], 1<<20)
		}
		d, err := strconv.ParseFloat(strings.TrimSpace(rec[durCol]), 64)
		if err != nil || math.IsNaN(d) || d < 0 || d > 1e9 {
			return nil, fmt.Errorf("%s:%d: column duration: %q is not a number of seconds from 0 to 1e9", name, line, rec[durCol])
		}
		out = append(out, TraceJob{GPUs: g, Duration: time.Duration(d * float64(time.Second))})
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no jobs after the header", name)
	}
	return out, nil
}

// PhillyPath is where the Philly trace lives relative to the shared data
// directory.
const PhillyPath = "data/traces/philly/philly-2017-09-10.csv"

// FindPhilly looks for shared/data beside the repository: it walks up from
// dir until a directory holding shared/ with the Philly trace is found.
func FindPhilly(dir string) (string, error) {
	start := dir
	for {
		p := filepath.Join(dir, "shared", PhillyPath)
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
		up := filepath.Dir(dir)
		if up == dir {
			return "", fmt.Errorf("no shared/%s in %s or any directory above it; pass -trace", PhillyPath, start)
		}
		dir = up
	}
}
