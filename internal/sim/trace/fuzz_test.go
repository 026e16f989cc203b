package trace

import (
	"bytes"
	"errors"
	"math"
	"testing"
)

// checkTrace asserts what every reader promises: either a *ParseError (or
// ErrEmpty), or jobs sorted by submit time from 0 with sane fields.
func checkTrace(t *testing.T, tr *Trace, err error) {
	t.Helper()
	if err != nil {
		var pe *ParseError
		if !errors.As(err, &pe) && !errors.Is(err, ErrEmpty) {
			t.Fatalf("error is neither *ParseError nor ErrEmpty: %T %v", err, err)
		}
		if pe != nil && pe.Line < 1 {
			t.Fatalf("parse error without a line: %v", err)
		}
		return
	}
	if len(tr.Jobs) == 0 {
		t.Fatal("no error and no jobs")
	}
	if tr.Jobs[0].Submit != 0 {
		t.Fatalf("first submit = %v, want 0", tr.Jobs[0].Submit)
	}
	for i, j := range tr.Jobs {
		if i > 0 && j.Submit < tr.Jobs[i-1].Submit {
			t.Fatalf("jobs out of order at %d", i)
		}
		if math.IsNaN(j.Duration) || j.Duration < 0 || j.GPUs < 0 || j.GPUs > maxGPUs {
			t.Fatalf("bad job %+v", j)
		}
	}
}

func FuzzReadPhilly(f *testing.F) {
	f.Add([]byte("timestamp,duration,num_gpus,gpu_time,cluster\n2017-10-01 00:00:45,30.0,1,30.0,6214e9\n2017-10-01 00:01:55,61.0,8,488.0,11cb48\n"))
	f.Add([]byte("timestamp,duration,num_gpus\n2017-10-01,1e9,128\n"))
	f.Add([]byte("timestamp,duration,num_gpus\n\"2017-10-01 00:00:00\",NaN,1\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		tr, err := ReadPhilly(bytes.NewReader(data), "f", Options{})
		checkTrace(t, tr, err)
	})
}

func FuzzReadHelios(f *testing.F) {
	f.Add([]byte("user,vc,jobname,gpu_num,state,submit_time,duration\nu,vc1,j1,1,Pass,2017-10-01 00:00:45,30\n"))
	f.Add([]byte("job_id,gpu_num,cpu_num,submit_time,duration\n1,8,12,17,4\n2,0,1,18,3\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		tr, err := ReadHelios(bytes.NewReader(data), "f", Options{})
		checkTrace(t, tr, err)
	})
}

func FuzzReadHeliosJobLog(f *testing.F) {
	f.Add([]byte("user,vc,jobname,gpu_num,state,submit_time,duration,remain,start_time,end_time,ckpt_times,queue,jct,status,nodes\nu0,pool,j1,1,COMPLETED,0,30,0,0.0,31.0,0,0.0,31.0,end,[{0: 1}]\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		recs, err := ReadHeliosJobLog(bytes.NewReader(data), "f")
		if err != nil {
			var pe *ParseError
			if !errors.As(err, &pe) {
				t.Fatalf("%T %v", err, err)
			}
			return
		}
		for _, r := range recs {
			if r.GPUs < 0 || r.Submit < 0 {
				t.Fatalf("bad record %+v", r)
			}
		}
	})
}

func FuzzReadOpenbPods(f *testing.F) {
	f.Add([]byte("name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\nopenb-pod-0000,12000,16384,1,1000,,LS,Running,0,12537496,0\nopenb-pod-0035,16000,32768,1,1000,V100M16|V100M32,LS,Running,9967058,9968575,9967063\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		tr, err := ReadOpenbPods(bytes.NewReader(data), "f", Options{KeepCPUJobs: true})
		checkTrace(t, tr, err)
		if err == nil {
			for _, j := range tr.Jobs {
				if j.GPUs > 1 && j.GPUMilli != 1000 || j.GPUMilli < 0 || j.GPUMilli > 1000 {
					t.Fatalf("bad share %+v", j)
				}
			}
		}
	})
}

func FuzzReadOpenbNodes(f *testing.F) {
	f.Add([]byte("sn,cpu_milli,memory_mib,gpu,model\nopenb-node-0000,64000,262144,2,P100\nopenb-node-0227,32000,262144,0,nan\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		nodes, err := ReadOpenbNodes(bytes.NewReader(data), "f")
		if err != nil {
			var pe *ParseError
			if !errors.As(err, &pe) && !errors.Is(err, ErrEmpty) {
				t.Fatalf("%T %v", err, err)
			}
			return
		}
		for _, n := range nodes {
			if n.GPUs < 0 || n.GPUs > 64 || n.Name == "" || (n.GPUs > 0 && n.GPUModel == "") {
				t.Fatalf("bad node %+v", n)
			}
		}
	})
}

func FuzzReadCSV(f *testing.F) {
	f.Add([]byte("id,submit,duration,gpus,gpu_milli,gpu_model\na,0,3600,8,1000,H100\nb,5,1h,1,250,T4|A10\n"))
	f.Add([]byte("submit,duration,gpus\n2024-01-01T00:00:00Z,5,1\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		tr, err := ReadCSV(bytes.NewReader(data), "f", Options{})
		checkTrace(t, tr, err)
	})
}

func FuzzReadJSONL(f *testing.F) {
	f.Add([]byte("{\"id\":\"a\",\"submit\":0,\"duration\":\"1h\",\"gpus\":8}\n{\"submit\":3,\"duration\":5,\"gpus\":1,\"gpu_milli\":500}\n"))
	f.Add([]byte("{\"submit\":\"2024-01-01 00:00:00\",\"duration\":5,\"gpus\":1}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		tr, err := ReadJSONL(bytes.NewReader(data), "f", Options{})
		if err != nil && !errors.Is(err, ErrEmpty) {
			var pe *ParseError
			if !errors.As(err, &pe) {
				// A line longer than the scanner's buffer is an I/O-level error.
				return
			}
		}
		checkTrace(t, tr, err)
	})
}

func FuzzRead(f *testing.F) {
	f.Add([]byte("timestamp,duration,num_gpus\n2017-10-01 00:00:45,30.0,1\n"))
	f.Add([]byte("{\"submit\":0,\"duration\":5,\"gpus\":1}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		tr, err := Read(bytes.NewReader(data), "f", "", Options{})
		if err == nil {
			checkTrace(t, tr, nil)
		}
	})
}
