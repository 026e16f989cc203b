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
 {"id":"b","model":{"layers":2,"experts_per_token":2},"parallel":{"tp":1,"cp_comm":"a2a"},"colour":"red"},
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
	for _, want := range []string{"model.experts_per_token", "parallel.cp_comm", "accepts:"} {
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
