package api

import (
	"strings"
	"testing"
)

func TestParseByteSize(t *testing.T) {
	for in, want := range map[string]int64{
		"1073741824": 1 << 30, "64G": 64 << 30, "64Gi": 64 << 30, "64GiB": 64 << 30, "64GB": 64 << 30,
		"512M": 512 << 20, "512m": 512 << 20, "1.5T": 3 << 39, "100K": 100 << 10, "0": 0, " 2G ": 2 << 30,
	} {
		if got, err := ParseByteSize(in); err != nil || got != want {
			t.Errorf("ParseByteSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "G", "-1G", "lots", "1e9", "0x10", "9999999999T", "1.5.2G", "NaN", "Inf"} {
		if v, err := ParseByteSize(bad); err == nil {
			t.Errorf("ParseByteSize(%q) = %d, want an error", bad, v)
		} else if !strings.Contains(err.Error(), "1024-based") {
			t.Errorf("ParseByteSize(%q): %v; want the forms named", bad, err)
		}
	}
}

// resources.memory takes units and becomes memoryBytes; both given must agree.
func TestResourcesMemory(t *testing.T) {
	spec, err := DecodeJobSpec([]byte("ranks: 1\ncommand: [a]\nresources: {memory: 64G, cpuMillis: 1000}\n"))
	if err != nil || spec.Resources.MemoryBytes != 64<<30 || spec.Resources.Memory != 0 {
		t.Fatalf("%+v, %v; want memoryBytes 64 GiB", spec.Resources, err)
	}
	if _, err := DecodeJobSpec([]byte("ranks: 1\ncommand: [a]\nresources: {memory: 1G, memoryBytes: 5}\n")); err == nil || !strings.Contains(err.Error(), "spec.resources.memory") {
		t.Errorf("memory and memoryBytes disagreeing: %v", err)
	}
	if _, err := DecodeJobSpec([]byte("ranks: 1\ncommand: [a]\nresources: {memory: lots}\n")); err == nil || !strings.Contains(err.Error(), "resources.memory") {
		t.Errorf("bad memory: %v; want the field named", err)
	}
}

func FuzzParseByteSize(f *testing.F) {
	for _, s := range []string{"64G", "1.5T", "512Mi", "100", "1e3"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if v, err := ParseByteSize(s); err == nil && v < 0 {
			t.Fatalf("%q → %d", s, v)
		}
	})
}
