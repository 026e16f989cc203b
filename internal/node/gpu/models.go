package gpu

import (
	"slices"
	"strings"

	"github.com/gangway/gangway/internal/hardware"
)

// fakeableGPUs are the GPUs of internal/hardware's catalog whose NVML
// product name and memory total are known (hardware.GPU.NVMLName and
// DeviceMemoryBytes, taken from published nvidia-smi output of these
// products, not from a capture made for this repository): the models the
// NVML path recognises and the fake can imitate.
func fakeableGPUs() []hardware.GPU {
	return slices.DeleteFunc(hardware.GPUs(), func(g hardware.GPU) bool {
		return g.NVMLName == "" || g.DeviceMemoryBytes <= 0
	})
}

// Models returns the canonical model names the agent can discover and
// fake, sorted.
func Models() []string {
	var names []string
	for _, g := range fakeableGPUs() {
		names = append(names, g.Name)
	}
	slices.Sort(names)
	return names
}

// CanonicalModel maps a model name to its canonical form. It accepts
// every name internal/hardware's catalog does (the canonical name, a
// short alias such as "H100", NVML's product name "NVIDIA H100 80GB
// HBM3"), ignoring case and surrounding space, for the models in Models.
// It reports false for a name it does not know.
func CanonicalModel(s string) (string, bool) {
	m, ok := lookupModel(s)
	if !ok {
		return "", false
	}
	return m.Name, true
}

func lookupModel(s string) (hardware.GPU, bool) {
	g, err := hardware.LookupGPU(s)
	if err != nil || g.NVMLName == "" || g.DeviceMemoryBytes <= 0 {
		return hardware.GPU{}, false
	}
	return g, true
}

// modelFromProductName is what the NVML path stores in Device.Model: the
// canonical name for a known product, NVML's name otherwise.
func modelFromProductName(product string) string {
	product = strings.TrimSpace(product)
	for _, g := range fakeableGPUs() {
		if strings.EqualFold(product, g.NVMLName) {
			return g.Name
		}
	}
	return product
}
