package planner

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/gangway/gangway/internal/base/yamlpos"
	"github.com/gangway/gangway/internal/hardware"
	"github.com/goccy/go-yaml"
)

// Catalog is the set of GPUs and models the planner knows by name: the
// hardware catalog's, extended by the user's YAML (Load). The zero value
// is empty; DefaultCatalog returns the hardware catalog's entries. A
// Catalog is not safe for concurrent mutation; lookups may run
// concurrently once loading is done.
type Catalog struct {
	gpus                 map[string]GPU   // by lower-case name and alias
	models               map[string]Model // by lower-case name and alias
	gpuNames, modelNames []string
}

// ErrUnknown is wrapped when a catalog lookup finds nothing.
var ErrUnknown = errors.New("planner: not in catalog")

const (
	gbs  = 1e9
	tera = 1e12
)

// DefaultCatalog returns the GPUs and models of the hardware catalog
// (internal/hardware), which a YAML extension (Load) may add to.
func DefaultCatalog() *Catalog {
	c := &Catalog{}
	for _, g := range hardware.GPUs() {
		c.AddGPU(g)
	}
	for _, m := range hardware.Models() {
		c.AddModel(m)
	}
	return c
}

// AddGPU adds or replaces a GPU (by name; aliases and NVML's name are
// added too).
func (c *Catalog) AddGPU(g GPU) {
	if c.gpus == nil {
		c.gpus = map[string]GPU{}
	}
	key := strings.ToLower(g.Name)
	if _, ok := c.gpus[key]; !ok {
		c.gpuNames = append(c.gpuNames, g.Name)
	}
	for _, n := range g.Names() {
		c.gpus[strings.ToLower(n)] = g
	}
}

// AddModel adds or replaces a model by name (aliases are added too).
func (c *Catalog) AddModel(m Model) {
	if c.models == nil {
		c.models = map[string]Model{}
	}
	key := strings.ToLower(m.Name)
	if _, ok := c.models[key]; !ok {
		c.modelNames = append(c.modelNames, m.Name)
	}
	c.models[key] = m
	for _, a := range m.Aliases {
		c.models[strings.ToLower(a)] = m
	}
}

// GPU looks a GPU up by name or alias, case-insensitively. Failing that,
// it accepts a unique catalog name or alias contained in name ("NVIDIA
// A100-SXM4-80GB" finds A100).
func (c *Catalog) GPU(name string) (GPU, error) {
	key := strings.ToLower(strings.TrimSpace(name))
	if g, ok := c.gpus[key]; ok {
		return g, nil
	}
	// Longest alias contained in the name wins ("gb200" before "b200").
	var best string
	for k := range c.gpus {
		if len(k) >= 4 && strings.Contains(key, k) && len(k) > len(best) {
			best = k
		}
	}
	if best != "" {
		return c.gpus[best], nil
	}
	return GPU{}, fmt.Errorf("%w: gpu %q (known: %s)", ErrUnknown, name, strings.Join(c.GPUNames(), ", "))
}

// Model looks a model up by name or alias, case-insensitively.
func (c *Catalog) Model(name string) (Model, error) {
	if m, ok := c.models[strings.ToLower(strings.TrimSpace(name))]; ok {
		return m, nil
	}
	return Model{}, fmt.Errorf("%w: model %q (known: %s)", ErrUnknown, name, strings.Join(c.ModelNames(), ", "))
}

// GPUNames lists the GPU names in the order they were added.
func (c *Catalog) GPUNames() []string { return append([]string(nil), c.gpuNames...) }

// ModelNames lists the model names, sorted.
func (c *Catalog) ModelNames() []string {
	n := append([]string(nil), c.modelNames...)
	sort.Strings(n)
	return n
}

// catalogFile is the YAML form of a catalog extension. Units are in the
// field names.
type catalogFile struct {
	GPUs   []gpuEntry   `yaml:"gpus"`
	Models []modelEntry `yaml:"models"`
}

type gpuEntry struct {
	Name         string   `yaml:"name"`
	Aliases      []string `yaml:"aliases"`
	MemoryGiB    float64  `yaml:"memory_gib"`
	HBMTBPerSec  float64  `yaml:"hbm_tb_per_s"`
	BF16TFLOPS   float64  `yaml:"bf16_tflops"`
	FP8TFLOPS    float64  `yaml:"fp8_tflops"`
	NVLinkGBPerS float64  `yaml:"nvlink_gb_per_s"`
	NVLinkDomain int      `yaml:"nvlink_domain"`
	GPUsPerNode  int      `yaml:"gpus_per_node"`
	NICGbitPerS  float64  `yaml:"nic_gbit_per_s"`
}

