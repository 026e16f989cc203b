package store

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/gangway/gangway/internal/api"
)

// The cache keeps every live job for as long as it lives: what it decodes
// must not carry spare slice capacity (a decoder that starts every slice
// at 10 elements made a running job six times its size).
func TestCachedJobsCarryNoSpareCapacity(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 16, 0, 0, 0, time.UTC)
	j := &api.Job{ID: "7", SubmittedAt: t0}
	j.Spec.Ranks, j.Spec.GPUsPerRank = 2, 4
	j.Spec.Command = []string{"python3", "train.py"}
	j.Status.Phase = api.JobRunning
	j.Status.Attempts = []api.Attempt{{Number: 1, Phase: api.AttemptRunning, CreatedAt: t0,
		Placement: []api.RankPlacement{{Rank: 0, Node: "n1", GPUs: []int{0, 1, 2, 3}}, {Rank: 1, Node: "n2", GPUs: []int{4, 5, 6, 7}}}}}
	b, err := json.Marshal(j)
	if err != nil {
		t.Fatal(err)
	}
	var got api.Job
	if err := decodeCachedJob(b, &got); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(&got, j) {
		t.Fatalf("decoded %+v, want %+v", got, *j)
	}
	var walk func(path string, v reflect.Value)
	walk = func(path string, v reflect.Value) {
		switch v.Kind() {
		case reflect.Pointer, reflect.Interface:
			if !v.IsNil() {
				walk(path, v.Elem())
			}
		case reflect.Struct:
			for i := 0; i < v.NumField(); i++ {
				if v.Type().Field(i).IsExported() {
					walk(path+"."+v.Type().Field(i).Name, v.Field(i))
				}
			}
		case reflect.Slice:
			if v.Cap() > v.Len() {
				t.Errorf("%s: %d elements in room for %d", path, v.Len(), v.Cap())
			}
			for i := 0; i < v.Len(); i++ {
				walk(path, v.Index(i))
			}
		case reflect.Map:
			for _, k := range v.MapKeys() {
				walk(path, v.MapIndex(k))
			}
		}
	}
	walk("job", reflect.ValueOf(&got))
}
