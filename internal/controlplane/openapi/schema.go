package openapi

import (
	"encoding"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/gangway/gangway/internal/api"
)

// Schema is one JSON Schema object of the document, as OpenAPI 3.0 spells
// it. It is a map so that the document is plain JSON to build and to read
// back in tests.
type Schema = map[string]any

// schemas derives component schemas from Go types by their encoding/json
// form: a named struct becomes a component (referenced by name) whose
// properties are its JSON fields; everything else is inlined. It is not
// safe for concurrent use; Build uses one per document.
type schemas struct {
	// components holds every named struct met so far, by name.
	components map[string]Schema
	// byType names the component of each struct type, so that two types
	// of one name from different packages are not silently merged.
	byType map[reflect.Type]string
}

func newSchemas() *schemas {
	return &schemas{components: map[string]Schema{}, byType: map[reflect.Type]string{}}
}

var (
	timeType      = reflect.TypeFor[time.Time]()
	durationType  = reflect.TypeFor[api.Duration]()
	byteSizeType  = reflect.TypeFor[api.ByteSize]()
	marshalerType = reflect.TypeFor[json.Marshaler]()
	textType      = reflect.TypeFor[encoding.TextMarshaler]()
)

// of is the schema of a value of type t as encoding/json writes it.
func (s *schemas) of(t reflect.Type) Schema {
	switch t {
	case timeType:
		return Schema{"type": "string", "format": "date-time"}
	case durationType:
		return durationSchema()
	case byteSizeType:
		return byteSizeSchema()
	}
	if t.Kind() == reflect.Pointer {
		sch := s.of(t.Elem())
		if _, isRef := sch["$ref"]; isRef {
			// A $ref takes no siblings in OpenAPI 3.0.
			return Schema{"allOf": []any{sch}, "nullable": true}
		}
		sch["nullable"] = true
		return sch
	}
	if t.Implements(marshalerType) || t.Implements(textType) {
		// A type that writes itself: say what it writes only when known
		// (above); a text marshaler writes a string.
		if t.Implements(textType) && !t.Implements(marshalerType) {
			return Schema{"type": "string"}
		}
		return Schema{}
	}
	switch t.Kind() {
	case reflect.Bool:
		return Schema{"type": "boolean"}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Uint8, reflect.Uint16, reflect.Uint32:
		return Schema{"type": "integer", "format": "int32"}
	case reflect.Int64, reflect.Uint, reflect.Uint64, reflect.Uintptr:
		return Schema{"type": "integer", "format": "int64"}
	case reflect.Float32:
		return Schema{"type": "number", "format": "float"}
	case reflect.Float64:
		return Schema{"type": "number", "format": "double"}
	case reflect.String:
		return Schema{"type": "string"}
	case reflect.Slice, reflect.Array:
		if t.Elem().Kind() == reflect.Uint8 && t.Kind() == reflect.Slice {
			return Schema{"type": "string", "format": "byte"}
		}
		return Schema{"type": "array", "items": s.of(t.Elem())}
	case reflect.Map:
		return Schema{"type": "object", "additionalProperties": s.of(t.Elem())}
	case reflect.Struct:
		if t.Name() == "" {
			return s.object(t)
		}
		return s.ref(t)
	}
	// Interfaces (any): whatever JSON value.
	return Schema{}
}

// fieldKey names one JSON field of a struct type.
type fieldKey struct {
	t    reflect.Type
	name string
}

