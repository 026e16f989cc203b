package gpu

import (
	"slices"
	"strings"
)

// model is one row of the model table.
//
// productName and memoryMiB are what NVML returns for the product
// (nvmlDeviceGetName, and nvmlDeviceGetMemoryInfo's total divided by MiB),
// which is also what `nvidia-smi --query-gpu=name,memory.total` prints.
// They were taken from published nvidia-smi output of these products, not
// from a capture made for this repository; the memory total is below the
// marketing size because the driver reserves some of it.
type model struct {
	name        string   // canonical gangway name
	productName string   // NVML product name
	memoryMiB   int64    // NVML total memory in MiB
	aliases     []string // other names accepted by CanonicalModel
}

var modelTable = []model{
	{name: "A100-SXM4-80GB", productName: "NVIDIA A100-SXM4-80GB", memoryMiB: 81920, aliases: []string{"A100"}},
	{name: "H100-SXM-80GB", productName: "NVIDIA H100 80GB HBM3", memoryMiB: 81559, aliases: []string{"H100"}},
	{name: "H200-SXM-141GB", productName: "NVIDIA H200", memoryMiB: 143771, aliases: []string{"H200"}},
	{name: "B200-SXM-180GB", productName: "NVIDIA B200", memoryMiB: 183359, aliases: []string{"B200"}},
}

const mib = 1 << 20

// Models returns the canonical model names gangway knows, sorted.
func Models() []string {
	names := make([]string, 0, len(modelTable))
	for _, m := range modelTable {
		names = append(names, m.name)
	}
	slices.Sort(names)
	return names
}

// CanonicalModel maps a model name to its canonical form. It accepts the
// canonical name, a short alias ("H100") or NVML's product name ("NVIDIA
// H100 80GB HBM3"), ignoring case and surrounding space. It reports false
// for a name it does not know.
func CanonicalModel(s string) (string, bool) {
	m, ok := lookupModel(s)
	if !ok {
		return "", false
	}
	return m.name, true
}

func lookupModel(s string) (model, bool) {
	s = strings.TrimSpace(s)
	for _, m := range modelTable {
		if strings.EqualFold(s, m.name) || strings.EqualFold(s, m.productName) {
			return m, true
		}
		for _, a := range m.aliases {
			if strings.EqualFold(s, a) {
				return m, true
			}
		}
	}
	return model{}, false
}

// modelFromProductName is what the NVML path stores in Device.Model: the
// canonical name for a known product, NVML's name otherwise.
func modelFromProductName(product string) string {
	for _, m := range modelTable {
		if strings.EqualFold(strings.TrimSpace(product), m.productName) {
			return m.name
		}
	}
	return strings.TrimSpace(product)
}
