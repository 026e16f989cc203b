package planner

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"sort"
	"strings"
)

// The vector schema: the fields Vector's sections accept (their json tags)
// plus the aliases below, which are renamed before decoding. A field
// outside both is an error naming it and the section's accepted fields;
// measured and derived take any name (their non-numeric members are
// dropped), and the note fields are documentation anywhere.

// fieldAliases maps other spellings of a field (Megatron-LM's argument
// names among them) to the schema's.
var fieldAliases = map[string]string{
	"tensor_model_parallel_size":           "tp",
	"pipeline_model_parallel_size":         "pp",
	"virtual_pipeline_model_parallel_size": "vp",
	"data_parallel_size":                   "dp",
	"sequence_parallel":                    "sp",
	"context_parallel":                     "cp",
	"context_parallel_size":                "cp",
	"expert_model_parallel_size":           "ep",
	"expert_parallel":                      "ep",
	"decoder_first_pipeline_num_layers":    "first_stage_layers",
	"decoder_last_pipeline_num_layers":     "last_stage_layers",
	"use_distributed_optimizer":            "distributed_optimizer",
	"zero_stage":                           "zero",
	"fsdp_sharding_strategy":               "fsdp",
	"sharding_strategy":                    "fsdp",
	"head_dim":                             "head_size",
	"kv_channels":                          "head_size",
	"num_experts":                          "experts",
	"num_moe_experts":                      "experts",
	"n_routed_experts":                     "experts",
	"num_local_experts":                    "experts",
	"moe_router_topk":                      "experts_per_token",
	"num_experts_per_tok":                  "experts_per_token",
	"top_k":                                "experts_per_token",
	"topk":                                 "experts_per_token",
	"n_shared_experts":                     "shared_experts",
	"moe_shared_experts":                   "shared_experts",
	"moe_ffn_hidden_size":                  "expert_ffn",
	"moe_intermediate_size":                "expert_ffn",
	"first_k_dense_replace":                "dense_layers",
	"window_size":                          "sliding_window",
	"moe_expert_capacity_factor":           "capacity_factor",
	"fp8_recipe":                           "fp8_scaling",
	"num_layers":                           "layers",
	"hidden_size":                          "hidden",
	"num_attention_heads":                  "heads",
	"num_query_groups":                     "kv_heads",
	"ffn_hidden_size":                      "ffn",
	"vocab_size":                           "vocab",
	"seq_length":                           "seq",
	"global_batch_size":                    "gbs",
	"micro_batch_size":                     "mbs",
	"recompute_granularity":                "recompute",
	"framework":                            "stack",
	"software":                             "stack",
}

// noteFields are free text for people, accepted and ignored anywhere.
var noteFields = map[string]bool{"notes": true, "note": true, "comment": true, "comments": true,
	"url": true, "date": true, "description": true}

// normaliseVector renames aliased fields of one vector in place and
// returns the fields outside the schema as "section.field".
func normaliseVector(obj map[string]any) []string {
	var unknown []string
	walkSchema(obj, reflect.TypeOf(Vector{}), "", &unknown)
	sort.Strings(unknown)
	return unknown
}

var figuresType = reflect.TypeOf(Figures{})

func walkSchema(obj map[string]any, typ reflect.Type, path string, unknown *[]string) {
	fields := map[string]reflect.Type{}
	for i := 0; i < typ.NumField(); i++ {
		f := typ.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name != "" && name != "-" {
			fields[name] = f.Type
		}
	}
	keys := make([]string, 0, len(obj))
	for k := range obj {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		name := k
		if _, ok := fields[k]; !ok {
			if a, ok := fieldAliases[strings.ToLower(k)]; ok {
				if _, clash := obj[a]; !clash {
					obj[a] = obj[k]
				}
				delete(obj, k)
				name = a
			}
		}
		ft, ok := fields[name]
		switch {
		case !ok && noteFields[strings.ToLower(k)]:
			delete(obj, k)
			continue
		case !ok:
			*unknown = append(*unknown, path+k)
			continue
		}
		for ft.Kind() == reflect.Pointer || ft.Kind() == reflect.Slice {
			ft = ft.Elem()
		}
		if ft == figuresType || ft.Kind() != reflect.Struct || ft == reflect.TypeOf(Number{}) {
			continue
		}
		switch v := obj[name].(type) {
		case map[string]any:
			walkSchema(v, ft, path+name+".", unknown)
		case []any:
			for i, e := range v {
				if m, ok := e.(map[string]any); ok {
					walkSchema(m, ft, fmt.Sprintf("%s%s[%d].", path, name, i), unknown)
				}
			}
		}
	}
}

// acceptedFields lists a section's fields for error messages.
func acceptedFields(section string) string {
	typ := reflect.TypeOf(Vector{})
	if section != "" {
		f, ok := typ.FieldByNameFunc(func(n string) bool {
			sf, _ := typ.FieldByName(n)
			tag, _, _ := strings.Cut(sf.Tag.Get("json"), ",")
			return tag == section
		})
		if !ok {
			return ""
		}
		typ = f.Type
		for typ.Kind() == reflect.Pointer || typ.Kind() == reflect.Slice {
			typ = typ.Elem()
		}
	}
	var names []string
	for i := 0; i < typ.NumField(); i++ {
		name, _, _ := strings.Cut(typ.Field(i).Tag.Get("json"), ",")
		if name != "" && name != "-" {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}

// unknownFieldsError names the fields outside the schema and what the
// first one's section accepts.
func unknownFieldsError(unknown []string) error {
	section := ""
	if i := strings.IndexByte(unknown[0], '.'); i >= 0 {
		section = unknown[0][:i]
		if j := strings.IndexByte(section, '['); j >= 0 {
			section = section[:j]
		}
	}
	where := "a vector"
	if section != "" {
		where = section
	}
	return fmt.Errorf("unknown field(s) %s (%s accepts: %s)", strings.Join(unknown, ", "), where, acceptedFields(section))
}

// decodeVector decodes one vector strictly after renaming aliases.
func decodeVector(raw []byte) (Vector, error) {
	var obj map[string]any
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	if err := d.Decode(&obj); err != nil {
		return Vector{}, err
	}
	var v Vector
	unknown := normaliseVector(obj)
	b, err := json.Marshal(obj)
	if err != nil {
		return Vector{}, err
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return Vector{}, err
	}
	// A field the model does not read inside a section it computes from
	// (hardware, model, training, parallel, cases) could change the
	// answer: the vector is not evaluated. One beside them (a note, a
	// date, a link) is metadata, and does not stop it.
	var inSection []string
	for _, u := range unknown {
		if strings.ContainsAny(u, ".[") {
			inSection = append(inSection, u)
		}
	}
	if len(inSection) > 0 {
		v.Invalid = unknownFieldsError(inSection).Error()
	}
	return v, nil
}
