package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/gangway/gangway/internal/api"
	"github.com/gangway/gangway/internal/api/client"
	"github.com/gangway/gangway/internal/base/pki"
)

// TestEveryRouteHasAccess: every route a handler file registers has an
// access rule (guard refuses a route without one to everyone, so a new
// route forgotten here would be unusable, not open), and every rule names
// a route that exists.
func TestEveryRouteHasAccess(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile(`mux\.HandleFunc\("([^"]+)"`)
	seen := map[string]bool{}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range re.FindAllStringSubmatch(string(b), -1) {
			seen[m[1]] = true
			if _, ok := routeAccess[m[1]]; !ok {
				t.Errorf("%s registers %q with no access rule in routeAccess", f, m[1])
			}
		}
	}
	for p := range routeAccess {
		if !seen[p] {
			t.Errorf("routeAccess has %q, which no handler file registers", p)
		}
	}
}

// TestUnauthenticatedRefused: every route but health and the join refuses
// a request without credentials, with a wrong, an expired or a revoked
// token, or with a join token, with 401 and a message saying which.
func TestUnauthenticatedRefused(t *testing.T) {
	e := startAgentEnv(t)
	expiring, err := e.admin.CreateToken(e.ctx, &api.TokenRequest{User: "eve", Role: api.RoleAdmin, TTL: api.Duration(time.Millisecond)})
	if err != nil {
		t.Fatal(err)
	}
	revoked, err := e.admin.CreateToken(e.ctx, &api.TokenRequest{User: "mallory", Role: api.RoleAdmin})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.admin.RevokeToken(e.ctx, revoked.ID); err != nil {
		t.Fatal(err)
	}
	join, err := e.admin.CreateToken(e.ctx, &api.TokenRequest{Kind: api.TokenJoin})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Millisecond) // past the expiring token's life
	_, id, _, _ := splitToken(e.adm.Token)
	creds := []struct{ name, header, want string }{
		{"no credentials", "", "no credentials"},
		{"a token of someone else's making", "Bearer not-a-gangway-token", "not valid"},
		{"the admin's token id with a wrong secret", "Bearer " + userTokenPrefix + id + "_wrong", "not valid"},
		{"an expired token", "Bearer " + expiring.Secret, "expired"},
		{"a revoked token", "Bearer " + revoked.Secret, "revoked"},
		{"a join token", "Bearer " + join.Secret, "only joins a node"},
	}
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: pki.ClientTLS(e.s.ca.Pool(), nil)}}
	defer hc.CloseIdleConnections()
	patterns := make([]string, 0, len(routeAccess))
	for p, a := range routeAccess {
		if a != public && p != "/" {
			patterns = append(patterns, p)
		}
	}
	sort.Strings(patterns)
	jobsBefore, _, _ := e.s.st.Jobs(e.ctx)
	for _, p := range patterns {
		method, path, _ := strings.Cut(p, " ")
		path = strings.NewReplacer("{id}", "1", "{name}", "n1", "{action}", "drain").Replace(path)
		for _, c := range creds {
			req, _ := http.NewRequestWithContext(e.ctx, method, e.url+path, strings.NewReader(`{"ranks":1,"command":["true"]}`))
			if c.header != "" {
				req.Header.Set("Authorization", c.header)
			}
			resp, err := hc.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(string(body), c.want) {
				t.Errorf("%s %s with %s: %d %s; want 401 saying %q", method, path, c.name, resp.StatusCode, body, c.want)
			}
		}
	}
	if jobsAfter, _, _ := e.s.st.Jobs(e.ctx); len(jobsAfter) != len(jobsBefore) {
		t.Errorf("refused requests made %d jobs", len(jobsAfter)-len(jobsBefore))
	}
	// Health stays open (load balancers probe it).
	if _, err := e.anon().Health(e.ctx); err != nil {
		t.Errorf("health without credentials: %v", err)
	}
}

