package trace

import (
	"bytes"
	"compress/gzip"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gangway/gangway/internal/base/testenv"
	"github.com/google/go-cmp/cmp"
)

func TestReadPhilly(t *testing.T) {
	in := "timestamp,duration,num_gpus,gpu_time,cluster\n" +
		"2017-10-01 00:00:45,30.0,1,30.0,6214e9\n" +
		"2017-10-01 00:01:55,61.0,8,488.0,11cb48\n" +
		"2017-10-01 00:01:55,5,0,0,11cb48\n" + // CPU job: skipped
		"2017-10-09 00:00:00,5,1,5,11cb48\n" // outside the window
	opt := Options{To: time.Date(2017, 10, 8, 0, 0, 0, 0, time.UTC)}
	got, err := ReadPhilly(strings.NewReader(in), "p.csv", opt)
	if err != nil {
		t.Fatal(err)
	}
	want := []Job{
		{ID: "j2", Submit: 0, Duration: 30, GPUs: 1, GPUMilli: 1000, Queue: "6214e9", Line: 2},
		{ID: "j3", Submit: 70, Duration: 61, GPUs: 8, GPUMilli: 1000, Queue: "11cb48", Line: 3},
	}
	if d := cmp.Diff(want, got.Jobs); d != "" {
		t.Errorf("jobs (-want +got):\n%s", d)
	}
	if got.Skipped != 2 {
		t.Errorf("skipped = %d, want 2", got.Skipped)
	}
	if want := time.Date(2017, 10, 1, 0, 0, 45, 0, time.UTC); !got.Start.Equal(want) {
		t.Errorf("start = %v, want %v", got.Start, want)
	}
}

func TestReadHelios(t *testing.T) {
	in := "job_id,user,vc,jobname,gpu_num,cpu_num,state,submit_time,duration\n" +
		"1,u1,vcA,train,8,12,Pass,2020-09-01 00:00:10,600\n" +
		"2,u2,vcB,cpu,0,4,Pass,2020-09-01 00:00:12,60\n" + // no GPU: skipped
		"3,u1,vcA,eval,1,2,Failed,2020-09-01 00:00:00,30\n"
	got, err := ReadHelios(strings.NewReader(in), "cluster_log.csv", Options{})
	if err != nil {
		t.Fatal(err)
	}
	want := []Job{
		{ID: "3", Submit: 0, Duration: 30, GPUs: 1, GPUMilli: 1000, CPUMilli: 2000, Queue: "vcA", User: "u1", Line: 4},
		{ID: "1", Submit: 10, Duration: 600, GPUs: 8, GPUMilli: 1000, CPUMilli: 12000, Queue: "vcA", User: "u1", Line: 2},
	}
	if d := cmp.Diff(want, got.Jobs); d != "" {
		t.Errorf("jobs (-want +got):\n%s", d)
	}
	if got.Skipped != 1 || !got.Start.Equal(time.Date(2020, 9, 1, 0, 0, 0, 0, time.UTC)) {
		t.Errorf("skipped %d, start %v", got.Skipped, got.Start)
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name   string
		read   func(string) error
		in     string
		want   string // the error text
		line   int
		column int
	}{
		{
			name: "philly bad gpus",
			read: phillyReader, in: "timestamp,duration,num_gpus,gpu_time,cluster\n2017-10-01 00:00:45,30,x,30,a\n",
			want: `t.csv:2:24: num_gpus: "x" is not an integer`, line: 2, column: 24,
		},
		{
			name: "philly bad time",
			read: phillyReader, in: "timestamp,duration,num_gpus\n2017-13-01 00:00:45,30,1\n",
			want: `t.csv:2:1: timestamp: "2017-13-01 00:00:45" is not a time (want YYYY-MM-DD HH:MM:SS or RFC 3339)`, line: 2, column: 1,
		},
		{
			name: "philly negative duration",
			read: phillyReader, in: "timestamp,duration,num_gpus\n2017-10-01 00:00:45,-3,1\n",
			want: `t.csv:2:21: duration: -3 is below the minimum 0`, line: 2, column: 21,
		},
		{
			name: "philly gpu_time mismatch",
			read: phillyReader, in: "timestamp,duration,num_gpus,gpu_time\n2017-10-01 00:00:45,10,2,99\n",
			want: `t.csv:2:26: gpu_time: 99 does not equal duration × num_gpus = 20`, line: 2, column: 26,
		},
		{
			name: "philly missing column",
			read: phillyReader, in: "timestamp,num_gpus\n",
			want: `t.csv:1: duration: required column missing from header "timestamp,num_gpus"`, line: 1,
		},
		{
			name: "philly ragged row",
			read: phillyReader, in: "timestamp,duration,num_gpus\n2017-10-01 00:00:45,10\n",
			want: `t.csv:2:1: wrong number of fields`, line: 2, column: 1,
		},
		{
			name: "helios mixed submit kinds",
			read: heliosReader, in: "jobname,gpu_num,submit_time,duration\na,1,2017-10-01 00:00:00,5\nb,1,17,5\n",
			want: `t.csv:3:5: submit_time: a number, but earlier rows hold date-times`, line: 3, column: 5,
		},
		{
			name: "openb share on multi-GPU pod",
			read: openbReader, in: "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\np,1000,10,2,500,,LS,Running,0,10,0\n",
			want: `t.csv:2:13: gpu_milli: 500 with num_gpu 2: only single-GPU pods may share a GPU`, line: 2, column: 13,
		},
		{
			name: "openb deleted before start",
			read: openbReader, in: "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\np,1000,10,1,500,,LS,Running,5,3,5\n",
			want: `t.csv:2:31: deletion_time: 3 is before the pod started at 5`, line: 2, column: 31,
		},
		{
			name: "csv unknown column",
			read: csvReader, in: "submit,duration,gpus,gpu\n0,1,1,1\n",
			want: `t.csv:1:22: gpu: unknown column (known: submit, duration, gpus, id, gpu_milli, cpu_milli, memory_mib, gpu_model, queue, user)`, line: 1, column: 22,
		},
		{
			name: "csv bad duration",
			read: csvReader, in: "id,submit,duration,gpus\na,0,1h,1\nb,0,soon,1\n",
			want: `t.csv:3:5: duration: "soon" is neither seconds nor a duration like 2h30m`, line: 3, column: 5,
		},
		{
			name: "csv duplicate id",
			read: csvReader, in: "id,submit,duration,gpus\na,0,1,1\na,0,1,1\n",
			want: `t.csv:3:1: id: "a" already used on line 2`, line: 3, column: 1,
		},
		{
			name: "jsonl unknown key",
			read: jsonlReader, in: "{\"submit\":0,\"duration\":5,\"gpus\":1}\n{\"submit\":0,\"duration\":5,\"gpus\":1,\"gpsu\":2}\n",
			want: `t.jsonl:2:35: gpsu: unknown key (known: submit, duration, gpus, id, gpu_milli, cpu_milli, memory_mib, gpu_model, queue, user)`, line: 2, column: 35,
		},
		{
			name: "jsonl syntax",
			read: jsonlReader, in: "{\"submit\":0,\"duration\":5,,}\n",
			want: `t.jsonl:1:26: invalid character ',' looking for beginning of object key string`, line: 1, column: 26,
		},
		{
			name: "jsonl fractional gpus",
			read: jsonlReader, in: "{\"submit\":0,\"duration\":5,\"gpus\":1.5}\n",
			want: `t.jsonl:1:26: gpus: 1.5 is not an integer`, line: 1, column: 26,
		},
		{
			name: "jsonl missing gpus",
			read: jsonlReader, in: "{\"submit\":0,\"duration\":5}\n",
			want: `t.jsonl:1: gpus: required field missing`, line: 1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.read(tt.in)
			if err == nil {
				t.Fatal("no error")
			}
			if err.Error() != tt.want {
				t.Errorf("error\n got %s\nwant %s", err, tt.want)
			}
			var pe *ParseError
			if !errors.As(err, &pe) {
				t.Fatalf("%T is not a *ParseError", err)
			}
			if pe.Line != tt.line || pe.Column != tt.column {
				t.Errorf("position = %d:%d, want %d:%d", pe.Line, pe.Column, tt.line, tt.column)
			}
		})
	}
}

