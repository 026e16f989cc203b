// Package ui is gangway's web dashboard: plain HTML, CSS and JavaScript
// embedded in the binary (no framework, no CDN, no build step) and served
// by the server under /ui/. The pages are public; every datum they show
// they fetch from /v1 with the user's token, so the dashboard sees what
// the API lets its user see and nothing more.
//
// Handler serves the files with a strict Content-Security-Policy (scripts
// and styles from the dashboard alone, no inline script, requests to the
// server alone): the second line of defence behind the scripts' rule of
// putting user data into the page as text, never as markup.
//
// It imports only the standard library.
package ui

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"io/fs"
	"mime"
	"net/http"
	"path"
	"strings"
	"time"
)

//go:embed static
var static embed.FS

// CSP is the Content-Security-Policy of every dashboard response.
const CSP = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// embedded reads the files of static/, by their path under it.
func embedded() (map[string]file, error) {
	files := map[string]file{}
	err := fs.WalkDir(static, "static", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := static.ReadFile(p)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(b)
		ctype := mime.TypeByExtension(path.Ext(p))
		if ctype == "" {
			ctype = http.DetectContentType(b)
		}
		files[strings.TrimPrefix(p, "static/")] = file{b, `"` + hex.EncodeToString(sum[:8]) + `"`, ctype}
		return nil
	})
	return files, err
}

// file is one embedded file, read once.
type file struct {
	body  []byte
	etag  string
	ctype string
}

// Handler serves the dashboard under prefix (such as "/ui/"): the files
// of static/, index.html for the prefix itself, each with the CSP, an
// ETag (its content's hash, so a reload costs a 304) and no caching
// without revalidation. Anything else is a 404.
func Handler(prefix string) http.Handler {
	files, err := embedded()
	if err != nil {
		panic("ui: embedded files: " + err.Error()) // cannot happen: they are compiled in
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", CSP)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("X-Frame-Options", "DENY")
		name, ok := strings.CutPrefix(r.URL.Path, prefix)
		if !ok {
			http.NotFound(w, r)
			return
		}
		if name == "" {
			name = "index.html"
		}
		f, ok := files[name]
		if !ok {
			http.Error(w, "no such page: "+r.URL.Path+" (the dashboard is at "+prefix+")", http.StatusNotFound)
			return
		}
		h.Set("Content-Type", f.ctype)
		h.Set("Cache-Control", "no-cache")
		h.Set("ETag", f.etag)
		http.ServeContent(w, r, name, time.Time{}, bytes.NewReader(f.body))
	})
}
