package ui

import (
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
)

func serve(t *testing.T, path string, header map[string]string) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequest(http.MethodGet, path, nil)
	for k, v := range header {
		req.Header.Set(k, v)
	}
	w := httptest.NewRecorder()
	Handler("/ui/").ServeHTTP(w, req)
	return w
}

// TestServes: the prefix serves index.html, each file has its type and
// the CSP, a repeat with its ETag costs a 304, anything else is a 404.
func TestServes(t *testing.T) {
	tests := []struct {
		path, ctype string
		code        int
	}{
		{"/ui/", "text/html", 200},
		{"/ui/index.html", "text/html", 200},
		{"/ui/js/app.js", "text/javascript", 200},
		{"/ui/style.css", "text/css", 200},
		{"/ui/favicon.svg", "image/svg+xml", 200},
		{"/ui/nope.js", "text/plain", 404},
		{"/ui/../ui.go", "text/plain", 404},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			w := serve(t, tt.path, nil)
			if w.Code != tt.code || !strings.HasPrefix(w.Header().Get("Content-Type"), tt.ctype) {
				t.Fatalf("%d %s; want %d %s", w.Code, w.Header().Get("Content-Type"), tt.code, tt.ctype)
			}
			if got := w.Header().Get("Content-Security-Policy"); got != CSP {
				t.Errorf("CSP %q", got)
			}
			if w.Header().Get("X-Content-Type-Options") != "nosniff" {
				t.Error("no nosniff")
			}
			if tt.code != 200 {
				return
			}
			etag := w.Header().Get("ETag")
			if again := serve(t, tt.path, map[string]string{"If-None-Match": etag}); etag == "" || again.Code != http.StatusNotModified {
				t.Errorf("again with ETag %q: %d; want 304", etag, again.Code)
			}
		})
	}
}

// TestCSPIsStrict: scripts and styles from the dashboard only, no inline
// script or eval, requests to the server only.
func TestCSPIsStrict(t *testing.T) {
	for _, want := range []string{"default-src 'none'", "script-src 'self';", "connect-src 'self'", "frame-ancestors 'none'"} {
		if !strings.Contains(CSP, want) {
			t.Errorf("CSP %q lacks %q", CSP, want)
		}
	}
	for _, bad := range []string{"unsafe-inline", "unsafe-eval", "http:", "https:", "*"} {
		if strings.Contains(CSP, bad) {
			t.Errorf("CSP %q allows %q", CSP, bad)
		}
	}
}

// TestNoMarkupFromStrings: the scripts never turn a string into markup
// (the dashboard's rule for user data: text nodes and attribute values
// only), and the page has no inline script, style or handler for the CSP
// to refuse.
func TestNoMarkupFromStrings(t *testing.T) {
	sinks := regexp.MustCompile(`innerHTML|outerHTML|insertAdjacentHTML|document\.write|\beval\(|new Function|setAttribute\(\s*['"](style|on)|srcdoc|createContextualFragment`)
	files, err := embedded()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for p, f := range files {
		switch {
		case strings.HasSuffix(p, ".js"):
			n++
			for i, line := range strings.Split(string(f.body), "\n") {
				if m := sinks.FindString(line); m != "" && !strings.HasPrefix(strings.TrimSpace(line), "//") {
					t.Errorf("%s:%d uses %s: put data in as text (textContent, dom.js's h)", p, i+1, m)
				}
			}
		case strings.HasSuffix(p, ".html"):
			html := string(f.body)
			for _, m := range regexp.MustCompile(`(?s)<script([^>]*)>(.*?)</script>`).FindAllStringSubmatch(html, -1) {
				if !strings.Contains(m[1], "src=") || strings.TrimSpace(m[2]) != "" {
					t.Errorf("%s has an inline script the CSP would refuse: %q", p, m[0])
				}
			}
			for _, re := range []string{`\son[a-z]+\s*=`, `\sstyle\s*=`, `<style`} {
				if m := regexp.MustCompile(re).FindString(html); m != "" {
					t.Errorf("%s has inline code or style the CSP would refuse: %q", p, m)
				}
			}
		}
	}
	if n < 3 {
		t.Errorf("checked %d scripts", n)
	}
}