func phillyReader(s string) error {
	_, err := ReadPhilly(strings.NewReader(s), "t.csv", Options{})
	return err
}
func heliosReader(s string) error {
	_, err := ReadHelios(strings.NewReader(s), "t.csv", Options{})
	return err
}
func openbReader(s string) error {
	_, err := ReadOpenbPods(strings.NewReader(s), "t.csv", Options{})
	return err
}
func csvReader(s string) error {
	_, err := ReadCSV(strings.NewReader(s), "t.csv", Options{})
	return err
}
func jsonlReader(s string) error {
	_, err := ReadJSONL(strings.NewReader(s), "t.jsonl", Options{})
	return err
}

func TestGenericRoundTrip(t *testing.T) {
	jobs := []Job{
		{ID: "a", Submit: 0, Duration: 3600, GPUs: 8, GPUMilli: 1000, Queue: "q1", User: "u", Line: 2},
		{ID: "b,c", Submit: 1.5, Duration: 60, GPUs: 1, GPUMilli: 250, CPUMilli: 4000, MemoryMiB: 1024, GPUModels: []string{"T4", "V100"}, Line: 3},
	}
	var buf bytes.Buffer
	if err := WriteCSV(&buf, jobs); err != nil {
		t.Fatal(err)
	}
	got, err := ReadCSV(&buf, "rt.csv", Options{})
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(jobs, got.Jobs); d != "" {
		t.Errorf("round trip (-want +got):\n%s", d)
	}
	in := `{"id":"a","submit":"2024-01-01T00:00:00Z","duration":"1h","gpus":8,"queue":"q1","user":"u"}
# comment

{"id":"b","submit":"2024-01-01T00:00:01.5Z","duration":60,"gpus":1,"gpu_milli":250,"gpu_model":"T4|V100"}
`
	gj, err := ReadJSONL(strings.NewReader(in), "t.jsonl", Options{})
	if err != nil {
		t.Fatal(err)
	}
	want := []Job{
		{ID: "a", Submit: 0, Duration: 3600, GPUs: 8, GPUMilli: 1000, Queue: "q1", User: "u", Line: 1},
		{ID: "b", Submit: 1.5, Duration: 60, GPUs: 1, GPUMilli: 250, GPUModels: []string{"T4", "V100"}, Line: 4},
	}
	if d := cmp.Diff(want, gj.Jobs); d != "" {
		t.Errorf("jsonl (-want +got):\n%s", d)
	}
	if !gj.Start.Equal(time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)) {
		t.Errorf("start = %v", gj.Start)
	}
}