type modelEntry struct {
	Name             string `yaml:"name"`
	Layers           int    `yaml:"layers"`
	Hidden           int    `yaml:"hidden"`
	Heads            int    `yaml:"heads"`
	KVHeads          int    `yaml:"kv_heads"`
	FFN              int    `yaml:"ffn"`
	Vocab            int    `yaml:"vocab"`
	MLP              string `yaml:"mlp"`
	TiedEmbeddings   bool   `yaml:"tied_embeddings"`
	Biases           bool   `yaml:"biases"`
	LearnedPositions int    `yaml:"learned_positions"`
	Dropout          bool   `yaml:"dropout"`
	// RoPE: rotary position embeddings; default true for a SwiGLU model
	// without learned positions (Llama, Qwen, Mixtral), else false.
	RoPE *bool `yaml:"rope"`
	// Mixture of experts (all 0 for a dense model).
	Experts         int `yaml:"experts"`
	ExpertsPerToken int `yaml:"experts_per_token"`
	SharedExperts   int `yaml:"shared_experts"`
	ExpertFFN       int `yaml:"expert_ffn"`
	DenseLayers     int `yaml:"dense_layers"`
	// Sliding-window attention: the window in tokens and how many layers
	// use it (absent with a window: all of them).
	SlidingWindow       int `yaml:"sliding_window"`
	SlidingWindowLayers int `yaml:"sliding_window_layers"`
}

// gpu converts the entry, reporting the first missing or invalid field.
func (e gpuEntry) gpu() (GPU, string, error) {
	req := func(field string, v float64) error {
		if v <= 0 {
			return fmt.Errorf("%s must be positive, got %v", field, v)
		}
		return nil
	}
	for _, f := range []struct {
		name string
		v    float64
	}{
		{"memory_gib", e.MemoryGiB}, {"hbm_tb_per_s", e.HBMTBPerSec}, {"bf16_tflops", e.BF16TFLOPS},
		{"nvlink_gb_per_s", e.NVLinkGBPerS}, {"nvlink_domain", float64(e.NVLinkDomain)},
		{"gpus_per_node", float64(e.GPUsPerNode)}, {"nic_gbit_per_s", e.NICGbitPerS},
	} {
		if err := req(f.name, f.v); err != nil {
			return GPU{}, f.name, err
		}
	}
	if e.FP8TFLOPS < 0 {
		return GPU{}, "fp8_tflops", fmt.Errorf("fp8_tflops must not be negative, got %v", e.FP8TFLOPS)
	}
	if e.Name == "" {
		return GPU{}, "name", errors.New("name is required")
	}
	if e.MemoryGiB > 1<<20 {
		return GPU{}, "memory_gib", fmt.Errorf("memory_gib %v is implausible (over 1 PiB)", e.MemoryGiB)
	}
	g := GPU{
		Name: e.Name, Aliases: e.Aliases,
		MemoryBytes:       int64(e.MemoryGiB * gib),
		HBMBytesPerSec:    e.HBMTBPerSec * tera,
		BF16FLOPS:         e.BF16TFLOPS * tera,
		FP8FLOPS:          e.FP8TFLOPS * tera,
		NVLinkBytesPerSec: e.NVLinkGBPerS * gbs,
		NVLinkDomain:      e.NVLinkDomain,
		GPUsPerNode:       e.GPUsPerNode,
		NICBitsPerSec:     e.NICGbitPerS * 1e9,
	}
	if err := g.Validate(); err != nil {
		return GPU{}, "", err
	}
	return g, "", nil
}

func (e modelEntry) model() (Model, string, error) {
	ints := []struct {
		name string
		v    int
	}{
		{"layers", e.Layers}, {"hidden", e.Hidden}, {"heads", e.Heads}, {"ffn", e.FFN}, {"vocab", e.Vocab},
	}
	if e.Name == "" {
		return Model{}, "name", errors.New("name is required")
	}
	for _, f := range ints {
		if f.v <= 0 {
			return Model{}, f.name, fmt.Errorf("%s must be positive, got %d", f.name, f.v)
		}
		if f.v > 1<<24 {
			return Model{}, f.name, fmt.Errorf("%s %d is implausibly large", f.name, f.v)
		}
	}
	kv := e.KVHeads
	if kv == 0 {
		kv = e.Heads
	}
	if kv < 0 {
		return Model{}, "kv_heads", fmt.Errorf("kv_heads must be positive, got %d", e.KVHeads)
	}
	mlp := MLPKind(strings.ToLower(e.MLP))
	if e.MLP == "" {
		return Model{}, "mlp", fmt.Errorf("mlp is required (%q or %q)", MLPGELU, MLPSwiGLU)
	}
	if e.LearnedPositions < 0 || e.LearnedPositions > 1<<24 {
		return Model{}, "learned_positions", fmt.Errorf("learned_positions %d out of range", e.LearnedPositions)
	}
	m := Model{
		Name: e.Name, Layers: e.Layers, Hidden: e.Hidden, Heads: e.Heads, KVHeads: kv,
		FFN: e.FFN, Vocab: e.Vocab, MLP: mlp, TiedEmbeddings: e.TiedEmbeddings,
		Biases: e.Biases, LearnedPositions: e.LearnedPositions, Dropout: e.Dropout,
		Experts: e.Experts, ExpertsPerToken: e.ExpertsPerToken, SharedExperts: e.SharedExperts,
		ExpertFFN: e.ExpertFFN, DenseLayers: e.DenseLayers,
		RoPE: mlp == MLPSwiGLU && e.LearnedPositions == 0,
	}
	if e.RoPE != nil {
		m.RoPE = *e.RoPE
	}
	m.SlidingWindow, m.WindowedLayers = e.SlidingWindow, e.SlidingWindowLayers
	if m.SlidingWindow > 0 && m.WindowedLayers == 0 {
		m.WindowedLayers = m.Layers
	}
	if err := m.Validate(); err != nil {
		field := ""
		switch {
		case m.MLP != MLPGELU && m.MLP != MLPSwiGLU:
			field = "mlp"
		case m.Hidden%m.Heads != 0:
			field = "hidden"
		case m.Heads%m.KVHeads != 0 || m.KVHeads > m.Heads:
			field = "kv_heads"
		case m.Experts < 0:
			field = "experts"
		case m.Experts > 0 && (m.ExpertsPerToken < 1 || m.ExpertsPerToken > m.Experts):
			field = "experts_per_token"
		case m.SharedExperts < 0:
			field = "shared_experts"
		case m.ExpertFFN < 0:
			field = "expert_ffn"
		case m.DenseLayers != 0:
			field = "dense_layers"
		case m.Experts == 0:
			field = "experts"
		}
		return Model{}, field, err
	}
	return m, "", nil
}

