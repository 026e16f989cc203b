package planner

import (
	"errors"
	"strings"
	"testing"
)

func TestBestPlan(t *testing.T) {
	cat := DefaultCatalog()
	p, reason, err := cat.BestPlan(Request{Model: "llama3-70b", GPU: "H100", GPUs: 1024, GPUsPerDomain: 8, Seq: 8192, GlobalBatch: 1024})
	if err != nil || p == nil {
		t.Fatalf("BestPlan: plan %v, reason %q, err %v", p, reason, err)
	}
	if p.TP*p.PP*p.DP != 1024 || p.TokensPerSecPerGPU <= 0 || p.PeakMemoryBytes <= 0 {
		t.Errorf("implausible plan %+v", p)
	}
	// The same request searched directly gives the same winner.
	j, _ := cat.Job(Request{Model: "llama3-70b", GPU: "H100", GPUs: 1024, GPUsPerDomain: 8, Seq: 8192, GlobalBatch: 1024})
	if best := Search(SearchRequest{Job: j, Top: 1}).Best[0]; best.Config.TP != p.TP || best.Config.PP != p.PP || best.Config.DP != p.DP {
		t.Errorf("BestPlan %+v differs from Search %s", p, best.Config)
	}

	p, reason, err = cat.BestPlan(Request{Model: "llama3-405b", GPU: "A100", GPUs: 8, Seq: 8192, GlobalBatch: 8})
	if err != nil || p != nil || !strings.Contains(reason, "GiB usable") {
		t.Errorf("405B on 8 A100: plan %v, reason %q, err %v", p, reason, err)
	}

	for _, bad := range []Request{
		{Model: "nope", GPU: "H100", GPUs: 8, Seq: 2048, GlobalBatch: 8},
		{Model: "llama3-8b", GPU: "nope", GPUs: 8, Seq: 2048, GlobalBatch: 8},
		{Model: "llama3-8b", GPU: "H100", GPUs: 0, Seq: 2048, GlobalBatch: 8},
		{Model: "llama3-8b", GPU: "H100", GPUs: 8, Seq: 2048, GlobalBatch: 8, Stack: "jax"},
		{Model: "llama3-8b", GPU: "H100", GPUs: 8, Seq: 2048, GlobalBatch: 8, Precision: "int4"},
	} {
		if _, _, err := cat.BestPlan(bad); err == nil {
			t.Errorf("BestPlan(%+v) accepted a bad request", bad)
		}
	}
}

func TestCheck(t *testing.T) {
	cat := DefaultCatalog()
	req := Request{Model: "llama3-70b", GPU: "H100", GPUs: 64, Seq: 8192, GlobalBatch: 64}
	for _, tt := range []struct {
		name       string
		tp, pp, dp int
		ok         bool
		want       string
	}{
		{"fits", 8, 4, 2, true, ""},
		{"dp from the rest", 8, 8, 0, true, ""},
		{"tp beyond the NVLink domain", 16, 4, 1, false, "exceeds the NVLink domain of 8"},
		{"wrong product", 8, 4, 4, false, "the job has 64 GPUs"},
		{"pure data parallel does not fit", 1, 1, 64, false, "does not fit in memory"},
		{"tp does not divide kv heads", 3, 1, 1, false, "heads"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			v, err := cat.Check(req, tt.tp, tt.pp, tt.dp)
			if err != nil {
				t.Fatal(err)
			}
			if v.OK != tt.ok {
				t.Fatalf("OK = %v, want %v (reasons %q)", v.OK, tt.ok, v.Reasons)
			}
			if tt.ok {
				if v.Plan == nil || v.Plan.PeakMemoryBytes > UsableBytes(mustGPU(t, "H100")) {
					t.Errorf("plan %+v", v.Plan)
				}
				return
			}
			if !strings.Contains(strings.Join(v.Reasons, "; "), tt.want) {
				t.Errorf("reasons %q do not mention %q", v.Reasons, tt.want)
			}
		})
	}
	if _, err := cat.Check(req, 0, 1, 1); !errors.Is(err, ErrBadRequest) {
		t.Errorf("tp=0: err %v, want ErrBadRequest", err)
	}
	// A bigger domain admits TP 16 (GB200 NVL72).
	v, err := cat.Check(Request{Model: "llama3-405b", GPU: "GB200", GPUs: 144, Seq: 8192, GlobalBatch: 144}, 16, 1, 9)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range v.Reasons {
		if strings.Contains(r, "NVLink domain") {
			t.Errorf("tp=16 on NVL72 rejected: %s", r)
		}
	}
}

func mustGPU(t *testing.T, name string) GPU {
	t.Helper()
	g, err := DefaultCatalog().GPU(name)
	if err != nil {
		t.Fatal(err)
	}
	return g
}
