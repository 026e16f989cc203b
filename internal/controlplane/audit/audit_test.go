package audit

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gangway/gangway/internal/api"
	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// readLines decodes the JSON lines of path.
func readLines(t *testing.T, path string) []api.AuditRecord {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []api.AuditRecord
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var r api.AuditRecord
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("%s: %q: %v", path, sc.Text(), err)
		}
		out = append(out, r)
	}
	return out
}

func rec(who string, i int) api.AuditRecord {
	return api.AuditRecord{
		Time: time.Date(2026, 1, 1, 0, 0, i, 0, time.UTC), Who: who,
		Method: "POST", Path: fmt.Sprintf("/v1/jobs/%d", i), Remote: "127.0.0.1:1", Code: 200,
	}
}

// TestFileAndRing: records reach the file (0600, in a 0700 folder) in
// order, and the ring keeps the last Keep, which Recent filters.
func TestFileAndRing(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit", "audit.log")
	l, err := Open(path, 3)
	if err != nil {
		t.Fatal(err)
	}
	var all []api.AuditRecord
	for i := range 5 {
		r := rec([]string{"ann", "bob"}[i%2], i)
		all = append(all, r)
		l.Append(r)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(all, readLines(t, path)); diff != "" {
		t.Errorf("file (-want +got):\n%s", diff)
	}
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o600 {
		t.Errorf("file mode %v; want 0600", fi.Mode().Perm())
	}
	if fi, _ := os.Stat(filepath.Dir(path)); fi.Mode().Perm() != 0o700 {
		t.Errorf("folder mode %v; want 0700", fi.Mode().Perm())
	}
	for _, tc := range []struct {
		name string
		f    Filter
		want []api.AuditRecord
	}{
		{"all kept", Filter{}, all[2:]},
		{"by who", Filter{Who: "ann"}, []api.AuditRecord{all[2], all[4]}},
		{"since", Filter{Since: all[3].Time}, all[3:]},
		{"limit keeps the newest", Filter{Limit: 2}, all[3:]},
		{"nobody", Filter{Who: "eve"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, l.Recent(tc.f)); diff != "" {
				t.Errorf("Recent(%+v) (-want +got):\n%s", tc.f, diff)
			}
		})
	}
	if n, err := l.Failures(); n != 0 || err != nil {
		t.Errorf("Failures = %d, %v", n, err)
	}
}

// TestRotation: the file is rotated before it would pass MaxBytes, and
// only MaxBackups old files are kept, all records in order across them.
func TestRotation(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.log")
	line, _ := json.Marshal(rec("ann", 0))
	per := 3 // records per file
	l, err := OpenConfig(Config{Path: path, MaxBytes: int64(per * (len(line) + 1)), MaxBackups: 2})
	if err != nil {
		t.Fatal(err)
	}
	var all []api.AuditRecord
	for i := range 3*per + 1 { // three full files and one record
		all = append(all, rec("ann", i))
		l.Append(all[i])
		if i%2 == 0 {
			time.Sleep(time.Millisecond) // let the writer take several batches
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path + ".3"); !os.IsNotExist(err) {
		t.Errorf("%s.3 exists (%v); want at most 2 backups", path, err)
	}
	var got []api.AuditRecord
	for _, p := range []string{path + ".2", path + ".1", path} {
		recs := readLines(t, p)
		if fi, _ := os.Stat(p); fi.Size() > int64(per*(len(line)+1)) {
			t.Errorf("%s has %d bytes, over MaxBytes", p, fi.Size())
		}
		got = append(got, recs...)
	}
	if diff := cmp.Diff(all[per:], got); diff != "" {
		t.Errorf("records across the files (-want +got):\n%s", diff)
	}
}

// TestWriteFailureCounted: a file that cannot be written costs records,
// counted, not requests.
func TestWriteFailureCounted(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.log")
	l, err := Open(path, 10)
	if err != nil {
		t.Fatal(err)
	}
	l.file.Close() // every write now fails; the test owns the writer's file here only before the first Append
	l.Append(rec("ann", 1))
	l.Append(rec("ann", 2))
	l.Close()
	if n, err := l.Failures(); n != 2 || err == nil {
		t.Errorf("Failures = %d, %v; want 2 and a reason", n, err)
	}
	if got := len(l.Recent(Filter{})); got != 2 {
		t.Errorf("Recent has %d records; want 2 (the ring does not depend on the disk)", got)
	}
}

// TestConcurrentAppend: many goroutines append at once (run with -race);
// every record reaches the file and the ring keeps Keep.
func TestConcurrentAppend(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.log")
	l, err := Open(path, 100)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 500 {
				l.Append(rec(fmt.Sprint("u", g), i))
				if i%100 == 0 {
					l.Recent(Filter{Who: "u1", Limit: 5})
				}
			}
		})
	}
	wg.Wait()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if got := len(readLines(t, path)); got != 8*500 {
		t.Errorf("file has %d records; want %d", got, 8*500)
	}
	if got := len(l.Recent(Filter{})); got != 100 {
		t.Errorf("ring has %d; want 100", got)
	}
}

