package planner

import (
	"strings"
	"testing"
)

func TestParseStackKindVocabulary(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want StackKind
	}{
		{"Megatron-LM", Megatron},
		{"megatron", Megatron},
		{"NeMo", Megatron},
		{"Megatron-Core (mcore r0.9)", Megatron},
		{"", Megatron},
		{"DeepSpeed + Megatron", DeepSpeed},
		{"Megatron-DeepSpeed", DeepSpeed},
		{"deepspeed", DeepSpeed},
		{"FSDP", FSDP},
		{"PyTorch FSDP", FSDP},
		{"pytorch_fsdp", FSDP},
		{"torchtitan", FSDP},
		{"LLM Foundry", FSDP},
	} {
		got, err := ParseStackKind(tt.in)
		if err != nil || got != tt.want {
			t.Errorf("ParseStackKind(%q) = %s, %v; want %s", tt.in, got, err, tt.want)
		}
	}
	for _, bad := range []string{"jax", "MaxText on TPU", "DeepSpeed + FSDP"} {
		_, err := ParseStackKind(bad)
		if err == nil || !strings.Contains(err.Error(), bad) || !strings.Contains(err.Error(), "megatron-lm (") {
			t.Errorf("ParseStackKind(%q) error %v: want the value and the accepted forms", bad, err)
		}
	}
	_, err := (Vector{Stack: "jax"}).inferStack()
	if err == nil || !strings.HasPrefix(err.Error(), "stack: ") {
		t.Errorf("inferStack error %v: want it to name the field", err)
	}
}

func TestVectorSchema(t *testing.T) {
	vs, err := ParseVectors([]byte(`[
 {"id":"a","model":{"num_layers":32,"hidden_size":4096,"num_attention_heads":32,"num_query_groups":8,"notes":"x"},
  "parallel":{"tensor_model_parallel_size":4,"context_parallel_size":2,"decoder_first_pipeline_num_layers":7}},
 {"id":"b","model":{"layers":2,"kv_lora_rank":512},"parallel":{"tp":1,"cp_comm":"a2a"},"colour":"red"},
 {"id":"c","model":{"layers":2},"colour":"red","url":"https://example.org/run"}
]`))
	if err != nil {
		t.Fatal(err)
	}
	a := vs[0]
	if a.Invalid != "" || a.Model.Layers != 32 || a.Model.KVHeads != 8 || a.Parallel.TP != 4 || a.Parallel.CP != 2 || a.Parallel.FirstStageLayers != 7 {
		t.Errorf("aliases not read: %+v", a)
	}
	b := vs[1]
	for _, want := range []string{"model.kv_lora_rank", "parallel.cp_comm", "accepts:"} {
		if !strings.Contains(b.Invalid, want) {
			t.Errorf("Invalid %q lacks %q", b.Invalid, want)
		}
	}
	// Metadata beside the sections (a colour, a link) stops nothing.
	if strings.Contains(b.Invalid, "colour") || vs[2].Invalid != "" {
		t.Errorf("metadata made a vector invalid: %q, %q", b.Invalid, vs[2].Invalid)
	}
	rep := Evaluate(vs[1:2], DefaultCatalog(), DefaultStacks())
	if len(rep.NotEvaluated) != 1 || rep.NotEvaluated[0].Reason != b.Invalid {
		t.Errorf("invalid vector must be reported as not evaluated: %v", rep.NotEvaluated)
	}
}

