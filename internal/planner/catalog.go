package planner

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/goccy/go-yaml"
	"github.com/goccy/go-yaml/parser"
)

// Catalog is the set of GPUs and models the planner knows by name. The
// zero value is empty; DefaultCatalog returns the built-in entries. A
// Catalog is not safe for concurrent mutation; lookups may run
// concurrently once loading is done.
type Catalog struct {
	gpus                 map[string]GPU   // by lower-case name and alias
	models               map[string]Model // by lower-case name
	gpuNames, modelNames []string
}

// ErrUnknown is wrapped when a catalog lookup finds nothing.
var ErrUnknown = errors.New("planner: not in catalog")

const (
	gbs  = 1e9
	tera = 1e12
)

// builtinGPUs are the data-sheet figures of ../shared/BENCHMARKS.md
// ("Hardware numbers"). Memory is the marketing capacity read as GiB,
// which is what nvidia-smi reports for the 80 GB parts.
func builtinGPUs() []GPU {
	return []GPU{
		{Name: "A100-SXM-80GB", Aliases: []string{"a100", "a100-80gb", "a100-sxm4-80gb", "a100-sxm"},
			MemoryBytes: 80 * gib, HBMBytesPerSec: 2.0 * tera, BF16FLOPS: 312 * tera,
			NVLinkBytesPerSec: 600 * gbs, NVLinkDomain: 8, GPUsPerNode: 8, NICBitsPerSec: 200e9},
		{Name: "H100-SXM", Aliases: []string{"h100", "h100-sxm5", "h100-sxm5-80gb", "h100-80gb"},
			MemoryBytes: 80 * gib, HBMBytesPerSec: 3.35 * tera, BF16FLOPS: 989 * tera, FP8FLOPS: 1979 * tera,
			NVLinkBytesPerSec: 900 * gbs, NVLinkDomain: 8, GPUsPerNode: 8, NICBitsPerSec: 400e9},
		{Name: "H200", Aliases: []string{"h200-sxm", "h200-141gb"},
			MemoryBytes: 141 * gib, HBMBytesPerSec: 4.8 * tera, BF16FLOPS: 989 * tera, FP8FLOPS: 1979 * tera,
			NVLinkBytesPerSec: 900 * gbs, NVLinkDomain: 8, GPUsPerNode: 8, NICBitsPerSec: 400e9},
		{Name: "B200", Aliases: []string{"b200-sxm", "hgx-b200", "dgx-b200"},
			MemoryBytes: 180 * gib, HBMBytesPerSec: 8.0 * tera, BF16FLOPS: 2250 * tera, FP8FLOPS: 4500 * tera,
			NVLinkBytesPerSec: 1800 * gbs, NVLinkDomain: 8, GPUsPerNode: 8, NICBitsPerSec: 400e9},
		{Name: "GB200-NVL72", Aliases: []string{"gb200", "gb200-nvl72", "nvl72"},
			MemoryBytes: 186 * gib, HBMBytesPerSec: 8.0 * tera, BF16FLOPS: 2500 * tera, FP8FLOPS: 5000 * tera,
			NVLinkBytesPerSec: 1800 * gbs, NVLinkDomain: 72, GPUsPerNode: 4, NICBitsPerSec: 400e9},
	}
}

func gptModel(name string, layers, hidden, heads, vocab int) Model {
	return Model{Name: name, Layers: layers, Hidden: hidden, Heads: heads, KVHeads: heads,
		FFN: 4 * hidden, Vocab: vocab, MLP: MLPGELU, TiedEmbeddings: true, Biases: true,
		LearnedPositions: 2048, Dropout: true}
}

func llamaModel(name string, layers, hidden, heads, kvHeads, ffn, vocab int) Model {
	return Model{Name: name, Layers: layers, Hidden: hidden, Heads: heads, KVHeads: kvHeads,
		FFN: ffn, Vocab: vocab, MLP: MLPSwiGLU}
}

// builtinModels: the models plus those the dev vectors use.
func builtinModels() []Model {
	bloom := gptModel("bloom-176b", 70, 14336, 112, 250880)
	bloom.LearnedPositions = 0 // ALiBi
	bloom.Dropout = false
	foundry13 := gptModel("foundry-13b", 40, 5120, 40, 50368)
	foundry13.Dropout = false
	foundry70 := gptModel("foundry-70b", 80, 8192, 64, 50368)
	foundry70.Dropout = false
	return []Model{
		gptModel("gpt3-175b", 96, 12288, 96, 50257),
		llamaModel("llama3-8b", 32, 4096, 32, 8, 14336, 128256),
		llamaModel("llama3-70b", 80, 8192, 64, 8, 28672, 128256),
		llamaModel("llama3-405b", 126, 16384, 128, 8, 53248, 128256),
		llamaModel("llama2-7b", 32, 4096, 32, 32, 11008, 32000),
		llamaModel("llama2-13b", 40, 5120, 40, 40, 13824, 32000),
		llamaModel("llama2-70b", 80, 8192, 64, 8, 28672, 32000),
		// Narayanan et al. 2021 Table 1 and Korthikanti et al. 2022.
		gptModel("megatron-18b", 40, 6144, 48, 51200),
		gptModel("megatron-22b", 48, 6144, 64, 51200),
		gptModel("megatron-145b", 80, 12288, 96, 51200),
		gptModel("megatron-175b", 96, 12288, 96, 51200),
		gptModel("mt-nlg-530b", 105, 20480, 128, 51200),
		gptModel("megatron-1t", 128, 25600, 160, 51200),
		bloom,
		// MosaicML LLM Foundry benchmark configurations.
		foundry13,
		foundry70,
	}
}