// TestMemoryOnly: an empty path keeps the ring alone.
func TestMemoryOnly(t *testing.T) {
	l, err := Open("", 2)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		l.Append(rec("ann", i))
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]api.AuditRecord{rec("ann", 1), rec("ann", 2)}, l.Recent(Filter{})); diff != "" {
		t.Error(diff)
	}
}

// TestMiddleware: mutating requests are recorded with their code, path
// (never the query), remote, who (from Annotate, else the who func) and a
// failure's message; reads are not.
func TestMiddleware(t *testing.T) {
	l, err := Open("", 100)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/jobs", func(w http.ResponseWriter, r *http.Request) {
		Annotate(r.Context(), "ann", "user", api.RoleUser)
		w.WriteHeader(http.StatusCreated)
	})
	mux.HandleFunc("DELETE /v1/jobs/{id}", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusForbidden)
		fmt.Fprint(w, `{"error": "bob may not cancel ann's job 7"}`)
	})
	mux.HandleFunc("PUT /v1/big", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusBadRequest)
		fmt.Fprintf(w, `{"error": %q}`, strings.Repeat("x", 2000))
	})
	mux.HandleFunc("GET /v1/jobs", func(w http.ResponseWriter, r *http.Request) {})
	who := func(r *http.Request) (string, string, api.Role) { return "bob", "user", api.RoleViewer }
	h := Middleware(l, who, mux)

	do := func(method, target string) {
		req := httptest.NewRequest(method, target, strings.NewReader(`{"secret":"hunter2"}`))
		req.RemoteAddr = "10.0.0.9:5555"
		h.ServeHTTP(httptest.NewRecorder(), req)
	}
	do("POST", "/v1/jobs?token=hunter2")
	do("GET", "/v1/jobs")
	do("HEAD", "/v1/jobs")
	do("DELETE", "/v1/jobs/7")
	do("PUT", "/v1/big")
	do("PATCH", "/v1/nowhere")

	got := l.Recent(Filter{})
	for i := range got {
		if got[i].Time.IsZero() {
			t.Errorf("record %d has no time", i)
		}
		got[i].Time = time.Time{}
	}
	want := []api.AuditRecord{
		{Who: "ann", Kind: "user", Role: api.RoleUser, Method: "POST", Path: "/v1/jobs", Remote: "10.0.0.9:5555", Code: 201},
		{Who: "bob", Kind: "user", Role: api.RoleViewer, Method: "DELETE", Path: "/v1/jobs/7", Remote: "10.0.0.9:5555", Code: 403, Error: "bob may not cancel ann's job 7"},
		{Who: "bob", Kind: "user", Role: api.RoleViewer, Method: "PUT", Path: "/v1/big", Remote: "10.0.0.9:5555", Code: 400, Error: "Bad Request"},
		{Who: "bob", Kind: "user", Role: api.RoleViewer, Method: "PATCH", Path: "/v1/nowhere", Remote: "10.0.0.9:5555", Code: 404, Error: "Not Found"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("records (-want +got):\n%s", diff)
	}
	for _, r := range got {
		if b, _ := json.Marshal(r); strings.Contains(string(b), "hunter2") {
			t.Errorf("a record holds the secret: %s", b)
		}
	}
}