// TestPlainHTTPAndUntrustedCA: plain HTTP to the HTTPS port, and a
// client that does not trust the cluster CA, get errors that say what to
// do.
func TestPlainHTTPAndUntrustedCA(t *testing.T) {
	e := startAgentEnv(t)
	plain := e.clientFor(client.Config{Server: "http" + strings.TrimPrefix(e.url, "https"), Token: e.adm.Token})
	if _, err := plain.Jobs(e.ctx, client.JobQuery{}); err == nil || !strings.Contains(err.Error(), "speaks HTTPS") {
		t.Errorf("plain HTTP: %v; want an error saying the server speaks HTTPS", err)
	}
	system := e.clientFor(client.Config{Server: e.url, Token: e.adm.Token})
	if _, err := system.Jobs(e.ctx, client.JobQuery{}); !errors.Is(err, client.ErrUntrusted) || !strings.Contains(err.Error(), "--ca-file") {
		t.Errorf("no CA: %v; want ErrUntrusted naming --ca-file", err)
	}
	other, _ := pki.NewCA("other", time.Hour)
	f := filepath.Join(t.TempDir(), "other-ca.crt")
	os.WriteFile(f, other.PEM, 0o644)
	wrong := e.clientFor(client.Config{Server: e.url, Token: e.adm.Token, CAFile: f})
	if _, err := wrong.Jobs(e.ctx, client.JobQuery{}); !errors.Is(err, client.ErrUntrusted) || !strings.Contains(err.Error(), f) {
		t.Errorf("wrong CA file: %v; want ErrUntrusted naming %s", err, f)
	}
}