// MoE fields are read under Megatron-LM's and Hugging Face's names, and a
// bad value makes the vector not evaluated with the field, the value and
// what is accepted.
func TestVectorMoESchema(t *testing.T) {
	vs, err := ParseVectors([]byte(`[
 {"id":"mixtral","hardware":{"gpu":"H100","count":64},
  "model":{"layers":32,"hidden":4096,"heads":32,"kv_heads":8,"ffn":14336,"vocab":32000,"seq":4096,"mlp":"swiglu",
           "num_moe_experts":8,"moe_router_topk":2},
  "training":{"gbs":256,"mbs":1,"moe_expert_capacity_factor":1.25},
  "parallel":{"tp":2,"pp":1,"dp":32,"expert_model_parallel_size":8},
  "measured":{"tokens_per_s_per_gpu":1000},"tolerance":{"metric":"tokens_per_s_per_gpu","rel":0.5}},
 {"id":"topk","hardware":{"gpu":"H100","count":8},
  "model":{"layers":4,"hidden":1024,"heads":8,"ffn":4096,"vocab":1000,"seq":1024,"experts":8,"experts_per_token":9},
  "training":{"gbs":8},"parallel":{"tp":1,"dp":8},
  "measured":{"tokens_per_s_per_gpu":1000},"tolerance":{"metric":"tokens_per_s_per_gpu","rel":0.5}},
 {"id":"ep","hardware":{"gpu":"H100","count":8},
  "model":{"layers":4,"hidden":1024,"heads":8,"ffn":4096,"vocab":1000,"seq":1024,"experts":6,"experts_per_token":2},
  "training":{"gbs":8},"parallel":{"tp":1,"dp":8,"ep":4},
  "measured":{"tokens_per_s_per_gpu":1000},"tolerance":{"metric":"tokens_per_s_per_gpu","rel":0.5}},
 {"id":"dense-ep","hardware":{"gpu":"H100","count":8},
  "model":{"layers":4,"hidden":1024,"heads":8,"ffn":4096,"vocab":1000,"seq":1024},
  "training":{"gbs":8},"parallel":{"tp":1,"dp":8,"ep":2},
  "measured":{"tokens_per_s_per_gpu":1000},"tolerance":{"metric":"tokens_per_s_per_gpu","rel":0.5}},
 {"id":"cf","hardware":{"gpu":"H100","count":8},
  "model":{"layers":4,"hidden":1024,"heads":8,"ffn":4096,"vocab":1000,"seq":1024,"experts":8,"experts_per_token":2},
  "training":{"gbs":8,"capacity_factor":-1},"parallel":{"tp":1,"dp":8,"ep":8},
  "measured":{"tokens_per_s_per_gpu":1000},"tolerance":{"metric":"tokens_per_s_per_gpu","rel":0.5}}
]`))
	if err != nil {
		t.Fatal(err)
	}
	m := vs[0]
	if m.Invalid != "" || m.Model.Experts != 8 || m.Model.ExpertsPerToken != 2 || m.Parallel.EP != 8 || m.Training.CapacityFactor != 1.25 {
		t.Fatalf("MoE aliases not read: %+v", m)
	}
	rep := Evaluate(vs, DefaultCatalog(), DefaultStacks())
	if len(rep.Vectors) != 1 || rep.Vectors[0].ID != "mixtral" {
		t.Errorf("want only the Mixtral vector evaluated, got %+v", rep.Vectors)
	}
	want := map[string]string{
		"topk":     "experts_per_token (top-k) must be 1–8",
		"ep":       "ep=4 does not divide the 6 routed experts",
		"dense-ep": "needs a mixture-of-experts model",
		"cf":       "capacity factor -1",
	}
	checkNotEvaluated(t, rep, want)
}

// parallel.cp_comm_type takes p2p or all_gather; other exchange kinds are
// refused with the accepted forms.
func TestCPCommType(t *testing.T) {
	for _, tc := range []struct {
		value   string
		gather  bool
		refused bool
	}{{"", false, false}, {"p2p", false, false}, {"all_gather", true, false}, {"a2a", false, true}} {
		v := Vector{ID: "X", Hardware: VectorHardware{GPU: "H100", Count: Number{Value: 64, Set: true}},
			Model:    VectorModel{Layers: 80, Hidden: 8192, Heads: 64, KVHeads: 8, FFN: 28672, Vocab: 128256, MLP: "swiglu", Seq: 8192},
			Training: VectorTraining{GBS: Number{Value: 64, Set: true}, MBS: Number{Value: 1, Set: true}},
			Parallel: VectorParallel{TP: 8, PP: 1, CP: 2, DP: 4, CPCommType: tc.value}}
		r, err := v.run(DefaultCatalog(), DefaultStacks())
		if tc.refused {
			if err == nil || !strings.Contains(err.Error(), "all_gather") {
				t.Errorf("%q: error %v, want one naming the accepted forms", tc.value, err)
			}
			continue
		}
		if err != nil || r.job.CPAllGather != tc.gather {
			t.Errorf("%q: err %v, all-gather %v, want %v", tc.value, err, r.job.CPAllGather, tc.gather)
		}
	}
}

// checkNotEvaluated checks that exactly the vectors of want are reported
// as not evaluated, each for a reason containing want's text.
func checkNotEvaluated(t *testing.T, rep Report, want map[string]string) {
	t.Helper()
	for _, ne := range rep.NotEvaluated {
		if w, ok := want[ne.ID]; !ok || !strings.Contains(ne.Reason, w) {
			t.Errorf("%s not evaluated for %q, want it to say %q", ne.ID, ne.Reason, w)
		}
		delete(want, ne.ID)
	}
	if len(want) != 0 {
		t.Errorf("not reported as not evaluated: %v", want)
	}
}
