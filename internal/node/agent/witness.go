package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/gangway/gangway/internal/api"
	"github.com/gangway/gangway/internal/base/pki"
)

// Fencing with witnesses (controller.Fencing has the argument). The agent
// grants its ranks a lease: FenceAfter from its last successful heartbeat.
// Its supervisor holds the same lease and kills every rank when it lapses,
// so a dead or frozen agent cannot leave ranks running beside their
// replacement. While no heartbeat succeeds, the agent asks its witnesses
// (other nodes, picked by the server) how long ago their own last
// heartbeat succeeded. If every witness answers that it too has heard
// nothing for WitnessDown, the control plane is down, not this node cut
// off: the lease is extended by FenceAfter from the moment it asked, up to
// MaxOutage. Any witness that hears the server, or that cannot be reached,
// leaves the lease to lapse.

// witnessTimeout bounds one round of questions: a witness slower than this
// gives no word.
const witnessTimeout = 300 * time.Millisecond

// servePeerContact answers a witness's question: how long since this
// agent's last successful heartbeat.
func (a *Agent) servePeerContact(w http.ResponseWriter, r *http.Request) {
	a.mu.Lock()
	last := a.lastOK
	a.mu.Unlock()
	c := api.ServerContact{Node: a.cfg.Name, Never: last.IsZero()}
	if !c.Never {
		c.SinceOK = api.Duration(time.Since(last))
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(c)
}

// peersOrServer lets the server read everything, and other nodes only ask
// about the server (/v1/peer/).
func peersOrServer(h http.Handler) http.Handler {
	server := onlyServer(h)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/peer/contact" && r.TLS != nil && len(r.TLS.PeerCertificates) > 0 {
			if id, ok := pki.Verify(r.TLS.PeerCertificates[0]); ok && id.Node {
				h.ServeHTTP(w, r)
				return
			}
		}
		server.ServeHTTP(w, r)
	})
}

// grantLocked extends the ranks' lease to until (never shortens it) and
// returns what is left of it, for the caller to pass to the supervisor
// (passLease) once it has let go of the lock.
func (a *Agent) grantLocked(until time.Time) time.Duration {
	if until.After(a.leaseUntil) {
		a.leaseUntil = until
	}
	return time.Until(a.leaseUntil)
}

// passLease hands the lease to the supervisor, which kills every rank if
// no other comes within d.
func (a *Agent) passLease(d time.Duration) {
	if a.drv != nil && d > 0 {
		a.drv.Lease(d)
	}
}

// askWitnesses, once no heartbeat has succeeded for WitnessDown, asks
// every witness about the server, and extends the lease if all of them
// say it is down too. It reports whether it extended it.
func (a *Agent) askWitnesses(ctx context.Context) bool {
	a.mu.Lock()
	l, last, ws, fenced := a.lease, a.lastOK, a.witnesses, a.fenced
	a.mu.Unlock()
	asked := time.Now()
	silent := asked.Sub(last)
	switch {
	case fenced, last.IsZero(), l.WitnessDown <= 0, a.peerHC == nil:
		return false
	case len(ws) == 0:
		a.mu.Lock()
		a.noWord = "this node has no witnesses"
		a.mu.Unlock()
		return false
	case silent < l.WitnessDown.D():
		return false // not silent long enough for a witness's silence to mean anything
	case silent+l.FenceAfter.D() > l.MaxOutage.D():
		a.mu.Lock()
		a.noWord = "the outage has lasted as long as ranks may outlive one"
		a.mu.Unlock()
		return false
	}
	ctx, cancel := context.WithTimeout(ctx, witnessTimeout)
	defer cancel()
	word := make([]string, len(ws)) // "" for "down too", else why not
	var wg sync.WaitGroup
	for i, w := range ws {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := a.askWitness(ctx, w)
			switch {
			case err != nil:
				word[i] = fmt.Sprintf("%s gave no word (%v)", w.Node, err)
			case !c.Never && c.SinceOK < l.WitnessDown:
				word[i] = fmt.Sprintf("%s heard the server %s ago", w.Node, c.SinceOK.D().Round(time.Millisecond))
			}
		}()
	}
	wg.Wait()
	for _, why := range word {
		if why != "" {
			a.mu.Lock()
			a.noWord = why
			a.mu.Unlock()
			return false
		}
	}
	a.mu.Lock()
	if a.fenced || !a.lastOK.Equal(last) {
		a.mu.Unlock()
		return false // fenced meanwhile, or the server answered
	}
	if !a.outage {
		a.outage = true
		a.log.Warn("the server is silent and so it is for every witness: the control plane is down; keeping ranks",
			"silent_s", silent.Seconds(), "witnesses", len(ws), "max_outage", l.MaxOutage.D())
	}
	d := a.grantLocked(asked.Add(l.FenceAfter.D()))
	a.mu.Unlock()
	a.passLease(d)
	return true
}

func (a *Agent) askWitness(ctx context.Context, w api.Witness) (api.ServerContact, error) {
	var c api.ServerContact
	if w.URL == "" {
		return c, fmt.Errorf("witness %s has no endpoint", w.Node)
	}
	req, err := http.NewRequestWithContext(pki.ForNode(ctx, w.Node), http.MethodGet, w.URL+"/v1/peer/contact", nil)
	if err != nil {
		return c, err
	}
	resp, err := a.peerHC.Do(req)
	if err != nil {
		return c, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return c, fmt.Errorf("witness %s answered %s", w.Node, resp.Status)
	}
	if err := json.NewDecoder(http.MaxBytesReader(nil, resp.Body, 4096)).Decode(&c); err != nil {
		return c, fmt.Errorf("witness %s: %w", w.Node, err)
	}
	return c, nil
}

func witnessNames(ws []api.Witness) []string {
	out := make([]string, len(ws))
	for i, w := range ws {
		out[i] = w.Node
	}
	return out
}