// fieldSchemas are the fields whose schema says more than their Go type:
// strings that take one of a few values.
var fieldSchemas = map[fieldKey]func() Schema{
	{reflect.TypeFor[api.QueueSpec](), "policy"}: func() Schema {
		return Schema{"type": "string", "enum": append([]any{""}, anys(api.QueuePolicies)...),
			"description": "How the queue's pending jobs are ordered and whether they preempt its running ones (job priorities rank above it; guarantees still preempt borrowers). Empty: " + api.DefaultQueuePolicy + "."}
	},
	{reflect.TypeFor[api.QueueSpec](), "laneShare"}: func() Schema {
		return Schema{"type": "number", "format": "double", "minimum": 0, "exclusiveMinimum": true, "maximum": 1,
			"description": "Policy setting (" + usedBy("laneShare") + "): the share of the cluster's GPUs that jobs in the overdue lane may hold, in (0, 1]. Absent: 0.25."}
	},
	{reflect.TypeFor[api.QueueSpec](), "overdueAfter"}: func() Schema {
		return settingDuration("overdueAfter", "how long a job waits in one go before it is overdue (gangway: it enters the lane; gangway-4h, las: it ranks above every level)", api.MinOverdueAfter, api.MaxOverdueAfter, "4h")
	},
	{reflect.TypeFor[api.QueueSpec](), "levelBase"}: func() Schema {
		return settingDuration("levelBase", "the GPU-time a job attains before it leaves the first level, as a duration of one GPU (1h: one GPU-hour); each next level doubles it, 13 levels in all", api.MinLevelBase, api.MaxLevelBase, "1h")
	},
	{reflect.TypeFor[api.QueueSpec](), "minRun"}: func() Schema {
		return settingDuration("minRun", "how long a started job is not preempted for the policy, so that it can checkpoint", api.MinMinRun, api.MaxMinRun, "2m")
	},
	{reflect.TypeFor[api.QueueSpec](), "laneTurn"}: func() Schema {
		return settingDuration("laneTurn", "how long a job started in the overdue lane runs there before it leaves it for its level, where it may be preempted", api.MinLaneTurn, api.MaxLaneTurn, "4h")
	},
}

// settingDuration is the schema of a queue policy's duration setting.
func settingDuration(field, what string, lo, hi time.Duration, def string) Schema {
	s := durationSchema()
	s["description"] = fmt.Sprintf("Policy setting (%s): %s; from %s to %s. Absent: %s. %s", usedBy(field), what, lo, hi, def, s["description"])
	return s
}

// usedBy names the queue policies that take a setting; the others refuse it.
func usedBy(field string) string {
	var ps []string
	for p, fs := range api.QueuePolicySettings {
		if slices.Contains(fs, field) {
			ps = append(ps, p)
		}
	}
	slices.Sort(ps)
	return "policies " + strings.Join(ps, ", ") + "; the others refuse it"
}

func anys(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

func durationSchema() Schema {
	return Schema{"type": "string", "description": `A duration: Go's form ("90s", "1h30m"), Slurm's ("2:00:00", "1-00:00:00") or a bare number of minutes; written back in Go's form.`, "example": "1h30m0s"}
}

func byteSizeSchema() Schema {
	return Schema{"type": "integer", "format": "int64", "description": `Bytes. Specs may also give a string with units ("64G", "64Gi").`}
}

// ref registers the named struct t as a component (once) and refers to
// it.
func (s *schemas) ref(t reflect.Type) Schema {
	name, ok := s.byType[t]
	if !ok {
		name = componentName(t)
		if _, taken := s.components[name]; taken {
			// Another package's type of the same name.
			name = strings.ReplaceAll(t.PkgPath(), "/", ".") + "." + name
		}
		s.byType[t] = name
		s.components[name] = nil // placeholder: recursive types stop here
		s.components[name] = s.object(t)
	}
	return Schema{"$ref": "#/components/schemas/" + name}
}

// componentName is t's name without a generic type's arguments' paths.
func componentName(t reflect.Type) string {
	n := t.Name()
	if i := strings.IndexByte(n, '['); i >= 0 {
		n = n[:i]
	}
	return n
}

// object is the schema of struct t's JSON fields, embedded structs'
// fields promoted as encoding/json promotes them.
func (s *schemas) object(t reflect.Type) Schema {
	props := Schema{}
	s.fields(t, props)
	return Schema{"type": "object", "properties": props}
}

func (s *schemas) fields(t reflect.Type, props Schema) {
	var embedded []reflect.Type
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if f.Anonymous && name == "" {
			et := f.Type
			if et.Kind() == reflect.Pointer {
				et = et.Elem()
			}
			if et.Kind() == reflect.Struct {
				embedded = append(embedded, et)
				continue
			}
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		if strings.Contains(","+opts+",", ",string,") {
			props[name] = Schema{"type": "string"}
			continue
		}
		if fs, ok := fieldSchemas[fieldKey{t, name}]; ok {
			props[name] = fs()
			continue
		}
		props[name] = s.of(f.Type)
	}
	// Promoted fields after the struct's own: the shallower field wins,
	// as in encoding/json.
	for _, et := range embedded {
		inner := Schema{}
		s.fields(et, inner)
		for k, v := range inner {
			if _, ok := props[k]; !ok {
				props[k] = v
			}
		}
	}
}