// ParseCatalog decodes a catalog extension:
//
//	gpus:
//	  - name: MI300X
//	    memory_gib: 192
//	    hbm_tb_per_s: 5.3
//	    bf16_tflops: 1307
//	    fp8_tflops: 2615
//	    nvlink_gb_per_s: 896
//	    nvlink_domain: 8
//	    gpus_per_node: 8
//	    nic_gbit_per_s: 400
//	models:
//	  - name: my-13b
//	    layers: 40
//	    hidden: 5120
//	    heads: 40
//	    kv_heads: 8        # default: heads
//	    ffn: 13824
//	    vocab: 32000
//	    mlp: swiglu        # or gelu
//	    tied_embeddings: false
//
// Decoding is strict: an unknown field, a wrong type or an invalid value is
// an error that names its line and column.
func ParseCatalog(data []byte) (gpus []GPU, models []Model, err error) {
	// go-yaml v1.19.2 panics on some malformed input (a bare tag before a
	// comment inside a sequence, found by FuzzParseCatalog); report it as
	// the malformed input it is.
	defer func() {
		if r := recover(); r != nil {
			gpus, models, err = nil, nil, fmt.Errorf("catalog: malformed YAML (the decoder failed: %v)", r)
		}
	}()
	var f catalogFile
	if err := yaml.UnmarshalWithOptions(data, &f, yaml.Strict()); err != nil {
		return nil, nil, fmt.Errorf("catalog: %s", yamlpos.Describe(data, err))
	}
	seen := map[string]bool{}
	for i, e := range f.GPUs {
		g, field, err := e.gpu()
		if err != nil {
			return nil, nil, fmt.Errorf("catalog: %sgpus[%d]: %w", yamlpos.Of(data, fmt.Sprintf("$.gpus[%d]", i), field), i, err)
		}
		if seen[strings.ToLower(g.Name)] {
			return nil, nil, fmt.Errorf("catalog: %sgpus[%d]: duplicate name %q", yamlpos.Of(data, fmt.Sprintf("$.gpus[%d]", i), "name"), i, g.Name)
		}
		seen[strings.ToLower(g.Name)] = true
		gpus = append(gpus, g)
	}
	seen = map[string]bool{}
	for i, e := range f.Models {
		m, field, err := e.model()
		if err != nil {
			return nil, nil, fmt.Errorf("catalog: %smodels[%d]: %w", yamlpos.Of(data, fmt.Sprintf("$.models[%d]", i), field), i, err)
		}
		if seen[strings.ToLower(m.Name)] {
			return nil, nil, fmt.Errorf("catalog: %smodels[%d]: duplicate name %q", yamlpos.Of(data, fmt.Sprintf("$.models[%d]", i), "name"), i, m.Name)
		}
		seen[strings.ToLower(m.Name)] = true
		models = append(models, m)
	}
	return gpus, models, nil
}

// Load reads a catalog extension (see ParseCatalog) and adds its entries,
// replacing built-in ones of the same name.
func (c *Catalog) Load(r io.Reader) error {
	var buf bytes.Buffer
	if _, err := io.Copy(&buf, io.LimitReader(r, 8<<20)); err != nil {
		return fmt.Errorf("read catalog: %w", err)
	}
	gpus, models, err := ParseCatalog(buf.Bytes())
	if err != nil {
		return err
	}
	for _, g := range gpus {
		c.AddGPU(g)
	}
	for _, m := range models {
		c.AddModel(m)
	}
	return nil
}
