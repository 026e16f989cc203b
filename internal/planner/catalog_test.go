package planner

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestCatalogLookup(t *testing.T) {
	cat := DefaultCatalog()
	for _, tt := range []struct{ name, want string }{
		{"H100", "H100-SXM-80GB"},
		{"H100-SXM", "H100-SXM-80GB"},
		{"h100-sxm5-80gb", "H100-SXM-80GB"},
		{"NVIDIA H100 80GB HBM3", "H100-SXM-80GB"},
		{"A100-SXM-80GB", "A100-SXM4-80GB"},
		{"NVIDIA Ampere (A100 assumed, 312 TF peak used for MFU)", "A100-SXM4-80GB"},
		{"GB200", "GB200-NVL72"},
		{"B200", "B200-SXM-180GB"},
		{"nvidia gb200 nvl72 rack", "GB200-NVL72"},
		{"H200", "H200-SXM-141GB"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			g, err := cat.GPU(tt.name)
			if err != nil {
				t.Fatal(err)
			}
			if g.Name != tt.want {
				t.Errorf("GPU(%q) = %s, want %s", tt.name, g.Name, tt.want)
			}
		})
	}
	if _, err := cat.GPU("TPUv5"); !errors.Is(err, ErrUnknown) {
		t.Errorf("unknown GPU: err = %v, want ErrUnknown", err)
	}
	if _, err := cat.Model("gpt-5"); !errors.Is(err, ErrUnknown) || !strings.Contains(err.Error(), "llama3-70b") {
		t.Errorf("unknown model: err = %v, want ErrUnknown listing the known models", err)
	}
}

func TestCatalogHardwareMatchesBenchmarks(t *testing.T) {
	// ../shared/BENCHMARKS.md "Hardware numbers".
	cat := DefaultCatalog()
	for _, tt := range []struct {
		gpu             string
		memGiB          float64
		bf16, fp8       float64 // TFLOP/s
		nvlinkGBs       float64
		domain          int
		nicGbit, hbmTBs float64
	}{
		{"A100", 80, 312, 0, 600, 8, 200, 2.0},
		{"H100", 80, 989, 1979, 900, 8, 400, 3.35},
		{"H200", 141, 989, 1979, 900, 8, 400, 4.8},
		{"B200", 180, 2250, 4500, 1800, 8, 400, 8},
		{"GB200", 186, 2500, 5000, 1800, 72, 400, 8},
	} {
		g, err := cat.GPU(tt.gpu)
		if err != nil {
			t.Fatal(err)
		}
		got := []float64{float64(g.MemoryBytes) / gib, g.BF16FLOPS / 1e12, g.FP8FLOPS / 1e12, g.NVLinkBytesPerSec / 1e9,
			float64(g.NVLinkDomain), g.NICBitsPerSec / 1e9, g.HBMBytesPerSec / 1e12}
		want := []float64{tt.memGiB, tt.bf16, tt.fp8, tt.nvlinkGBs, float64(tt.domain), tt.nicGbit, tt.hbmTBs}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%s (-want +got)\n%s", tt.gpu, diff)
		}
	}
}

const goodCatalog = `gpus:
  - name: MI300X
    aliases: [mi300x, mi300]
    memory_gib: 192
    hbm_tb_per_s: 5.3
    bf16_tflops: 1307
    fp8_tflops: 2615
    nvlink_gb_per_s: 896
    nvlink_domain: 8
    gpus_per_node: 8
    nic_gbit_per_s: 400
models:
  - name: my-13b
    layers: 40
    hidden: 5120
    heads: 40
    kv_heads: 8
    ffn: 13824
    vocab: 32000
    mlp: swiglu
  - name: Llama3-8B
    layers: 2
    hidden: 64
    heads: 4
    ffn: 128
    vocab: 100
    mlp: gelu
    tied_embeddings: true
`