// DefaultCatalog returns the built-in GPUs and models.
func DefaultCatalog() *Catalog {
	c := &Catalog{}
	for _, g := range builtinGPUs() {
		c.AddGPU(g)
	}
	for _, m := range builtinModels() {
		c.AddModel(m)
	}
	return c
}

// AddGPU adds or replaces a GPU (by name; aliases are added too).
func (c *Catalog) AddGPU(g GPU) {
	if c.gpus == nil {
		c.gpus = map[string]GPU{}
	}
	key := strings.ToLower(g.Name)
	if _, ok := c.gpus[key]; !ok {
		c.gpuNames = append(c.gpuNames, g.Name)
	}
	c.gpus[key] = g
	for _, a := range g.Aliases {
		c.gpus[strings.ToLower(a)] = g
	}
}

// AddModel adds or replaces a model by name.
func (c *Catalog) AddModel(m Model) {
	if c.models == nil {
		c.models = map[string]Model{}
	}
	key := strings.ToLower(m.Name)
	if _, ok := c.models[key]; !ok {
		c.modelNames = append(c.modelNames, m.Name)
	}
	c.models[key] = m
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

// Model looks a model up by name, case-insensitively.
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
		return nil, nil, fmt.Errorf("catalog: %s", describeYAMLError(data, err))
	}
	seen := map[string]bool{}
	for i, e := range f.GPUs {
		g, field, err := e.gpu()
		if err != nil {
			return nil, nil, fmt.Errorf("catalog: %sgpus[%d]: %w", position(data, fmt.Sprintf("$.gpus[%d]", i), field), i, err)
		}
		if seen[strings.ToLower(g.Name)] {
			return nil, nil, fmt.Errorf("catalog: %sgpus[%d]: duplicate name %q", position(data, fmt.Sprintf("$.gpus[%d]", i), "name"), i, g.Name)
		}
		seen[strings.ToLower(g.Name)] = true
		gpus = append(gpus, g)
	}
	seen = map[string]bool{}
	for i, e := range f.Models {
		m, field, err := e.model()
		if err != nil {
			return nil, nil, fmt.Errorf("catalog: %smodels[%d]: %w", position(data, fmt.Sprintf("$.models[%d]", i), field), i, err)
		}
		if seen[strings.ToLower(m.Name)] {
			return nil, nil, fmt.Errorf("catalog: %smodels[%d]: duplicate name %q", position(data, fmt.Sprintf("$.models[%d]", i), "name"), i, m.Name)
		}
		seen[strings.ToLower(m.Name)] = true
		models = append(models, m)
	}
	return gpus, models, nil
}

var (
	yamlPosRe  = regexp.MustCompile(`^\[(\d+):(\d+)\] `)
	yamlTypeRe = regexp.MustCompile(`cannot unmarshal (\S+) into Go (?:struct field \S+|value) of type (\S+)`)
)

// describeYAMLError turns a decoder error into "[line:col] key: problem",
// naming the key on that line and the types in YAML terms.
func describeYAMLError(data []byte, err error) string {
	msg := yaml.FormatError(err, false, false)
	msg = strings.TrimSpace(strings.SplitN(msg, "\n", 2)[0])
	m := yamlPosRe.FindStringSubmatch(msg)
	if m == nil {
		return msg
	}
	rest := msg[len(m[0]):]
	if t := yamlTypeRe.FindStringSubmatch(rest); t != nil {
		rest = fmt.Sprintf("want %s, got %s", t[2], t[1])
	}
	line, _ := strconv.Atoi(m[1])
	lines := strings.Split(string(data), "\n")
	if line >= 1 && line <= len(lines) {
		text := strings.TrimLeft(strings.TrimSpace(lines[line-1]), "- ")
		if key, _, ok := strings.Cut(text, ":"); ok && !strings.ContainsAny(key, "{}[], ") && key != "" && !strings.Contains(rest, key) {
			rest = key + ": " + rest
		}
	}
	return m[0] + rest
}

// position returns "[line:column] " of the field of the entry at path (or
// of the entry when the field is absent), or "" when it cannot be found.
func position(data []byte, path, field string) string {
	file, err := parser.ParseBytes(data, 0)
	if err != nil {
		return ""
	}
	for _, p := range []string{path + "." + field, path} {
		if field == "" && p != path {
			continue
		}
		yp, err := yaml.PathString(p)
		if err != nil {
			continue
		}
		n, err := yp.FilterFile(file)
		if err != nil || n == nil || n.GetToken() == nil {
			continue
		}
		pos := n.GetToken().Position
		return fmt.Sprintf("[%d:%d] ", pos.Line, pos.Column)
	}
	return ""
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