// TestMiddlewareNoWho: without a who func or an annotation, the caller is
// recorded unnamed; a panicking handler is recorded as 500.
func TestMiddlewareNoWho(t *testing.T) {
	l, _ := Open("", 10)
	defer l.Close()
	h := Middleware(l, nil, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/panic" {
			panic(http.ErrAbortHandler)
		}
	}))
	h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("POST", "/ok", nil))
	func() {
		defer func() {
			if recover() == nil {
				t.Error("the panic was swallowed")
			}
		}()
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("POST", "/panic", nil))
	}()
	got := l.Recent(Filter{})
	if len(got) != 2 || got[0].Who != "" || got[0].Code != 200 || got[1].Code != 500 {
		t.Errorf("records = %+v; want an unnamed 200 and a 500", got)
	}
}

// TestMiddlewareFlushes: a streamed answer reaches the client while the
// handler still runs, through the recorder.
func TestMiddlewareFlushes(t *testing.T) {
	l, _ := Open("", 10)
	defer l.Close()
	release := make(chan struct{})
	srv := httptest.NewServer(Middleware(l, nil, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, ok := w.(http.Flusher); !ok {
			t.Error("the wrapped writer is no http.Flusher")
		}
		fmt.Fprintln(w, "first")
		w.(http.Flusher).Flush()
		<-release
		fmt.Fprintln(w, "second")
		if err := http.NewResponseController(w).Flush(); err != nil {
			t.Errorf("ResponseController.Flush: %v", err)
		}
	})))
	defer srv.Close()
	resp, err := http.Post(srv.URL+"/v1/jobs/1/logs", "text/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	line, err := br.ReadString('\n')
	if err != nil || line != "first\n" {
		t.Fatalf("first line %q, %v; want it before the handler ends", line, err)
	}
	close(release)
	if line, _ := br.ReadString('\n'); line != "second\n" {
		t.Errorf("second line %q", line)
	}
	resp.Body.Close()
	srv.Close() // waits for the handler, and so for its record
	if got := l.Recent(Filter{}); len(got) != 1 || got[0].Code != 200 {
		t.Errorf("records = %+v; want one 200", got)
	}
}

// BenchmarkAppend: what a request pays to be audited to a file: Append
// alone, from parallel goroutines; the writer runs beside (and, this fast,
// falls behind, which is counted).
func BenchmarkAppend(b *testing.B) {
	l, err := Open(filepath.Join(b.TempDir(), "audit.log"), 1000)
	if err != nil {
		b.Fatal(err)
	}
	r := rec("ann", 1)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			l.Append(r)
		}
	})
	b.StopTimer()
	if err := l.Close(); err != nil {
		b.Fatal(err)
	}
	n, _ := l.Failures()
	b.ReportMetric(float64(n)/float64(b.N), "dropped/op")
}

// BenchmarkAppendWritten: Append and the writer's encoding and write of
// every record, until Close has them on disk: the log's throughput.
func BenchmarkAppendWritten(b *testing.B) {
	l, err := OpenConfig(Config{Path: filepath.Join(b.TempDir(), "audit.log"), Keep: 1000, MaxPending: b.N + 1})
	if err != nil {
		b.Fatal(err)
	}
	r := rec("ann", 1)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		l.Append(r)
	}
	if err := l.Close(); err != nil {
		b.Fatal(err)
	}
	if n, err := l.Failures(); n != 0 {
		b.Fatalf("%d records failed: %v", n, err)
	}
}