// TestRolesOwnersAndQueues: what users, viewers and admins may do to each
// other's jobs, queues and deployments; every refusal is a 403 that says
// why, and changes nothing.
func TestRolesOwnersAndQueues(t *testing.T) {
	e := startAgentEnv(t)
	alice, bob := e.user("alice", api.RoleUser), e.user("bob", api.RoleUser)
	carol := e.user("carol", api.RoleViewer)
	job := func(c *client.Client, extra string) (string, error) {
		return c.SubmitID(e.ctx, []byte(`{"ranks": 1, "command": ["sleep", "100"], "env": {"HF_TOKEN": "hf_secret"}`+extra+`}`))
	}
	id, err := job(alice, "")
	if err != nil {
		t.Fatal(err)
	}
	d, err := alice.Job(e.ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if d.Job.Spec.User != "alice" || d.Job.Spec.RunAs == nil || d.Job.Spec.RunAs.UID != 64005 {
		t.Errorf("alice's job: user %q, runAs %+v; want alice as uid 64005", d.Job.Spec.User, d.Job.Spec.RunAs)
	}
	if _, err := e.admin.SetQueue(e.ctx, api.QueueSpec{Name: "team-a", Weight: 1, Users: []string{"alice"}}); err != nil {
		t.Fatal(err)
	}
	rootUID := 0
	rt, err := e.admin.CreateToken(e.ctx, &api.TokenRequest{User: "rooty", Role: api.RoleUser, UID: &rootUID})
	if err != nil {
		t.Fatal(err)
	}
	rooty := e.withToken(rt.Secret)
	forbidden := func(what string, err error, says string) {
		t.Helper()
		var ae *client.APIError
		if !errors.As(err, &ae) || ae.Status != http.StatusForbidden || !strings.Contains(ae.Message, says) {
			t.Errorf("%s: %v; want 403 saying %q", what, err, says)
		}
	}
	_, err = job(carol, "")
	forbidden("a viewer submits", err, "may only read")
	_, err = bob.Cancel(e.ctx, id)
	forbidden("bob cancels alice's job", err, "belongs to alice")
	_, err = bob.SetPriority(e.ctx, id, 99)
	forbidden("bob reprioritises alice's job", err, "belongs to alice")
	err = bob.Logs(e.ctx, id, client.LogQuery{}, io.Discard)
	forbidden("bob reads alice's logs", err, "belongs to alice")
	err = carol.Logs(e.ctx, id, client.LogQuery{}, io.Discard)
	forbidden("a viewer reads logs", err, "may only read")
	_, err = job(bob, `, "queue": "team-a"`)
	forbidden("bob submits to alice's queue", err, "queue team-a admits only")
	_, err = job(rooty, "")
	forbidden("a user mapped to root submits to the default queue", err, "does not run jobs as root")
	_, err = bob.CreateToken(e.ctx, &api.TokenRequest{User: "bob", Role: api.RoleAdmin})
	forbidden("a user makes himself an admin", err, "only admins")
	_, err = bob.NodeAction(e.ctx, "n1", "drain")
	forbidden("a user drains a node", err, "only admins")
	_, err = carol.SetQueue(e.ctx, api.QueueSpec{Name: "team-a", Weight: 1})
	forbidden("a viewer changes a queue", err, "only admins")
	_, err = bob.Audit(e.ctx, "", time.Time{}, 0)
	forbidden("a user reads the audit log", err, "only admins")
	for _, f := range []string{`, "user": "alice"`, `, "runAs": {"uid": 0, "gid": 0}`} {
		if _, err := job(bob, f); statusOf(err) != http.StatusUnprocessableEntity {
			t.Errorf("bob sets %s: %v; want 422", f, err)
		}
	}
	// Nothing changed.
	if d, _ := alice.Job(e.ctx, id); d.Job.Status.CancelRequested || d.Job.Spec.Priority != 0 {
		t.Errorf("alice's job after bob's refused calls: cancel %v, priority %d", d.Job.Status.CancelRequested, d.Job.Spec.Priority)
	}
	// What each may do.
	if _, err := job(alice, `, "queue": "team-a"`); err != nil {
		t.Errorf("alice submits to her queue: %v", err)
	}
	if _, err := e.admin.SetQueue(e.ctx, api.QueueSpec{Name: "rootq", Weight: 1, AllowRoot: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := job(rooty, `, "queue": "rootq"`); err != nil {
		t.Errorf("root on a queue that allows it: %v", err)
	}
	if _, err := alice.SetPriority(e.ctx, id, 5); err != nil {
		t.Errorf("alice reprioritises her job: %v", err)
	}
	// Env: the owner and admins see it; others see it redacted.
	for _, c := range []struct {
		who  string
		c    *client.Client
		sees bool
	}{{"alice", alice, true}, {"admin", e.admin, true}, {"bob", bob, false}, {"carol", carol, false}} {
		d, err := c.c.Job(e.ctx, id)
		if err != nil {
			t.Fatalf("%s reads the job: %v", c.who, err)
		}
		l, err := c.c.Jobs(e.ctx, client.JobQuery{User: "alice"})
		if err != nil || len(l.Jobs) == 0 {
			t.Fatalf("%s lists alice's jobs: %v", c.who, err)
		}
		for _, got := range []string{d.Job.Spec.Env["HF_TOKEN"], l.Jobs[0].Spec.Env["HF_TOKEN"]} {
			if (got == "hf_secret") != c.sees {
				t.Errorf("%s sees HF_TOKEN=%q; want the value: %v", c.who, got, c.sees)
			}
		}
	}
	if _, err := bob.Cancel(e.ctx, id); err == nil {
		t.Fatal("unreachable: checked above")
	}
	if _, err := alice.Cancel(e.ctx, id); err != nil {
		t.Errorf("alice cancels her job: %v", err)
	}
	// The audit log has who did what, and the refusals.
	recs, err := e.admin.Audit(e.ctx, "bob", time.Time{}, 100)
	if err != nil {
		t.Fatal(err)
	}
	var cancels []int
	for _, r := range recs {
		if r.Path == "/v1/jobs/"+id+"/cancel" {
			cancels = append(cancels, r.Code)
		}
	}
	if len(cancels) != 2 || cancels[0] != http.StatusForbidden {
		t.Errorf("audit records of bob's cancels: %v; want two 403s", cancels)
	}
}

// TestDeploymentTakeover: another user's apply, scale or delete of a
// deployment is refused, and its replicas keep the owner's command.
func TestDeploymentTakeover(t *testing.T) {
	e := startAgentEnv(t)
	alice, bob := e.user("alice", api.RoleUser), e.user("bob", api.RoleUser)
	spec := `{"name": "llama", "engine": "sim", "model": "llama3-8b", "replicas": 1, "command": [%q]}`
	if _, err := alice.Deploy(e.ctx, []byte(fmt.Sprintf(spec, "/opt/serve"))); err != nil {
		t.Fatal(err)
	}
	if _, err := bob.Deploy(e.ctx, []byte(fmt.Sprintf(spec, "/tmp/impostor"))); statusOf(err) != http.StatusForbidden {
		t.Errorf("bob re-applies alice's deployment: %v; want 403", err)
	}
	if _, err := bob.Scale(e.ctx, "llama", 0); statusOf(err) != http.StatusForbidden {
		t.Errorf("bob scales alice's deployment: %v; want 403", err)
	}
	if err := bob.DeleteDeployment(e.ctx, "llama"); statusOf(err) != http.StatusForbidden {
		t.Errorf("bob deletes alice's deployment: %v; want 403", err)
	}
	d, err := e.admin.Deployment(e.ctx, "llama")
	if err != nil {
		t.Fatal(err)
	}
	if d.User != "alice" || d.Spec.Command[0] != "/opt/serve" || d.Status.Deleting || d.Spec.Replicas != 1 {
		t.Errorf("deployment after bob's calls: user %q command %q deleting %v replicas %d", d.User, d.Spec.Command, d.Status.Deleting, d.Spec.Replicas)
	}
}

// TestJoinTokens: a join token admits as many agents as it has uses, then
// is refused, as is an expired one; a certificate request must name the
// node joining; a revoked node is cut off until it joins again.
func TestJoinTokens(t *testing.T) {
	e := startAgentEnv(t)
	jt, err := e.admin.CreateToken(e.ctx, &api.TokenRequest{Kind: api.TokenJoin, Uses: 1})
	if err != nil {
		t.Fatal(err)
	}
	joiner := e.withToken(jt.Secret)
	joinAs := func(c *client.Client, node, cn string) error {
		csr, _, _ := pki.NewCSR(cn)
		_, err := c.Join(e.ctx, &api.JoinRequest{Node: node, CSR: string(csr)})
		return err
	}
	if err := joinAs(joiner, "n1", "n2"); statusOf(err) != http.StatusBadRequest {
		t.Errorf("a request naming another node: %v; want 400", err)
	}
	// That refusal spent nothing: the one use joins n1.
	if err := joinAs(joiner, "n1", "n1"); err != nil {
		t.Fatalf("join: %v", err)
	}
	if err := joinAs(joiner, "n3", "n3"); statusOf(err) != http.StatusUnauthorized {
		t.Errorf("the join token replayed: %v; want 401", err)
	}
	short, _ := e.admin.CreateToken(e.ctx, &api.TokenRequest{Kind: api.TokenJoin, TTL: api.Duration(time.Millisecond)})
	time.Sleep(5 * time.Millisecond)
	if err := joinAs(e.withToken(short.Secret), "n4", "n4"); statusOf(err) != http.StatusUnauthorized {
		t.Errorf("an expired join token: %v; want 401", err)
	}
	if err := joinAs(e.anon(), "n5", "n5"); statusOf(err) != http.StatusUnauthorized {
		t.Errorf("a join without a token: %v; want 401", err)
	}
	if err := joinAs(e.user("alice", api.RoleUser), "n6", "n6"); statusOf(err) != http.StatusUnauthorized {
		t.Errorf("a join with a user's token: %v; want 401", err)
	}
	// Revocation cuts a node off; joining again brings it back.
	n7 := e.node("n7")
	if err := e.register(n7, testNode("n7", "https://127.0.0.1:1", nil)); err != nil {
		t.Fatal(err)
	}
	if _, err := e.admin.NodeAction(e.ctx, "n7", "revoke"); err != nil {
		t.Fatal(err)
	}
	_, err = n7.Heartbeat(e.ctx, &api.Heartbeat{Node: "n7"})
	if statusOf(err) != http.StatusUnauthorized || !strings.Contains(err.Error(), "revoked") {
		t.Errorf("a revoked node's heartbeat: %v; want 401 saying revoked", err)
	}
	if err := e.register(e.node("n7"), testNode("n7", "https://127.0.0.1:1", nil)); err != nil {
		t.Errorf("the node joined again: %v", err)
	}
}

// TestRenewKeepsTheNode: a node trades a new request for a new
// certificate of its own name, and cannot renew another's.
func TestRenewKeepsTheNode(t *testing.T) {
	e := startAgentEnv(t)
	n1 := e.node("n1")
	csr, _, _ := pki.NewCSR("n1")
	ans, err := n1.Renew(e.ctx, &api.JoinRequest{Node: "n1", CSR: string(csr)})
	if err != nil {
		t.Fatal(err)
	}
	if name, err := nodeIdentityOf([]byte(ans.Certificate)); err != nil || name != "n1" {
		t.Errorf("renewed certificate names %q (%v); want n1", name, err)
	}
	other, _, _ := pki.NewCSR("n2")
	if _, err := n1.Renew(e.ctx, &api.JoinRequest{Node: "n2", CSR: string(other)}); statusOf(err) != http.StatusForbidden {
		t.Errorf("n1 renews n2's certificate: %v; want 403", err)
	}
}

// TestLogProxyRefusesForgedAgentURL: a node whose agent URL points at an
// internal service gets nothing through the server's log proxy: plain
// HTTP is not followed, and an HTTPS service without the node's
// certificate from the cluster CA is refused.
func TestLogProxyRefusesForgedAgentURL(t *testing.T) {
	const secret = "internal-metadata-secret"
	internal := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, secret) }))
	defer internal.Close()
	plain := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, secret) }))
	defer plain.Close()
	for _, url := range []string{internal.URL, plain.URL} {
		t.Run(url[:strings.Index(url, ":")], func(t *testing.T) {
			e := startAgentEnv(t)
			for _, n := range []string{"n1", "n2"} {
				if err := e.register(e.node(n), testNode(n, url, nil)); err != nil {
					t.Fatal(err)
				}
			}
			j := e.placed(e.admin)
			var out strings.Builder
			err := e.admin.Logs(context.Background(), j.ID, client.LogQuery{}, &out)
			if err == nil || strings.Contains(out.String(), secret) || strings.Contains(err.Error(), secret) {
				t.Errorf("logs through a forged agent URL %s: %v, %q; want a refusal and nothing of its answer", url, err, out.String())
			}
		})
	}
}

