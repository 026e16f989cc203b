package hardware

import (
	"errors"
	"go/parser"
	"go/token"
	"os"
	"strconv"
	"strings"
	"testing"
)

func TestLookupGPU(t *testing.T) {
	tests := []struct{ in, want string }{
		{"H100-SXM-80GB", "H100-SXM-80GB"},
		{"h100", "H100-SXM-80GB"},
		{"H100-SXM", "H100-SXM-80GB"},                 // the planner's old name
		{"  NVIDIA H100 80GB HBM3 ", "H100-SXM-80GB"}, // NVML's
		{"h100-sxm5-80gb", "H100-SXM-80GB"},
		{"A100-SXM-80GB", "A100-SXM4-80GB"},
		{"nvidia a100-sxm4-80gb", "A100-SXM4-80GB"},
		{"H200", "H200-SXM-141GB"},
		{"NVIDIA H200", "H200-SXM-141GB"},
		{"b200", "B200-SXM-180GB"},
		{"GB200", "GB200-NVL72"},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			g, err := LookupGPU(tc.in)
			if err != nil || g.Name != tc.want {
				t.Errorf("LookupGPU(%q) = %q, %v; want %q", tc.in, g.Name, err, tc.want)
			}
		})
	}
	for _, in := range []string{"V100", "", "H10", "NVIDIA GeForce RTX 4090"} {
		if g, err := LookupGPU(in); !errors.Is(err, ErrUnknown) || !strings.Contains(err.Error(), "H100-SXM-80GB") {
			t.Errorf("LookupGPU(%q) = %q, %v; want ErrUnknown listing the known GPUs", in, g.Name, err)
		}
	}
}

func TestLookupModel(t *testing.T) {
	tests := []struct{ in, want string }{
		{"llama3-70b", "llama3-70b"},
		{"Llama-3-70B", "llama3-70b"},
		{"meta-llama/Meta-Llama-3-70B-Instruct", "llama3-70b"},
		{"meta-llama/Llama-3.1-8B-Instruct", "llama3-8b"},
		{"Qwen/Qwen3-32B", "Qwen3-32B"},
		{"qwen3-0.6b", "Qwen3-0.6B"},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			m, err := LookupModel(tc.in)
			if err != nil || m.Name != tc.want {
				t.Errorf("LookupModel(%q) = %q, %v; want %q", tc.in, m.Name, err, tc.want)
			}
		})
	}
	if _, err := LookupModel("GPT-9"); !errors.Is(err, ErrUnknown) || !strings.Contains(err.Error(), "unknown model") {
		t.Errorf("LookupModel(GPT-9) = %v, want ErrUnknown saying unknown model", err)
	}
}

// TestCatalogIsConsistent: every entry is valid and every name, alias or
// NVML name finds exactly one entry.
func TestCatalogIsConsistent(t *testing.T) {
	seen := map[string]string{}
	for _, g := range GPUs() {
		if err := g.Validate(); err != nil {
			t.Error(err)
		}
		if g.DeviceMemoryBytes > g.MemoryBytes || (g.DeviceMemoryBytes > 0 && g.DeviceMemoryBytes < g.MemoryBytes*95/100) {
			t.Errorf("%s: NVML's %d bytes is not just under the data sheet's %d", g.Name, g.DeviceMemoryBytes, g.MemoryBytes)
		}
		for _, n := range g.Names() {
			if prev, ok := seen[strings.ToLower(n)]; ok {
				t.Errorf("%q names both %s and %s", n, prev, g.Name)
			}
			seen[strings.ToLower(n)] = g.Name
		}
	}
	seen = map[string]string{}
	for _, m := range Models() {
		if err := m.Validate(); err != nil {
			t.Error(err)
		}
		for _, n := range append([]string{m.Name}, m.Aliases...) {
			if prev, ok := seen[strings.ToLower(n)]; ok {
				t.Errorf("%q names both %s and %s", n, prev, m.Name)
			}
			seen[strings.ToLower(n)] = m.Name
		}
	}
}

// TestParams checks the shape formulas against published parameter
// counts (Hugging Face model cards).
func TestParams(t *testing.T) {
	tests := []struct {
		model string
		want  float64 // billions
	}{
		{"llama3-8b", 8.03},
		{"llama3-70b", 70.55},
		{"Qwen3-32B", 32.76},
		{"Qwen3-8B", 8.19},
		{"Qwen3-0.6B", 0.596},
	}
	for _, tc := range tests {
		t.Run(tc.model, func(t *testing.T) {
			m, err := LookupModel(tc.model)
			if err != nil {
				t.Fatal(err)
			}
			got := float64(m.Params()) / 1e9
			if got < tc.want*0.995 || got > tc.want*1.005 {
				t.Errorf("Params = %.3fB, published %.3fB", got, tc.want)
			}
		})
	}
}

// TestImportsOnlyTheStandardLibrary holds the package doc to its word.
func TestImportsOnlyTheStandardLibrary(t *testing.T) {
	entries, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".go") || strings.HasSuffix(e.Name(), "_test.go") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), e.Name(), nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range f.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			if first, _, _ := strings.Cut(path, "/"); strings.Contains(first, ".") {
				t.Errorf("%s imports %s, outside the standard library", e.Name(), path)
			}
		}
	}
}
