package cli

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gangway/gangway/internal/api"
	"github.com/gangway/gangway/internal/controlplane/server"
)

// stallListener holds every connection of the server it wraps while
// stalled: nothing is read from or written to any of them, nor is a new
// one accepted, as when the server's process freezes.
type stallListener struct {
	net.Listener
	mu   sync.Mutex
	open chan struct{} // closed while not stalled
}

func newStallListener(ln net.Listener) *stallListener {
	open := make(chan struct{})
	close(open)
	return &stallListener{Listener: ln, open: open}
}

func (l *stallListener) stall() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.open = make(chan struct{})
}

func (l *stallListener) resume() {
	l.mu.Lock()
	defer l.mu.Unlock()
	close(l.open)
}

func (l *stallListener) wait() {
	l.mu.Lock()
	open := l.open
	l.mu.Unlock()
	<-open
}

func (l *stallListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	l.wait()
	return &stallConn{Conn: c, l: l}, nil
}

type stallConn struct {
	net.Conn
	l *stallListener
}

func (c *stallConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.l.wait() // what came in during a stall is read after it
	return n, err
}

func (c *stallConn) Write(p []byte) (int, error) {
	c.l.wait()
	return c.Conn.Write(p)
}

// TestServerStallFenceIsNoUserError: a server that stops answering for
// longer than the agents' lease makes every agent fence itself, killing
// its ranks. The attempt says it was the fence, with the silence the agent
// measured, and uses up no restart: the job, allowed none, runs again.
func TestServerStallFenceIsNoUserError(t *testing.T) {
	var sl *stallListener
	// A node timeout under four heartbeats gives no witnesses: agents
	// fence on the server's silence alone, after 4s; the server would
	// declare them lost after 6s, which the stall ends well before.
	cl := startClusterWrapped(t, 2, 1, func(c *server.Config) {
		c.HeartbeatInterval, c.NodeTimeout = 2*time.Second, 6*time.Second
	}, func(ln net.Listener) net.Listener { sl = newStallListener(ln); return sl })
	id := cl.submitYAML("ranks: 2\nranksPerNode: 1\nmaxRestarts: 0\nterminationGracePeriod: 1s\ncommand: [sleep, '300']\n")
	var pids []int
	cl.wait(20*time.Second, "both ranks running", func() bool {
		d := cl.detail(id)
		pids = pids[:0]
		for _, rs := range d.Ranks {
			if rs.Attempt == 1 && rs.State == api.RankRunning {
				pids = append(pids, rs.PID)
			}
		}
		return len(pids) == 2
	})
	sl.stall()
	cl.wait(20*time.Second, "the fenced ranks to die", func() bool {
		return !pidAlive(pids[0]) && !pidAlive(pids[1])
	})
	sl.resume()
	var d *api.JobDetail
	cl.wait(30*time.Second, "attempt 2", func() bool {
		d = cl.detail(id)
		if d.Job.Status.Phase.Final() {
			t.Fatalf("job %s ended %s: %s", id, d.Job.Status.Phase, d.Job.Status.Reason)
		}
		return len(d.Job.Status.Attempts) >= 2
	})
	a := d.Job.Status.Attempts[0]
	if c := api.CauseOf(&a); c != api.CauseFenced || !strings.Contains(a.Reason, "fenced itself: no answer from the server for ") {
		t.Errorf("attempt 1 ended %s (%s): %q; want the fence named", a.Outcome, c, a.Reason)
	}
	if d.Job.Status.Restarts != 0 || a.Charged {
		t.Errorf("restarts %d (attempt 1 charged %v); a fence is not the job's failure", d.Job.Status.Restarts, a.Charged)
	}
}

// TestDeadNodeNotBlamedOnSurvivors: when a node dies its gang's ranks on
// other nodes fail within milliseconds, and their exits reach the server
// long before the node's silence makes it lost. The attempt still ends as
// the node's loss, and uses up no restart: the job, allowed none, runs
// again on the nodes that are left.
func TestDeadNodeNotBlamedOnSurvivors(t *testing.T) {
	cl := startCluster(t, 3, 2)
	dir := t.TempDir()
	// In attempt 1, rank 1 writes its pid and rank 0 exits 1 as soon as
	// that process is gone, as a DDP rank does when its peer dies.
	cmd := fmt.Sprintf(`pf=%s/pid.$GANGWAY_ATTEMPT
if [ "$GANGWAY_ATTEMPT" != 1 ]; then exec sleep 300; fi
if [ "$RANK" = 1 ]; then echo $$ > $pf.tmp; mv $pf.tmp $pf; exec sleep 300; fi
while [ ! -s $pf ]; do sleep 0.02; done
while kill -0 $(cat $pf) 2>/dev/null; do sleep 0.02; done
echo "peer lost" >&2; exit 1`, dir)
	id := cl.submitYAML(fmt.Sprintf("ranks: 2\ngpusPerRank: 2\nmaxRestarts: 0\ncommand: [sh, -c, %q]\n", cmd))
	var dead string
	cl.wait(20*time.Second, "both ranks running", func() bool {
		d := cl.detail(id)
		running := 0
		for _, rs := range d.Ranks {
			if rs.Attempt == 1 && rs.State == api.RankRunning {
				running++
			}
		}
		if a := d.Job.Status.Current(); running == 2 && a != nil {
			dead = a.Placement[1].Node
			return true
		}
		return false
	})
	cl.wait(10*time.Second, "rank 1's pid", func() bool {
		_, err := os.Stat(filepath.Join(dir, "pid.1"))
		return err == nil
	})
	// The node dies: its agent, its supervisor and its ranks at once.
	cl.stopAgent(dead)
	KillRanks(cl.agentDir(dead))
	var d *api.JobDetail
	cl.wait(30*time.Second, "attempt 2", func() bool {
		d = cl.detail(id)
		if d.Job.Status.Phase.Final() {
			t.Fatalf("job %s ended %s: %s", id, d.Job.Status.Phase, d.Job.Status.Reason)
		}
		return len(d.Job.Status.Attempts) >= 2
	})
	a := d.Job.Status.Attempts[0]
	if c := api.CauseOf(&a); c != api.CauseNodeLost || !strings.HasPrefix(a.Reason, "node "+dead+" lost") {
		t.Errorf("attempt 1 ended %s (%s): %q; want node %s lost", a.Outcome, c, a.Reason, dead)
	}
	if d.Job.Status.Restarts != 0 || a.Charged {
		t.Errorf("restarts %d (attempt 1 charged %v); a lost node is not the job's failure", d.Job.Status.Restarts, a.Charged)
	}
}
