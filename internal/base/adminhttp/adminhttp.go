// Package adminhttp is the plain-HTTP side door of gangway's daemons: a
// mux with /metrics (Prometheus's text format, from a Gatherer) and,
// where asked for, net/http/pprof's handlers, on a mux of its own (never
// http.DefaultServeMux, so that nothing linked in can add routes to it).
//
// The server, the agent and the gateway serve it on --metrics-listen
// (metrics only) and --debug-listen (metrics and pprof, loopback by
// default); see docs/design.md, "Metrics".
//
// It imports prometheus/client_golang and the standard library.
package adminhttp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Handler serves g at /metrics and, with debug, the pprof profiles under
// /debug/pprof/. Anything else is 404.
func Handler(g prometheus.Gatherer, debug bool) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(g, promhttp.HandlerOpts{
		// A collector that fails loses its own series, not the scrape.
		ErrorHandling: promhttp.ContinueOnError,
	}))
	if debug {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	return mux
}

// Gatherer is what the server's /metrics serves: its own registry, plus
// the process-wide default one, which holds Go's runtime and the
// process's metrics and whatever a library registers there (etcd's
// server and gRPC metrics).
func Gatherer(own prometheus.Gatherer) prometheus.Gatherer {
	return prometheus.Gatherers{prometheus.DefaultGatherer, own}
}

// NewRegistry is a registry with Go's runtime and the process's metrics
// in it, for a daemon that serves no library's series: the gangway binary
// links etcd, whose packages register theirs in the default registry
// whether or not the process runs etcd.
func NewRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// Server is one admin listener, opened by Listen; Run serves it.
type Server struct {
	ln  net.Listener
	srv *http.Server
}

// Listen opens addr (host:port; port 0 takes one the system picks) for
// g's metrics, and pprof with debug. Run serves it; a Server never run
// must be closed with Close.
func Listen(addr string, g prometheus.Gatherer, debug bool, log *slog.Logger) (*Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("admin listener %s: %w", addr, err)
	}
	return &Server{ln: ln, srv: &http.Server{Handler: Handler(g, debug), ReadHeaderTimeout: 10 * time.Second,
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelDebug)}}, nil
}

// Addr is the address bound.
func (s *Server) Addr() net.Addr { return s.ln.Addr() }

// Run serves until ctx ends (then it closes the listener and every
// connection and returns nil) or serving fails.
func (s *Server) Run(ctx context.Context) error {
	stop := context.AfterFunc(ctx, func() { s.srv.Close() })
	defer stop()
	err := s.srv.Serve(s.ln)
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// Close closes a Server that was never run.
func (s *Server) Close() error { return s.ln.Close() }
