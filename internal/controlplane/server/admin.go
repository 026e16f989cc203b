package server

import (
	"context"
	"fmt"
	"net"
	"sync"

	"github.com/gangway/gangway/internal/base/adminhttp"
	"github.com/prometheus/client_golang/prometheus"
)

// adminAddrs are the addresses the admin listeners bound; set by Run
// before Ready, then read-only.
type adminAddrs struct{ metrics, debug net.Addr }

// MetricsAddr is where --metrics-listen serves, nil without it. Valid
// once Ready is closed.
func (s *Server) MetricsAddr() net.Addr { return s.admin.metrics }

// DebugAddr is where --debug-listen serves, nil without it. Valid once
// Ready is closed.
func (s *Server) DebugAddr() net.Addr { return s.admin.debug }

// Gatherer is what the server's /metrics serves: its own series, etcd's
// (the embedded member and the client register in the process's default
// registry) and Go's and the process's.
func (s *Server) Gatherer() prometheus.Gatherer { return adminhttp.Gatherer(s.metrics.reg) }

// serveAdmin opens the admin listeners the configuration asks for and
// serves them in wg's goroutines until ctx ends, a failure going to errc.
// A listener that cannot be opened is an error, and nothing serves then.
func (s *Server) serveAdmin(ctx context.Context, wg *sync.WaitGroup, errc chan<- error) error {
	var open []*adminhttp.Server
	for _, l := range []struct {
		addr  string
		debug bool
		into  *net.Addr
	}{{s.cfg.MetricsListen, false, &s.admin.metrics}, {s.cfg.DebugListen, true, &s.admin.debug}} {
		if l.addr == "" {
			continue
		}
		a, err := adminhttp.Listen(l.addr, s.Gatherer(), l.debug, s.log)
		if err != nil {
			for _, o := range open {
				o.Close()
			}
			return fmt.Errorf("server: %w", err)
		}
		open, *l.into = append(open, a), a.Addr()
		s.log.Info("serving metrics", "addr", a.Addr().String(), "pprof", l.debug)
	}
	for _, a := range open {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := a.Run(ctx); err != nil {
				errc <- fmt.Errorf("server: admin listener: %w", err)
			}
		}()
	}
	return nil
}
