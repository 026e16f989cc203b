package topology

import "testing"

func TestSelects(t *testing.T) {
	labels := map[string]string{"zone": "a", "gpu-model": "H100", "empty": ""}
	tests := []struct {
		name string
		eq   map[string]string
		in   map[string][]string
		want bool
	}{
		{"empty selector matches", nil, nil, true},
		{"equal label", map[string]string{"zone": "a"}, nil, true},
		{"different value", map[string]string{"zone": "b"}, nil, false},
		{"missing label", map[string]string{"rack": "1"}, nil, false},
		{"missing label is not the empty value", map[string]string{"rack": ""}, nil, false},
		{"present empty value", map[string]string{"empty": ""}, nil, true},
		{"all of eq", map[string]string{"zone": "a", "gpu-model": "A100"}, nil, false},
		{"in: one of", nil, map[string][]string{"gpu-model": {"A100", "H100"}}, true},
		{"in: none of", nil, map[string][]string{"gpu-model": {"A100", "B200"}}, false},
		{"in: missing label", nil, map[string][]string{"rack": {"1"}}, false},
		{"in: empty list matches nothing", nil, map[string][]string{"zone": {}}, false},
		{"eq and in together", map[string]string{"zone": "a"}, map[string][]string{"gpu-model": {"H100"}}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := Selects(tc.eq, tc.in, labels); got != tc.want {
				t.Errorf("Selects(%v, %v) = %v, want %v", tc.eq, tc.in, got, tc.want)
			}
		})
	}
}
