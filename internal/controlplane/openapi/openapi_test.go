package openapi

import (
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gangway/gangway/internal/api"
)

// TestDocumentRefsResolve: the document is JSON, and every $ref in it
// names a component it has.
func TestDocumentRefsResolve(t *testing.T) {
	var doc map[string]any
	if err := json.Unmarshal(Document(), &doc); err != nil {
		t.Fatalf("the document is not JSON: %v", err)
	}
	schemas := doc["components"].(map[string]any)["schemas"].(map[string]any)
	refs := 0
	var walk func(path string, v any)
	walk = func(path string, v any) {
		switch v := v.(type) {
		case map[string]any:
			if r, ok := v["$ref"].(string); ok {
				refs++
				name, found := strings.CutPrefix(r, "#/components/schemas/")
				if !found || schemas[name] == nil {
					t.Errorf("%s: $ref %q resolves to nothing", path, r)
				}
				if len(v) != 1 {
					t.Errorf("%s: $ref has siblings, which OpenAPI 3.0 ignores: %v", path, v)
				}
			}
			for k, e := range v {
				walk(path+"/"+k, e)
			}
		case []any:
			for _, e := range v {
				walk(path+"[]", e)
			}
		}
	}
	walk("", doc)
	if refs < 20 {
		t.Errorf("only %d $refs: the bodies are not described", refs)
	}
	for _, want := range []string{"JobSpec", "Job", "JobDetail", "JobList", "Node", "NodeList", "Queue", "Deployment", "ErrorBody", "FieldError"} {
		if schemas[want] == nil {
			t.Errorf("no component schema %s", want)
		}
	}
}

// TestOperationsWellFormed: each operation has a unique method and path
// and a unique operationId, a summary, and a success status.
func TestOperationsWellFormed(t *testing.T) {
	seen, ids := map[string]bool{}, map[string]bool{}
	for _, op := range Operations {
		key := op.Method + " " + op.Path
		if seen[key] {
			t.Errorf("%s is listed twice", key)
		}
		seen[key] = true
		if id := operationID(op); ids[id] {
			t.Errorf("%s: operationId %s is taken", key, id)
		} else {
			ids[id] = true
		}
		if op.Summary == "" || op.Tag == "" || op.Status < 200 || op.Status > 299 {
			t.Errorf("%s: want a summary, a tag and a 2xx status: %+v", key, op)
		}
		if !slices.Contains([]string{"GET", "POST", "DELETE"}, op.Method) {
			t.Errorf("%s: method %s", key, op.Method)
		}
	}
}

// TestSchemaOf: Go types map to the schemas of their JSON form.
func TestSchemaOf(t *testing.T) {
	type inner struct {
		A string `json:"a"`
	}
	type embedded struct {
		Shadowed int    `json:"x"`
		Promoted string `json:"promoted"`
	}
	type outer struct {
		embedded
		X        string            `json:"x"`
		Skipped  int               `json:"-"`
		N        int64             `json:"n,string"`
		When     time.Time         `json:"when"`
		Limit    api.Duration      `json:"limit"`
		Mem      api.ByteSize      `json:"mem"`
		List     []*inner          `json:"list"`
		Labels   map[string]string `json:"labels"`
		Raw      []byte            `json:"raw"`
		Anything any               `json:"anything"`
		Opt      *int              `json:"opt,omitempty"`
		private  int
		NoTag    bool
	}
	_ = outer{}.private
	s := newSchemas()
	got := s.of(reflect.TypeFor[outer]())
	if diff := cmp.Diff(Schema{"$ref": "#/components/schemas/outer"}, got); diff != "" {
		t.Fatalf("ref (-want +got):\n%s", diff)
	}
	props := s.components["outer"]["properties"].(Schema)
	want := Schema{
		"x":        Schema{"type": "string"},
		"promoted": Schema{"type": "string"},
		"n":        Schema{"type": "string"},
		"when":     Schema{"type": "string", "format": "date-time"},
		"limit":    durationSchema(),
		"mem":      byteSizeSchema(),
		"list":     Schema{"type": "array", "items": Schema{"allOf": []any{Schema{"$ref": "#/components/schemas/inner"}}, "nullable": true}},
		"labels":   Schema{"type": "object", "additionalProperties": Schema{"type": "string"}},
		"raw":      Schema{"type": "string", "format": "byte"},
		"anything": Schema{},
		"opt":      Schema{"type": "integer", "format": "int32", "nullable": true},
		"NoTag":    Schema{"type": "boolean"},
	}
	if diff := cmp.Diff(want, props); diff != "" {
		t.Errorf("properties (-want +got):\n%s", diff)
	}
	if s.components["inner"] == nil {
		t.Error("inner was not registered as a component")
	}
}

// TestJobSpecSchema: the spec's schema has the fields a user writes,
// with durations as strings.
func TestJobSpecSchema(t *testing.T) {
	s := newSchemas()
	s.of(reflect.TypeFor[api.JobSpec]())
	props := s.components["JobSpec"]["properties"].(Schema)
	if props["ranks"] == nil || props["command"] == nil {
		t.Errorf("JobSpec lacks ranks or command: %v", props)
	}
	if tl, _ := props["timeLimit"].(Schema); tl["type"] != "string" {
		t.Errorf("timeLimit = %v, want a string", props["timeLimit"])
	}
}

// TestQueuePolicySchema: the queue's policy field lists the policies the
// API accepts.
func TestQueuePolicySchema(t *testing.T) {
	s := newSchemas()
	s.of(reflect.TypeFor[api.QueueSpec]())
	pol, _ := s.components["QueueSpec"]["properties"].(Schema)["policy"].(Schema)
	enum, _ := pol["enum"].([]any)
	if pol["type"] != "string" || len(enum) != len(api.QueuePolicies)+1 || pol["description"] == nil {
		t.Errorf("QueueSpec.policy = %v; want a string enum of the queue policies, described", pol)
	}
}

// TestQueueSettingsSchema: the queue's policy settings are described,
// with the policies that use them and their ranges.
func TestQueueSettingsSchema(t *testing.T) {
	s := newSchemas()
	s.of(reflect.TypeFor[api.QueueSpec]())
	props := s.components["QueueSpec"]["properties"].(Schema)
	for _, f := range []string{"laneShare", "overdueAfter", "levelBase", "minRun"} {
		sch, _ := props[f].(Schema)
		d, _ := sch["description"].(string)
		if !strings.Contains(d, "gangway") || !strings.Contains(d, "Absent") {
			t.Errorf("QueueSpec.%s = %v; want it described with the policies that use it and its default", f, sch)
		}
	}
}
