package cli

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/gangway/gangway/internal/api"
	"github.com/gangway/gangway/internal/cli/simcli"
	"github.com/gangway/gangway/internal/controlplane/server"
	"github.com/gangway/gangway/internal/node/agent"
)

// updateDocShots makes TestDashboardInBrowser write its cluster and job
// screenshots over the README's, in docs/img.
var updateDocShots = flag.Bool("update-doc-shots", false, "write the dashboard test's cluster and job screenshots to docs/img")

// docShots are the screenshots the README shows, by the test's name for
// them.
var docShots = map[string]string{"cluster": "dashboard-cluster.png", "job": "dashboard-job.png", "simulate": "dashboard-simulate.png"}

// browser is a headless Chromium tab on the dashboard, with what went
// wrong in the page: uncaught exceptions, console.error calls, and the
// browser's own errors (a CSP refusal is one) other than failed requests,
// which the dashboard handles.
type browser struct {
	t     *testing.T
	ctx   context.Context
	shots string

	mu       sync.Mutex // guards problems
	problems []string
}

// chromium finds Debian's chromium (or another Chrome) on PATH.
func chromium() string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// newBrowser starts Chromium for the test, its tab closed when the test
// ends. Screenshots go to $GANGWAY_UI_SHOTS, or to a temporary directory.
func newBrowser(t *testing.T, exe string) *browser {
	t.Helper()
	shots := os.Getenv("GANGWAY_UI_SHOTS")
	if shots == "" {
		shots = t.TempDir()
	} else if err := os.MkdirAll(shots, 0o755); err != nil {
		t.Fatal(err)
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(exe),
		chromedp.NoSandbox,        // as root in CI
		chromedp.IgnoreCertErrors, // the cluster's own CA
		chromedp.WindowSize(1440, 900),
		chromedp.UserDataDir(t.TempDir()),
	)
	actx, acancel := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	b := &browser{t: t, ctx: ctx, shots: shots}
	t.Cleanup(func() {
		_ = chromedp.Cancel(ctx)
		cancel()
		acancel()
	})
	if err := chromedp.Do(ctx); err != nil { // start it
		t.Fatalf("start %s: %v", exe, err)
	}
	if err := chromedp.Listen(ctx, b.listen); err != nil {
		t.Fatal(err)
	}
	return b
}

// listen runs in the tab's event loop: it only records.
func (b *browser) listen(ev any) {
	var p string
	switch ev := ev.(type) {
	case *runtime.EventExceptionThrown:
		d := ev.ExceptionDetails
		p = "exception: " + d.Text
		if d.Exception != nil {
			p += " " + d.Exception.Description
		}
		p += fmt.Sprintf(" at %s:%d", d.URL, d.LineNumber+1)
	case *runtime.EventConsoleAPICalled:
		if ev.Type != runtime.ConsoleAPICalledTypeError {
			return
		}
		var args []string
		for _, a := range ev.Args {
			if a.Value != nil {
				args = append(args, string(a.Value))
			} else {
				args = append(args, a.Description)
			}
		}
		p = "console.error: " + strings.Join(args, " ")
	case *log.EventEntryAdded:
		if ev.Entry.Level != log.EntryLevelError || ev.Entry.Source == log.EntrySourceNetwork {
			return
		}
		p = fmt.Sprintf("browser %s error: %s (%s)", ev.Entry.Source, ev.Entry.Text, ev.Entry.URL)
	default:
		return
	}
	b.mu.Lock()
	b.problems = append(b.problems, p)
	b.mu.Unlock()
}

// clean fails the test on any problem the page had so far.
func (b *browser) clean(when string) {
	b.t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, p := range b.problems {
		b.t.Errorf("%s: %s", when, p)
	}
	b.problems = nil
}

func (b *browser) do(what string, actions ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		b.t.Fatalf("%s: %v", what, err)
	}
}

