package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/gangway/gangway/internal/controlplane/store"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Several replicas, no load balancer. Every replica serves the API and
// answers agents' long polls from its own cache; what only the leader can
// do with an agent's report (its heartbeat memory, its controller) a
// replica forwards to the leader, whose URL the leader publishes in the
// store under its election session. Agents may then talk to any replica.

// leaderURLKey holds the leading replica's URL, under its session's lease:
// it goes when the leader does.
const leaderURLKey = store.Root + "leader-url"

// forwardHeader names the node a replica forwards an agent's request for;
// only a server's certificate may set it (authn.go).
const forwardHeader = "X-Gangway-Forwarded-For-Node"

// leaderState is what a replica knows of the leader.
type leaderState struct {
	url atomic.Pointer[string] // the leader's URL; nil or "" when none is known
	hc  *http.Client           // this replica towards the leader (its server certificate)
}

// publishLeader writes this replica's URL as the leader's, under the
// election session's lease.
func (s *Server) publishLeader(ctx context.Context, cli *clientv3.Client, lease clientv3.LeaseID) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := cli.Put(ctx, leaderURLKey, s.advertised, clientv3.WithLease(lease)); err != nil {
		s.log.Warn("publish the leader's URL", "err", err)
	}
}

// watchLeader keeps s.leaderOf.url current until ctx ends.
func (s *Server) watchLeader(ctx context.Context, cli *clientv3.Client) {
	for ctx.Err() == nil {
		resp, err := cli.Get(ctx, leaderURLKey)
		if err != nil {
			sleepCtx(ctx, time.Second)
			continue
		}
		u := ""
		if len(resp.Kvs) > 0 {
			u = string(resp.Kvs[0].Value)
		}
		s.leaderOf.url.Store(&u)
		wch := cli.Watch(clientv3.WithRequireLeader(ctx), leaderURLKey, clientv3.WithRev(resp.Header.Revision+1))
		for wr := range wch {
			if wr.Err() != nil {
				break
			}
			for _, ev := range wr.Events {
				u := ""
				if ev.Type == clientv3.EventTypePut {
					u = string(ev.Kv.Value)
				}
				s.leaderOf.url.Store(&u)
			}
		}
	}
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// errNoLeader: a replica has no leader to forward to (an election is on).
var errNoLeader = errors.New("no replica leads yet (an election is under way); try again in a moment")

// forwarded hands an agent's request for node to the leader when this
// replica does not lead, writing the leader's answer; it returns false
// (and writes nothing) when this replica leads.
func (s *Server) forwarded(w http.ResponseWriter, r *http.Request, body []byte, node string) bool {
	if s.controller() != nil {
		return false
	}
	if r.Header.Get(forwardHeader) != "" {
		// Forwarded to us as the leader, and we no longer are: no second
		// hop, which could loop while replicas disagree on who leads.
		writeError(w, http.StatusServiceUnavailable, errNoLeader)
		return true
	}
	p := s.leaderOf.url.Load()
	if p == nil || *p == "" || *p == s.advertised || s.leaderOf.hc == nil {
		writeError(w, http.StatusServiceUnavailable, errNoLeader)
		return true
	}
	req, err := http.NewRequestWithContext(r.Context(), r.Method, *p+r.URL.RequestURI(), bytes.NewReader(body))
	if err != nil {
		writeError(w, http.StatusInternalServerError, err)
		return true
	}
	req.Header.Set("Content-Type", r.Header.Get("Content-Type"))
	req.Header.Set(forwardHeader, node)
	resp, err := s.leaderOf.hc.Do(req)
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, fmt.Errorf("forward to the leader at %s: %w", *p, err))
		return true
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "" {
		w.Header().Set("Content-Type", ct)
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = io.Copy(w, io.LimitReader(resp.Body, maxBody))
	return true
}
