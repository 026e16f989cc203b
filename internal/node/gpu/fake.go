package gpu

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
)

// MaxFakeGPUs bounds NewFake's n.
const MaxFakeGPUs = 64

// Driver and CUDA versions the fake reports: a real release pairing
// (driver 570.133.20 ships CUDA 12.8) new enough for every model in the
// table, B200 included.
const (
	fakeDriver = "570.133.20"
	fakeCUDA   = "12.8"
)

// fakeBuses are the PCI bus numbers of the eight GPUs on a DGX H100
// baseboard, in NVML index order. Fakes beyond eight reuse them with an
// offset so that every address stays distinct.
var fakeBuses = [8]int{0x18, 0x2a, 0x3a, 0x5d, 0x9a, 0xab, 0xba, 0xdb}

// FakeOption configures NewFake.
type FakeOption func(*fakeConfig)

type fakeConfig struct {
	seed string
}

// WithSeed sets the seed the fake's UUIDs derive from. Give each fake node
// its own seed (its node name): two fakes with the same seed report the
// same UUIDs. The default seed is "gangway-fake".
func WithSeed(seed string) FakeOption {
	return func(c *fakeConfig) { c.seed = seed }
}

// NewFake returns a Discoverer that reports n GPUs of the given model the
// way NVML reports them on an HGX board with NVSwitch: NVML-style UUIDs
// derived from the seed, PCI bus ids as on a DGX H100, the first half of
// the GPUs on NUMA node 0 and the second half on node 1, every GPU an
// NVLink peer of every other, memory as NVML reports it for the model.
//
// model is anything CanonicalModel accepts; n is 0 to MaxFakeGPUs. A model
// not in the table is an error that lists the valid ones. The same
// arguments always give the same inventory.
func NewFake(n int, model string, opts ...FakeOption) (Discoverer, error) {
	if n < 0 || n > MaxFakeGPUs {
		return nil, fmt.Errorf("fake gpus: count %d: must be between 0 and %d", n, MaxFakeGPUs)
	}
	m, ok := lookupModel(model)
	if !ok {
		return nil, fmt.Errorf("fake gpus: unknown model %q: valid models are %s",
			model, strings.Join(Models(), ", "))
	}
	cfg := fakeConfig{seed: "gangway-fake"}
	for _, o := range opts {
		o(&cfg)
	}
	inv := Inventory{
		Devices: make([]Device, 0, n),
		Driver:  fakeDriver,
		CUDA:    fakeCUDA,
		Source:  SourceFake,
	}
	if n == 0 {
		inv.Reason = "fake inventory configured with 0 GPUs"
	}
	for i := range n {
		peers := make([]int, 0, n-1)
		for j := range n {
			if j != i {
				peers = append(peers, j)
			}
		}
		inv.Devices = append(inv.Devices, Device{
			Index:       i,
			UUID:        fakeUUID(cfg.seed, i),
			Model:       m.Name,
			MemoryBytes: m.DeviceMemoryBytes,
			PCIBusID:    fmt.Sprintf("%08X:%02X:00.0", 0, fakeBuses[i%8]+i/8),
			NUMANode:    i * 2 / n,
			NVLinkPeers: peers,
			Health:      HealthOK,
		})
	}
	return &fake{inv: inv}, nil
}

// fakeUUID formats 16 bytes of SHA-256(seed, index) the way NVML prints a
// GPU UUID.
func fakeUUID(seed string, index int) string {
	sum := sha256.Sum256([]byte(seed + "\x00" + strconv.Itoa(index)))
	h := hex.EncodeToString(sum[:16])
	return "GPU-" + h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}

// fake's inventory is immutable after NewFake, so Discover needs no
// lock; Sample's state has its own.
type fake struct {
	inv     Inventory
	sampled fakeSampled
}

func (f *fake) Discover(ctx context.Context) (Inventory, error) {
	if err := ctx.Err(); err != nil {
		return Inventory{}, err
	}
	return cloneInventory(f.inv), nil
}

// cloneInventory copies inv deeply so that callers may change what they get.
func cloneInventory(inv Inventory) Inventory {
	out := inv
	out.Devices = make([]Device, len(inv.Devices))
	for i, d := range inv.Devices {
		d.NVLinkPeers = append([]int{}, d.NVLinkPeers...)
		out.Devices[i] = d
	}
	return out
}