// eval evaluates expr in the page (as DevTools does: the page's CSP
// does not apply) into a value of type T.
func eval[T any](b *browser, expr string) T {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		b.t.Fatalf("evaluate %s: %v", expr, err)
	}
	return v
}

// until waits for expr to be true in the page (an expression that throws,
// reading what is not drawn yet, is false). chromedp.Poll would build its
// predicate with new Function, which the dashboard's CSP refuses.
func (b *browser) until(timeout time.Duration, what, expr string) {
	b.t.Helper()
	deadline := time.Now().Add(timeout)
	check := "(() => { try { return !!(" + expr + "); } catch (e) { return false; } })()"
	for !eval[bool](b, check) {
		if time.Now().After(deadline) {
			b.shot("timeout")
			b.t.Fatalf("timed out after %s waiting for %s (%s); the page says:\n%s", timeout, what, expr,
				eval[string](b, "document.querySelector('main').innerText.slice(0, 3000)"))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// open goes to the dashboard's page hash (without a reload: the app
// routes on the hash).
func (b *browser) open(hash string) {
	b.t.Helper()
	eval[chromedp.Void](b, fmt.Sprintf("location.hash = %q", hash))
}

// shot saves a PNG of the whole page as name.png.
func (b *browser) shot(name string) {
	b.t.Helper()
	eval[chromedp.Void](b, "document.getElementById('tip').hidden = true")
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		b.t.Errorf("screenshot %s: %v", name, err)
		return
	}
	files := []string{filepath.Join(b.shots, name+".png")}
	if doc, ok := docShots[name]; ok && *updateDocShots {
		files = append(files, filepath.Join("..", "..", "docs", "img", doc))
	}
	for _, f := range files {
		if err := os.WriteFile(f, png, 0o644); err != nil {
			b.t.Error(err)
		}
		b.t.Logf("screenshot %s", f)
	}
}

// trainCommand writes a decaying loss from rank 0 every 0.1s (attempt 2
// and later resume from step 1500), its lines to stdout, then idles.
const trainCommand = `i=0; [ "$GANGWAY_ATTEMPT" -gt 1 ] && i=30
if [ "$RANK" != 0 ]; then exec sleep 300; fi
while [ $i -lt 60 ]; do
  i=$((i+1)); l=$((2000 + 80000 / (i + 8)))
  printf '{"step":%d,"loss":%d.%03d,"tokens":%d}\n' $((i*50)) $((l/1000)) $((l%1000)) $((i*50*4096)) >> "$GANGWAY_PROGRESS_FILE"
  printf 'step %d loss %d.%03d\n' $((i*50)) $((l/1000)) $((l%1000))
  sleep 0.1
done
exec sleep 300`

// xssName and friends are what a hostile user puts where the dashboard
// shows text.
const (
	xssName = `<script>window.__xss=1</script><img src=x onerror="window.__xss=2">`
	xssEnv  = `<img src=x onerror="window.__xss=3">`
	xssLog  = `<img src=x onerror=window.__xss=4><svg onload=window.__xss=5>`
	// xssTrace is a trace's file name in the server's trace directory.
	xssTrace = `<img src=x onerror=window.__xss=6>.csv`
)

// simTraceDir is a trace directory with testdata's tiny trace and a copy
// under a hostile name.
func simTraceDir(t *testing.T) string {
	t.Helper()
	tiny, err := os.ReadFile(filepath.Join("testdata", "traces", "tiny.csv"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, name := range []string{"tiny.csv", xssTrace} {
		if err := os.WriteFile(filepath.Join(dir, name), tiny, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestDashboardInBrowser drives the dashboard in headless Chromium
// against an in-process cluster of three fake-GPU nodes under two leaves:
// sign in with a token, see the topology, watch a submitted job appear
// and change state without a reload, follow a training job's loss curve
// and log, see a deployment's TTFT and requests a second, see a killed
// node turn lost and the job's next attempt start with its cause on the
// timeline, replay a named trace on the Simulate page and see its charts,
// and find every hostile string shown as text with nothing run.
// No page may log an error or throw, and a quiet page makes no requests.
// Screenshots of each page are saved (GANGWAY_UI_SHOTS=DIR keeps them;
// -update-doc-shots writes the README's two in docs/img).
func TestDashboardInBrowser(t *testing.T) {
	exe := chromium()
	if exe == "" {
		t.Skip("install chromium (apt-get install chromium); .ci/run does")
	}
	start := time.Now()
	gl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gwURL := "http://" + gl.Addr().String()
	traces := simTraceDir(t)
	cl := startClusterWith(t, 0, 0, func(c *server.Config) {
		c.Gateway = gl
		c.Simulator, c.TraceDir = simcli.Service{}, traces
	})
	labels := map[string]map[string]string{
		"n1": {"spine": "s1", "leaf": "l1", "nvlink-domain": "nvl-a"},
		"n2": {"spine": "s1", "leaf": "l1", "nvlink-domain": "nvl-a"},
		"n3": {"spine": "s1", "leaf": "l2", "nvlink-domain": "nvl-b"},
	}
	cl.adjustAgent = func(c *agent.Config) { c.Labels = labels[c.Name] }
	for _, n := range []string{"n1", "n2", "n3"} {
		cl.startAgent(n, 4)
	}
	cl.waitNodes(3)
	ctx := context.Background()
	if _, err := cl.c.SetQueue(ctx, api.QueueSpec{Name: "research", GuaranteeGPUs: 4, Weight: 2}); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.c.SetQueue(ctx, api.QueueSpec{Name: "prod", GuaranteeGPUs: 4, Weight: 1}); err != nil {
		t.Fatal(err)
	}

	b := newBrowser(t, exe)
	// Sign in: without a token the page asks for one.
	b.do("open the dashboard", chromedp.Navigate(cl.url+"/"))
	// A browser's first page, under CI's load, can take long to start.
	b.until(45*time.Second, "the login box", `document.getElementById('login').open`)
	b.do("sign in", chromedp.SendKeys(chromedp.ID("token"), cl.admin.Token), chromedp.Click(chromedp.ID("login-submit")))
	b.until(10*time.Second, "the login box to close", `!document.getElementById('login').open`)
	if got := eval[string](b, "sessionStorage.getItem('gangway.token')"); got != cl.admin.Token {
		t.Errorf("the token in sessionStorage is %q", got)
	}
	b.until(10*time.Second, "the user named", `document.getElementById('who').textContent.includes('(admin)')`)
	// The login's 401s were the network's, which the page handles; what
	// follows must log no error at all.
	b.clean("signing in")
	// The listener hears the page: a console.error and an exception show.
	eval[chromedp.Void](b, `console.error('probe'); setTimeout(() => { throw new Error('probe') }, 0)`)
	deadline := time.Now().Add(5 * time.Second)
	for {
		b.mu.Lock()
		heard := strings.Join(b.problems, "\n")
		b.mu.Unlock()
		if strings.Contains(heard, "console.error: \"probe\"") && strings.Contains(heard, "exception: Uncaught Error: probe") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the test does not hear the page's errors; it heard:\n%s", heard)
		}
		time.Sleep(20 * time.Millisecond)
	}
	b.mu.Lock()
	b.problems = nil
	b.mu.Unlock()
	eval[chromedp.Void](b, `performance.setResourceTimingBufferSize(100000); window.__csp = []; document.addEventListener('securitypolicyviolation', (e) => window.__csp.push(e.violatedDirective + ' ' + e.blockedURI)); window.__loaded = performance.timeOrigin`)

	// The topology: three nodes under two leaves, twelve free GPUs.
	b.until(15*time.Second, "three nodes of four GPUs", `document.querySelectorAll('.node.ready .gpu.free').length === 12`)
	if n := eval[int](b, `document.querySelectorAll('.group-leaf').length`); n != 2 {
		t.Errorf("%d leaf groups; want l1 and l2", n)
	}
	if got := eval[string](b, `document.querySelector('.node[data-node="n3"]').closest('.group-leaf').querySelector('.group-head').textContent`); got != "leaf l2" {
		t.Errorf("n3 sits under %q; want leaf l2", got)
	}

	// Jobs: a submitted job appears and changes state live.
	b.open("#/jobs")
	b.until(10*time.Second, "the jobs table", `document.querySelector('table.jobs') || document.body.textContent.includes('No jobs yet')`)
	marker := filepath.Join(t.TempDir(), "go")
	quick := cl.submitYAML(fmt.Sprintf("name: wait-for-marker\nranks: 1\ncommand: [sh, -c, 'while [ ! -e %s ]; do sleep 0.05; done; echo done']\n", marker))
	row := fmt.Sprintf(`document.querySelector('tr[data-job="%s"] td.phase')`, quick)
	b.until(20*time.Second, "the new job's row, running", row+` && `+row+`.textContent === 'Running'`)
	if err := os.WriteFile(marker, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	b.until(20*time.Second, "the job's row to turn Succeeded", row+`.textContent === 'Succeeded'`)

	// A training job: its loss curve draws points and its log tails live.
	train := cl.submitYAML("name: llama-8b-pretrain\nqueue: research\nranks: 2\nranksPerNode: 1\ngpusPerRank: 2\nmaxRestarts: 0\nenv: {LR: '3e-4'}\ncommand: [sh, -c, " + jsonQuote(trainCommand) + "]\n")
	b.open("#/jobs/" + train)
	b.until(30*time.Second, "ten loss points", `document.querySelectorAll('svg.loss circle.pt').length >= 10`)
	b.until(15*time.Second, "the log's tail", `document.getElementById('logs').textContent.includes('step 500 loss')`)
	b.open("#/cluster")
	b.until(15*time.Second, "the job's four GPUs in use", fmt.Sprintf(`document.querySelectorAll('.gpu.used[data-job="%s"]').length === 4`, train))
	if got := eval[string](b, fmt.Sprintf(`document.querySelector('.gpu.used[data-job="%s"]').getAttribute('data-tip')`, train)); !strings.Contains(got, "job "+train+" “llama-8b-pretrain” rank") {
		t.Errorf("a used GPU's hover text is %q; want its job and rank", got)
	}
	b.open("#/queues")
	b.until(10*time.Second, "research using its guarantee", `document.querySelector('tr[data-queue="research"] td:nth-child(5)').textContent === '4'`)

	// A deployment: its replicas, requests a second, TTFT and TPOT.
	f := filepath.Join(t.TempDir(), "qwen.yaml")
	if err := os.WriteFile(f, []byte("name: qwen\nengine: sim\nmodel: Qwen3-8B\nreplicas: 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, errOut, code := cl.run("deploy", f); code != 0 {
		t.Fatal(errOut)
	}
	cl.wait(60*time.Second, "the gateway routing to a ready replica", func() bool { return stream(gwURL, "warm up") == nil })
	b.open("#/deployments")
	load, stopLoad := context.WithCancel(ctx)
	var loadWG sync.WaitGroup
	loadWG.Add(1)
	go func() {
		defer loadWG.Done()
		for i := 0; load.Err() == nil; i++ {
			_ = stream(gwURL, fmt.Sprintf("request %d about the same long shared prefix", i))
			time.Sleep(50 * time.Millisecond)
		}
	}()
	b.until(15*time.Second, "one ready replica", `document.querySelector('tr[data-deployment="qwen"] td:nth-child(4)')?.textContent.startsWith('1 / 1')`)
	b.until(30*time.Second, "requests a second, TTFT and TPOT", `(() => {
		const r = document.querySelector('tr[data-deployment="qwen"]');
		return r && parseFloat(r.querySelector('td.rps').textContent) > 0 && /s$/.test(r.querySelector('td.ttft').textContent) && /s$/.test(r.querySelector('td.tpot').textContent);
	})()`)
	stopLoad()
	loadWG.Wait()
	b.shot("deployments")

	// Hostile strings are shown as text, and nothing of them runs.
	hostile := cl.submitYAML(fmt.Sprintf("name: %s\nranks: 1\nenv: {NOTE: %s}\ncommand: [sh, -c, %s]\n", jsonQuote(xssName), jsonQuote(xssEnv), jsonQuote("echo '"+xssLog+"'; exec sleep 300")))
	b.open("#/jobs")
	b.until(15*time.Second, "the hostile job listed", fmt.Sprintf(`document.querySelector('tr[data-job="%s"] td.name')?.textContent === %s`, hostile, jsonQuote(xssName)))
	b.open("#/jobs/" + hostile)
	b.until(15*time.Second, "its name, env and log as text", fmt.Sprintf(`document.querySelector('.job-name')?.textContent === %s && document.querySelector('ul.env').textContent.includes(%s) && document.getElementById('logs').textContent.includes(%s)`,
		jsonQuote(xssName), jsonQuote(xssEnv), jsonQuote(xssLog)))
	if got := eval[string](b, `String(window.__xss) + ' ' + document.querySelectorAll('img, svg[onload], script:not([src])').length`); got != "undefined 0" {
		t.Errorf("window.__xss and injected elements: %q; want undefined 0", got)
	}

	// A killed node turns lost, and the job's next attempt says why.
	d := cl.detail(train)
	dead := d.Job.Status.Current().Placement[1].Node
	b.open("#/cluster")
	b.until(10*time.Second, "the cluster page", `document.querySelectorAll('.node').length === 3`)
	cl.stopAgent(dead)
	KillRanks(cl.agentDir(dead))
	b.until(30*time.Second, "the killed node lost", fmt.Sprintf(`document.querySelector('.node.lost[data-node="%s"]') && document.querySelectorAll('.node.lost .gpu.lost').length === 4`, dead))
	b.open("#/jobs/" + train)
	b.until(45*time.Second, "attempt 1 ended for the lost node, attempt 2 running", `document.querySelector('svg.timeline g.attempt.att-node-lost[data-attempt="1"]') && document.querySelector('svg.timeline g.attempt.att-running[data-attempt="2"]')`)
	b.until(20*time.Second, "attempt 2's loss points", `document.querySelectorAll('svg.loss circle.pt').length >= 55`)
	b.until(15*time.Second, "attempt 2's log", `document.getElementById('logs').textContent.includes('step 2000 loss')`)
	b.shot("job")
	b.open("#/cluster")
	b.until(15*time.Second, "the job's GPUs on the nodes left", fmt.Sprintf(`document.querySelectorAll('.gpu.used[data-job="%s"]').length === 4 && document.querySelectorAll('.node.lost').length === 1`, train))
	b.shot("cluster")

	// A quiet page costs no requests: its loops wait on the server.
	const count = `performance.getEntriesByType('resource').filter((e) => e.name.includes('/v1/')).length`
	before := eval[int](b, count)
	time.Sleep(3 * time.Second)
	if n := eval[int](b, count) - before; n > 4 {
		t.Errorf("the cluster page made %d requests in 3s of a quiet cluster; its two loops should wait on the server", n)
	}

	// A gang that cannot fit waits, and says why.
	big := cl.submitYAML("name: llama-70b-sft\nqueue: research\nranks: 2\nranksPerNode: 1\ngpusPerRank: 4\ncommand: [sleep, '300']\n")
	b.open("#/jobs/" + big)
	b.until(15*time.Second, "why it waits", `/^Why it waits: .{10,}/.test(document.querySelector('.why.waits').textContent)`)
	b.open("#/jobs")
	b.until(10*time.Second, "the waiting job's reason in the list", fmt.Sprintf(`document.querySelector('tr[data-job="%s"] td.reason.waits').textContent.length > 10`, big))
	b.shot("jobs")
	b.open("#/queues")
	b.until(10*time.Second, "research's pending gang", `document.querySelector('tr[data-queue="research"] td:nth-child(9)').textContent === '1 (8 GPUs)'`)
	b.shot("queues")

	// The simulator: bad input marks its field; a named trace replays
	// with two policies and draws their charts and summaries. Trace
	// names are text.
	b.open("#/simulate")
	b.until(10*time.Second, "the named traces", `document.querySelector('#sim-trace option[value="tiny.csv"]')`)
	if got := eval[string](b, `[...document.querySelectorAll('#sim-trace option')].map((o) => o.textContent).join('|')`); !strings.Contains(got, xssTrace+" (") {
		t.Errorf("the trace list reads %q; want %q as text", got, xssTrace)
	}
	eval[chromedp.Void](b, `(() => {
		document.getElementById('sim-trace').value = 'tiny.csv';
		const by = document.getElementById('sim-size-by');
		by.value = 'nodes';
		by.dispatchEvent(new Event('change'));
		document.getElementById('sim-size').value = '0';
		document.getElementById('sim-run').click();
	})()`)
	b.until(10*time.Second, "the cluster's size refused, its field marked", `document.querySelector('#sim-size.bad-field') && /nodes/.test(document.querySelector('main p.error').textContent)`)
	eval[chromedp.Void](b, `document.getElementById('sim-size').value = '3'; document.getElementById('sim-run').click()`)
	b.until(30*time.Second, "two policies' charts and summaries", `document.querySelectorAll('svg.sim-jct path.series').length === 2 && document.querySelectorAll('svg.sim-util path.series').length === 2 && document.querySelectorAll('svg.sim-queue path.series').length === 2 && document.querySelectorAll('table.sim-summary tbody tr').length === 2`)
	if got := eval[string](b, `document.querySelector('.sim-state').getAttribute('data-state') + ' ' + document.querySelector('main p.error').hidden + ' ' + document.querySelector('table.sim-summary tr[data-policy="fifo"] td:nth-child(2)').textContent`); got != "done true 60" {
		t.Errorf("after the run: %q; want done, no error, fifo's 60 jobs", got)
	}
	b.shot("simulate")
	if got := eval[string](b, `String(window.__xss) + ' ' + document.querySelectorAll('img').length`); got != "undefined 0" {
		t.Errorf("after the simulator, window.__xss and images: %q; want undefined 0", got)
	}

	// No reload happened all along: the pages updated in place.
	if got := eval[bool](b, `window.__loaded === performance.timeOrigin`); !got {
		t.Error("the page reloaded")
	}
	if got := eval[string](b, `window.__csp.join('; ')`); got != "" {
		t.Errorf("the CSP refused: %s", got)
	}
	b.clean("using the dashboard")

	// A link with the token in its fragment (gangway demo prints one)
	// signs a new tab in, and the token leaves the address bar.
	eval[chromedp.Void](b, `sessionStorage.clear()`)
	b.do("open a link with the token", chromedp.Navigate(cl.url+"/ui/?from=link#token="+url.QueryEscape(cl.admin.Token)))
	b.until(10*time.Second, "signed in from the link", `sessionStorage.getItem('gangway.token') !== null && location.hash === '#/cluster'`)
	if got := eval[string](b, "sessionStorage.getItem('gangway.token')"); got != cl.admin.Token {
		t.Errorf("the link's token in sessionStorage is %q", got)
	}
	b.until(10*time.Second, "the user named after the link", `document.getElementById('who').textContent.includes('(admin)')`)
	if got := eval[string](b, "location.href"); strings.Contains(got, cl.admin.Token) {
		t.Errorf("the token stayed in the address bar: %s", got)
	}
	t.Logf("the dashboard's browser test took %s", time.Since(start).Round(100*time.Millisecond))
}

// jsonQuote quotes s for YAML and JavaScript alike (a JSON string).
func jsonQuote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