func TestDetect(t *testing.T) {
	tests := []struct {
		head string
		want Format
	}{
		{"timestamp,duration,num_gpus,gpu_time,cluster\n", FormatPhilly},
		{"user,vc,jobname,gpu_num,state,submit_time,duration\n", FormatHelios},
		{"name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\n", FormatOpenbPods},
		{"sn,cpu_milli,memory_mib,gpu,model\n", FormatOpenbNodes},
		{"id,submit,duration,gpus\n", FormatCSV},
		{"  {\"submit\":0}\n", FormatJSONL},
	}
	for _, tt := range tests {
		got, err := Detect([]byte(tt.head))
		if err != nil || got != tt.want {
			t.Errorf("Detect(%q) = %q, %v; want %q", tt.head, got, err, tt.want)
		}
	}
	if _, err := Detect([]byte("a,b,c\n")); err == nil {
		t.Error("Detect of an unknown header: no error")
	}
}

func TestRealPhillyWindow(t *testing.T) {
	dir := testenv.SharedData(t, "traces")
	f, err := os.Open(filepath.Join(dir, "philly", "philly-2017-09-10.csv"))
	if err != nil {
		t.Skipf("Philly trace absent: %v", err)
	}
	defer f.Close()
	tr, err := Read(f, "philly.csv", "", Options{
		From: time.Date(2017, 10, 1, 0, 0, 0, 0, time.UTC),
		To:   time.Date(2017, 10, 7, 23, 59, 59, 0, time.UTC),
	})
	if err != nil {
		t.Fatal(err)
	}
	// The README's count for the parity slice.
	if len(tr.Jobs) != 10650 {
		t.Errorf("jobs in 2017-10-01..07 = %d, want 10650", len(tr.Jobs))
	}
	// The reference log lists the same (submit, duration, GPUs) multiset.
	g, err := os.Open(filepath.Join(dir, "reference", "PhillyPool64W1_fifo_joblog.csv.gz"))
	if err != nil {
		t.Skipf("reference log absent: %v", err)
	}
	defer g.Close()
	zr, err := gzip.NewReader(g)
	if err != nil {
		t.Fatal(err)
	}
	recs, err := ReadHeliosJobLog(zr, "fifo_joblog.csv")
	if err != nil {
		t.Fatal(err)
	}
	type key struct {
		s, d float64
		g    int
	}
	count := map[key]int{}
	for _, j := range tr.Jobs {
		count[key{j.Submit, j.Duration, j.GPUs}]++
	}
	for _, r := range recs {
		count[key{r.Submit, r.Duration, r.GPUs}]--
	}
	for k, c := range count {
		if c != 0 {
			t.Errorf("job %+v: count differs by %d between trace and reference", k, c)
		}
	}
}

func TestRealOpenb(t *testing.T) {
	dir := testenv.SharedData(t, "traces")
	nf, err := os.Open(filepath.Join(dir, "openb", "openb_node_list_gpu_node.csv"))
	if err != nil {
		t.Skipf("openb node list absent: %v", err)
	}
	defer nf.Close()
	nodes, err := ReadOpenbNodes(nf, "nodes.csv")
	if err != nil {
		t.Fatal(err)
	}
	gpus := 0
	for _, n := range nodes {
		gpus += n.GPUs
	}
	if len(nodes) != 1213 || gpus != 6212 {
		t.Errorf("openb GPU nodes = %d with %d GPUs, want 1213 and 6212", len(nodes), gpus)
	}
	pf, err := os.Open(filepath.Join(dir, "openb", "openb_pod_list_default.csv"))
	if err != nil {
		t.Skipf("openb pods absent: %v", err)
	}
	defer pf.Close()
	tr, err := ReadOpenbPods(pf, "pods.csv", Options{KeepCPUJobs: true})
	if err != nil {
		t.Fatal(err)
	}
	var demand float64
	for _, j := range tr.Jobs {
		demand += j.GPUDemand()
	}
	if len(tr.Jobs) != 8152 || demand < 6086.7 || demand > 6086.9 {
		t.Errorf("openb default: %d pods asking %.1f GPUs, want 8152 and 6086.8", len(tr.Jobs), demand)
	}
}
