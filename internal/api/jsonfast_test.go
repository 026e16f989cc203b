package api

import (
	"bytes"
	"math"
	"reflect"
	"testing"

	"github.com/goccy/go-yaml"
)

var jsonSeeds = []string{
	`{"name":"b","ranks":1,"gpusPerRank":1,"command":["true"]}`,
	`{"name":"llm","queue":"team-a","ranks":16,"ranksPerNode":8,"command":["python3","train.py"],"env":{"NCCL_DEBUG":"WARN","Ünï":"x\u00e9"},"maxRestarts":3,"restartBackoff":"10s","resources":{"memoryBytes":68719476736,"cpuMillis":16000},"parallelism":{"tp":8,"pp":2},"topology":{"required":"leaf"},"timeLimit":"72h","preemptible":false,"array":"0-9%2"}`,
	`{"Ranks":1,"command":["true"]}`,                    // another case: YAML refuses it
	`{"ranks":1,"ranks":2,"command":["true"]}`,          // a repeated key
	`{"ranks":1,"gpusPerRank":null,"command":["true"]}`, // null
	`{"ranks":1.5,"command":["true"]}`,
	`{"ranks":1,"command":["true"]} {"ranks":2}`,
	`{"ranks":1,"command":["true"],"bogus":true}`,
	`{"ranks":1,"command":"true"}`,
	`{"ranks":1,"command":["true"],"env":{"A":1}}`,
	`{"ranks":1,"command":["true"],"restartBackoff":"forever"}`,
	`{"ranks":1e2,"command":["true"]}`,
	` {"ranks": 1, "command": ["t\"rue"], "workingDir": "/x"} `,
}

// yamlDecode is the strict YAML path alone.
func yamlDecode(data []byte, v any) error {
	dec := yaml.NewDecoder(bytes.NewReader(data), yaml.DisallowUnknownField(), yaml.UseJSONUnmarshaler())
	return dec.Decode(v)
}

func TestJSONFastPathTakesTypicalSpecs(t *testing.T) {
	for _, s := range jsonSeeds[:2] {
		var v JobSpec
		if !decodeJSONFast([]byte(s), &v) {
			t.Errorf("quick path refused %s", s)
		}
	}
	for _, s := range jsonSeeds[2:5] {
		var v JobSpec
		if decodeJSONFast([]byte(s), &v) {
			t.Errorf("quick path vouched for %s", s)
		}
	}
}

func FuzzJSONFastAgreesWithYAML(f *testing.F) {
	for _, s := range jsonSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for _, newV := range []func() any{
			func() any { return &JobSpec{GPUsPerRank: math.MinInt} },
			func() any { return &DeploymentSpec{} },
			func() any { return &QueueSpec{} },
		} {
			fast, slow := newV(), newV()
			if !decodeJSONFast([]byte(s), fast) {
				continue
			}
			if err := yamlDecode([]byte(s), slow); err != nil {
				t.Fatalf("quick path took %q, the strict YAML path refuses it: %v", s, err)
			}
			if !reflect.DeepEqual(fast, slow) {
				t.Fatalf("%q decodes differently:\n quick %+v\n  yaml %+v", s, fast, slow)
			}
		}
	})
}

// BenchmarkDecodeJobSpec is the submit path's decode: a JSON body as API
// clients send it (the quick path), and the same spec as YAML.
func BenchmarkDecodeJobSpec(b *testing.B) {
	for _, c := range []struct{ name, doc string }{
		{"json", jsonSeeds[1]},
		{"yaml", "name: llm\nqueue: team-a\nranks: 16\nranksPerNode: 8\ncommand: [python3, train.py]\nenv: {NCCL_DEBUG: WARN}\nmaxRestarts: 3\nrestartBackoff: 10s\nresources: {memoryBytes: 68719476736, cpuMillis: 16000}\nparallelism: {tp: 8, pp: 2}\ntopology: {required: leaf}\ntimeLimit: 72h\npreemptible: false\narray: 0-9%2\n"},
	} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				if _, err := DecodeJobSpec([]byte(c.doc)); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
