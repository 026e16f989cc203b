package planner

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestNumber(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want Number
	}{
		{`8`, Number{Value: 8, Set: true}},
		{`"8"`, Number{Value: 8, Set: true, Text: "8"}},
		{`"unknown (assume 1)"`, Number{Value: 1, Set: true, Assumed: true, Text: "unknown (assume 1)"}},
		{`"per Table 3"`, Number{Text: "per Table 3"}},
		{`null`, Number{}},
	} {
		t.Run(tt.in, func(t *testing.T) {
			var n Number
			if err := json.Unmarshal([]byte(tt.in), &n); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, n); diff != "" {
				t.Errorf("(-want +got)\n%s", diff)
			}
		})
	}
	var n Number
	if err := json.Unmarshal([]byte(`{}`), &n); err == nil {
		t.Error("an object is not a number")
	}
}

func TestNICBitsPerGPU(t *testing.T) {
	for _, tt := range []struct {
		text string
		per  int
		want float64
	}{
		{"8x HDR InfiniBand 200 Gb/s per node (1 per GPU), 3-level fat tree", 8, 200e9},
		{"4x Omni-Path 100 Gb/s links per node (Jean Zay)", 8, 50e9},
		{"8 x 400 Gbps NDR", 8, 400e9},
		{"not stated in excerpt - treat as unknown", 8, 0},
		{"", 8, 0},
	} {
		if got := nicBitsPerGPU(tt.text, tt.per); got != tt.want {
			t.Errorf("nicBitsPerGPU(%q) = %g, want %g", tt.text, got, tt.want)
		}
	}
}

func TestInferStack(t *testing.T) {
	for _, tt := range []struct {
		name string
		v    Vector
		want StackKind
	}{
		{"explicit", Vector{Stack: "deepspeed"}, DeepSpeed},
		{"megatron by default", Vector{Source: "Narayanan et al. SC'21"}, Megatron},
		{"fsdp layout", Vector{Parallel: VectorParallel{FSDP: "FULL_SHARD"}}, FSDP},
		{"bigscience", Vector{Source: "BigScience tr11-176B-ml"}, DeepSpeed},
		{"zero-1 optimizer", Vector{Training: VectorTraining{Optimizer: "Adam, ZeRO-1"}}, DeepSpeed},
		{"distributed optimizer stays megatron", Vector{Training: VectorTraining{Optimizer: "Megatron distributed optimizer"}}, Megatron},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.v.inferStack()
			if err != nil || got != tt.want {
				t.Errorf("inferStack() = %s, %v; want %s", got, err, tt.want)
			}
		})
	}
	if _, err := (Vector{Stack: "jax"}).inferStack(); err == nil {
		t.Error("unknown explicit stack must be an error")
	}
}

func TestParseVectorsDev(t *testing.T) {
	vs := devVectors(t)
	if len(vs) != 10 {
		t.Fatalf("got %d vectors, want 10", len(vs))
	}
	d7 := vs[6]
	if d7.ID != "D7" || !d7.Training.MBS.Assumed || d7.Training.MBS.Int(0) != 1 {
		t.Errorf("D7 mbs = %+v, want assumed 1", d7.Training.MBS)
	}
	r, err := d7.run(DefaultCatalog(), DefaultStacks())
	if err != nil {
		t.Fatal(err)
	}
	if !r.autoRecompute || !r.autoSP {
		t.Errorf("D7 leaves recompute and SP unknown; got autoRecompute=%v autoSP=%v", r.autoRecompute, r.autoSP)
	}
	// 175B on 64 GPUs per pipeline replica does not fit without recomputation.
	c, e := r.resolve()
	if !e.Fits || c.Recompute == RecomputeNone {
		t.Errorf("D7 resolved to %s (fits=%v)", c, e.Fits)
	}
}

func TestParseVectorsErrors(t *testing.T) {
	for _, tt := range []struct {
		name, in, want string
	}{
		{"not an array", `{"id": "x"}`, "line 1 column"},
		{"syntax", "[\n {\"id\": \"x\",}\n]", "line 2"},
		{"wrong type", `[{"id": "x", "model": {"layers": "many"}}]`, "entry 0"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseVectors([]byte(tt.in))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %v, want it to contain %q", err, tt.want)
			}
		})
	}
}

// FuzzParseVectors: any input either fails to parse or yields vectors that
// Evaluate handles without panicking.
func FuzzParseVectors(f *testing.F) {
	f.Add([]byte(`[{"id":"x","hardware":{"gpu":"H100","count":8,"gpus_per_node":8},"model":{"layers":2,"hidden":64,"heads":4,"ffn":256,"vocab":100,"seq":128},"training":{"gbs":8,"mbs":1,"recompute":"none"},"parallel":{"tp":2,"pp":2,"dp":2},"measured":{"step_s":1},"tolerance":{"metric":"step_s","rel":0.1}}]`))
	f.Add([]byte(`[{"id":"m","cases":[{"model":"x","cfg":{"layers":2,"hidden":64,"heads":4,"ffn":256,"vocab":100,"seq":128},"tp":2,"pp":1,"vp":1,"mbs":1,"params_opt_GiB":1,"act_none_GiB":1,"act_seqsel_GiB":1}]}]`))
	f.Add([]byte(`[]`))
	f.Add([]byte(`[{"id":"u","stack":"DeepSpeed + Megatron","model":{"num_layers":4,"hidden_size":64,"num_attention_heads":4,"ffn":256,"vocab":100,"seq":128,"bogus":1},"parallel":{"context_parallel_size":2,"decoder_first_pipeline_num_layers":1,"pp":2},"hardware":{"gpu":"H100","count":16}}]`))
	f.Add([]byte(`[{"training":{"mbs":"unknown (assume 2)"}}]`))
	f.Fuzz(func(t *testing.T, data []byte) {
		vs, err := ParseVectors(data)
		if err != nil {
			return
		}
		for i := range vs {
			// Keep fuzzed sizes small enough to evaluate quickly.
			v := &vs[i]
			if v.Model.Layers > 512 || v.Parallel.PP > 512 || v.Parallel.VP > 64 || v.Model.Seq > 1<<20 {
				return
			}
			for _, c := range v.Cases {
				if c.Cfg != nil && (c.Cfg.Layers > 512 || c.PP > 512 || c.VP > 64) {
					return
				}
			}
		}
		_ = Evaluate(vs, DefaultCatalog(), DefaultStacks())
	})
}
