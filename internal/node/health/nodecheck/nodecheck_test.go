package nodecheck

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gangway/gangway/internal/api"
)

func want(name string, s api.CheckStatus, a api.HealthAction, msg string) []api.HealthCheck {
	return []api.HealthCheck{{Check: name, GPU: -1, Status: s, Action: a, Message: msg}}
}

func TestDisk(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name    string
		root    string
		minFree int64
		free    int64
		freeErr error
		probe   error // nil: the real probe
		want    []api.HealthCheck
	}{
		{"plenty", dir, 100 << 30, 500 << 30, nil, nil, want("disk", api.CheckOK, "", "")},
		{"no minimum", dir, 0, 0, nil, nil, want("disk", api.CheckOK, "", "")},
		{"low", dir, 100 << 30, 50 << 30, nil, nil, want("disk", api.CheckWarn, api.ActionCount, "50.0 GiB free under "+dir+", below the 100.0 GiB wanted")},
		{"statfs fails", dir, 1, 0, errors.New("boom"), nil, want("disk", api.CheckError, "", "free space under "+dir+": boom")},
		{"read-only", dir, 0, 0, nil, &os.PathError{Op: "open", Path: dir + "/.gangway-health-1", Err: syscall.EROFS},
			want("disk", api.CheckFatal, api.ActionCordonNode, "cannot write under the checkpoint root: open "+dir+"/.gangway-health-1: read-only file system")},
		{"missing root", filepath.Join(dir, "nope"), 0, 0, nil, nil, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := NewDiskCheck(tt.root, tt.minFree)
			c.free = func(string) (int64, error) { return tt.free, tt.freeErr }
			if tt.probe != nil {
				c.probe = func(string) error { return tt.probe }
			}
			got := c.Run(context.Background())
			if tt.want == nil { // missing root
				if len(got) != 1 || got[0].Status != api.CheckError {
					t.Fatalf("got %+v; want one error finding", got)
				}
				return
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
	if left, _ := os.ReadDir(dir); len(left) != 0 {
		t.Errorf("the probe left %v behind", left)
	}
}

func TestDiskReal(t *testing.T) {
	free, err := freeBytes(t.TempDir())
	if errors.Is(err, errors.ErrUnsupported) {
		t.Skip(err)
	}
	if err != nil || free <= 0 {
		t.Fatalf("freeBytes = %d, %v", free, err)
	}
}

const meminfo = `MemTotal:       2113425408 kB
MemFree:        1805843456 kB
MemAvailable:   %d kB
Buffers:          123456 kB
HugePages_Total:       0
`

func TestMemory(t *testing.T) {
	tests := []struct {
		name string
		data string
		want []api.HealthCheck
	}{
		{"plenty", fmtMeminfo(1905843456), want("memory", api.CheckOK, "", "")},
		{"low", fmtMeminfo(52835635), want("memory", api.CheckWarn, api.ActionCount, "50.4 GiB available of 2015.5 GiB (2.5%), below 5%")},
		{"no MemAvailable", "MemTotal: 100 kB\n", want("memory", api.CheckError, "", "meminfo: no MemTotal and MemAvailable")},
		{"garbage", "hello\n", want("memory", api.CheckError, "", `meminfo line 1: want "Name: N [kB]", got "hello"`)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "meminfo")
			if err := os.WriteFile(path, []byte(tt.data), 0o600); err != nil {
				t.Fatal(err)
			}
			got := NewMemoryCheck(path).Run(context.Background())
			for i := range got {
				got[i].Message = strings.ReplaceAll(got[i].Message, path, "meminfo")
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
	if got := NewMemoryCheck(filepath.Join(t.TempDir(), "none")).Run(context.Background()); got[0].Status != api.CheckError {
		t.Errorf("missing meminfo: %+v", got)
	}
}

func fmtMeminfo(availKB int64) string {
	return strings.ReplaceAll(meminfo, "%d", strconv.FormatInt(availKB, 10))
}

func FuzzParseMeminfo(f *testing.F) {
	f.Add([]byte(fmtMeminfo(1)))
	f.Add([]byte("A: 1\nB: 2 kB\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := ParseMeminfo(data)
		if err != nil {
			return
		}
		for k, v := range m {
			if v < 0 || k == "" {
				t.Fatalf("%q = %d", k, v)
			}
		}
	})
}

func TestClock(t *testing.T) {
	tests := []struct {
		name   string
		offset time.Duration
		known  bool
		max    time.Duration
		want   []api.HealthCheck
	}{
		{"unknown", 0, false, 0, want("clock", api.CheckOK, "", "offset from the server not known yet")},
		{"close", 40 * time.Millisecond, true, 0, want("clock", api.CheckOK, "", "")},
		{"ahead", 1200 * time.Millisecond, true, 0, want("clock", api.CheckWarn, api.ActionCount, "clock 1.2s off the server's, more than 500ms")},
		{"behind", -3 * time.Second, true, 2 * time.Second, want("clock", api.CheckWarn, api.ActionCount, "clock -3s off the server's, more than 2s")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := NewClockCheck(func() (time.Duration, bool) { return tt.offset, tt.known }, tt.max)
			if diff := cmp.Diff(tt.want, c.Run(context.Background())); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func replace(s, old, new string) string { return strings.ReplaceAll(s, old, new) }
func itoa(n int64) string               { return strconv.FormatInt(n, 10) }