func TestCatalogLoad(t *testing.T) {
	cat := DefaultCatalog()
	if err := cat.Load(strings.NewReader(goodCatalog)); err != nil {
		t.Fatal(err)
	}
	g, err := cat.GPU("mi300")
	if err != nil {
		t.Fatal(err)
	}
	if g.MemoryBytes != 192*gib || g.FP8FLOPS != 2615e12 || g.NICBitsPerSec != 400e9 {
		t.Errorf("MI300X decoded as %+v", g)
	}
	m, err := cat.Model("my-13b")
	if err != nil {
		t.Fatal(err)
	}
	want := Model{Name: "my-13b", Layers: 40, Hidden: 5120, Heads: 40, KVHeads: 8, FFN: 13824, Vocab: 32000, MLP: MLPSwiGLU, RoPE: true}
	if diff := cmp.Diff(want, m); diff != "" {
		t.Errorf("my-13b (-want +got)\n%s", diff)
	}
	// A sliding window without a layer count applies to every layer.
	if err := cat.Load(strings.NewReader("models:\n  - {name: win, layers: 4, hidden: 8, heads: 2, ffn: 8, vocab: 10, mlp: swiglu, sliding_window: 128}\n")); err != nil {
		t.Fatal(err)
	}
	if w, _ := cat.Model("win"); w.SlidingWindow != 128 || w.WindowedLayers != 4 {
		t.Errorf("sliding_window 128: window %d on %d layers, want 128 on all 4", w.SlidingWindow, w.WindowedLayers)
	}
	// A user entry replaces the built-in of the same name (case-insensitive);
	// kv_heads defaults to heads.
	l, _ := cat.Model("llama3-8b")
	if l.Layers != 2 || l.KVHeads != 4 || !l.TiedEmbeddings {
		t.Errorf("override not applied: %+v", l)
	}
}

func TestCatalogErrorsNameLineAndColumn(t *testing.T) {
	for _, tt := range []struct {
		name string
		yaml string
		want []string
	}{
		{"unknown field", "gpus:\n  - name: X\n    memory_gb: 80\n", []string{"[3:5]", "memory_gb"}},
		{"unknown top-level field", "gpu:\n  - name: X\n", []string{"[1:1]", "gpu"}},
		{"wrong type", "models:\n  - name: m\n    layers: many\n", []string{"[3:13] layers: want int, got string"}},
		{"missing field", "models:\n  - name: m\n    layers: 2\n    hidden: 8\n    heads: 2\n    vocab: 10\n    mlp: gelu\n",
			[]string{"[2:", "models[0]", "ffn must be positive"}},
		{"invalid value", "gpus:\n  - name: X\n    memory_gib: 80\n    hbm_tb_per_s: 3\n    bf16_tflops: -1\n",
			[]string{"[5:18]", "gpus[0]", "bf16_tflops must be positive"}},
		{"bad mlp", "models:\n  - name: m\n    layers: 2\n    hidden: 8\n    heads: 2\n    ffn: 8\n    vocab: 10\n    mlp: relu\n",
			[]string{"[8:10]", "mlp"}},
		{"heads do not divide hidden", "models:\n  - name: m\n    layers: 2\n    hidden: 9\n    heads: 2\n    ffn: 8\n    vocab: 10\n    mlp: gelu\n",
			[]string{"[4:13]", "hidden 9 is not a multiple of heads 2"}},
		{"duplicate", "models:\n  - {name: m, layers: 1, hidden: 2, heads: 1, ffn: 2, vocab: 2, mlp: gelu}\n  - {name: M, layers: 1, hidden: 2, heads: 1, ffn: 2, vocab: 2, mlp: gelu}\n",
			[]string{"models[1]", "duplicate"}},
		{"bad sliding window", "models:\n  - name: m\n    layers: 2\n    hidden: 8\n    heads: 2\n    ffn: 8\n    vocab: 10\n    mlp: gelu\n    sliding_window: -4\n",
			[]string{"models[0]", "sliding_window must not be negative"}},
		{"syntax", "gpus: [\n", []string{"catalog:"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := ParseCatalog([]byte(tt.yaml))
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

// FuzzParseCatalog: any input either decodes into entries that validate
// and can be planned with, or returns an error; it never panics.
func FuzzParseCatalog(f *testing.F) {
	f.Add([]byte(goodCatalog))
	f.Add([]byte("gpus:\n  - name: X\n    memory_gb: 80\n"))
	f.Add([]byte("models: []\n"))
	f.Add([]byte("models:\n  - {name: m, layers: 1, hidden: 2, heads: 1, ffn: 2, vocab: 2, mlp: swiglu, kv_heads: 1}\n"))
	f.Add([]byte("{"))
	f.Fuzz(func(t *testing.T, data []byte) {
		gpus, models, err := ParseCatalog(data)
		if err != nil {
			return
		}
		for _, g := range gpus {
			if err := g.Validate(); err != nil {
				t.Fatalf("decoded an invalid GPU: %v", err)
			}
		}
		for _, m := range models {
			if err := m.Validate(); err != nil {
				t.Fatalf("decoded an invalid model: %v", err)
			}
			if m.Params() <= 0 {
				t.Fatalf("model %q has %d params", m.Name, m.Params())
			}
			_ = ActivationBytesPerLayer(m, 1, 16, 1, false, false, true, RecomputeNone)
		}
	})
}
