package gateway

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/gangway/gangway/internal/hardware"
	"github.com/gangway/gangway/internal/inference/enginesim"
	"github.com/gangway/gangway/internal/inference/openai"
)

// BenchmarkProxyOverhead measures one small streamed request straight to
// a zero-latency engine and through the gateway, everything in this
// process (ns/op is wall time over parallel goroutines). The overhead
// scenario of `gangway bench inference` measures latency with the
// gateway in its own process; this is for profiling.
func BenchmarkProxyOverhead(b *testing.B) { benchProxy(b, 1000) }

// BenchmarkProxyOverheadLarge is the same with 220 KB prompts.
func BenchmarkProxyOverheadLarge(b *testing.B) { benchProxy(b, 220_000) }

func benchProxy(b *testing.B, promptBytes int) {
	cfg, _ := hardware.NewConfig("Qwen3-8B", "H100", 1, "bf16")
	cfg.MaxModelLen = 131072
	var eps Static
	for range 8 {
		s, _ := enginesim.NewServer(enginesim.ServerConfig{Engine: cfg, Time: enginesim.TimeZero, ServedModelName: "sim"})
		hs := httptest.NewServer(s)
		defer hs.Close()
		eps = append(eps, Endpoint{URL: hs.URL, Model: "sim", Engine: &cfg})
	}
	g, _ := New(Config{Source: eps})
	defer g.closeIdle()
	g.Refresh(context.Background())
	gw := httptest.NewServer(g)
	defer gw.Close()
	body := fmt.Appendf(nil, `{"model":"sim","prompt":%q,"max_tokens":16,"stream":true,"ignore_eos":true}`, strings.Repeat("word ", promptBytes/5))
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256}}
	for _, tc := range []struct {
		name string
		url  func(int) string
	}{
		{"direct", func(i int) string { return eps[i%8].URL }},
		{"gateway", func(int) string { return gw.URL }},
	} {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			var n atomic.Int64
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					i := int(n.Add(1))
					resp, err := client.Post(tc.url(i)+openai.PathCompletions, "application/json", bytes.NewReader(body))
					if err != nil {
						b.Error(err)
						return
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			})
		})
	}
}