// TestRateLimitPerUser: a user past the API rate gets 429 with
// Retry-After; admins are not limited.
func TestRateLimitPerUser(t *testing.T) {
	e := startAgentEnvWith(t, func(c *Config) { c.APIRate, c.APIBurst = 0.001, 3 })
	alice := e.user("alice", api.RoleUser)
	var last error
	for range 4 {
		_, last = alice.Jobs(e.ctx, client.JobQuery{})
	}
	var ae *client.APIError
	if !errors.As(last, &ae) || ae.Status != http.StatusTooManyRequests || !strings.Contains(ae.Message, "too many requests from alice") {
		t.Errorf("alice's 4th request at a burst of 3: %v; want 429", last)
	}
	for range 10 {
		if _, err := e.admin.Jobs(e.ctx, client.JobQuery{}); err != nil {
			t.Fatalf("the admin is limited: %v", err)
		}
	}
}

// TestSecretEnv: a job's secretEnv names a file in its user's directory
// under --secrets-dir: a missing one is refused at submission, naming the
// variable; a present one reaches the rank's assignment (and nothing of
// it is in the stored spec).
func TestSecretEnv(t *testing.T) {
	dir := t.TempDir()
	e := startAgentEnvWith(t, func(c *Config) { c.SecretsDir = dir })
	nodes := e.twoNodes()
	alice := e.user("alice", api.RoleUser)
	spec := []byte(`{"ranks": 2, "gpusPerRank": 2, "command": ["true"], "secretEnv": {"HF_TOKEN": "hf"}}`)
	if _, err := alice.SubmitID(e.ctx, spec); statusOf(err) != http.StatusUnprocessableEntity || !strings.Contains(err.Error(), "hf") {
		t.Errorf("a secret file that is not there: %v; want 422", err)
	}
	os.MkdirAll(filepath.Join(dir, "alice"), 0o700)
	os.WriteFile(filepath.Join(dir, "alice", "hf"), []byte("hf_value\n"), 0o600)
	id, err := alice.SubmitID(e.ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	if d, err := alice.Job(e.ctx, id); err != nil || strings.Contains(fmt.Sprint(d.Job.Spec), "hf_value") {
		t.Errorf("the stored spec holds the secret's value (or %v)", err)
	}
	wctx, cancel := context.WithTimeout(e.ctx, time.Minute)
	defer cancel()
	for {
		l, err := nodes["n1"].Assignments(wctx, client.AssignmentQuery{Node: "n1"})
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range l.Assignments {
			if a.JobID == id {
				if a.Env["HF_TOKEN"] != "hf_value" {
					t.Errorf("the rank's HF_TOKEN = %q; want the file's value", a.Env["HF_TOKEN"])
				}
				return
			}
		}
		select {
		case <-wctx.Done():
			t.Fatal("job never assigned to n1")
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// nodeIdentityOf names the node a certificate is for .
func nodeIdentityOf(certPEM []byte) (string, error) {
	c, err := pki.ParseCert(certPEM)
	if err != nil {
		return "", err
	}
	id, ok := pki.Verify(c)
	if !ok || !id.Node {
		return "", errors.New("not a node certificate")
	}
	return id.Name, nil
}
