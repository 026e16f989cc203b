package server

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/gangway/gangway/internal/api/client"
	"github.com/gangway/gangway/internal/controlplane/openapi"
)

// notAPI are the routes that are no part of the API the document
// describes: the dashboard's pages, the redirect to them, and the
// catch-all that answers 404.
var notAPI = map[string]bool{"GET /ui/": true, "GET /{$}": true, "/": true}

// TestOpenAPICoversEveryRoute: every route of the access table (but the
// dashboard's) is in the OpenAPI document with its method, every
// operation of the document is a route, and the document's "public" and
// "agent" agree with the table.
func TestOpenAPICoversEveryRoute(t *testing.T) {
	ops := map[string]openapi.Operation{}
	for _, op := range openapi.Operations {
		ops[op.Method+" "+op.Path] = op
	}
	for route, need := range routeAccess {
		if notAPI[route] {
			continue
		}
		op, ok := ops[route]
		if !ok {
			t.Errorf("route %s is not in the OpenAPI document (internal/controlplane/openapi.Operations)", route)
			continue
		}
		if op.Public != (need == public) {
			t.Errorf("%s: the document says public=%v; routeAccess says %v", route, op.Public, need)
		}
		if op.Agent && need != agent && route != "POST /v1/agent/join" {
			t.Errorf("%s: the document says only agents call it; routeAccess says %v", route, need)
		}
	}
	for key := range ops {
		if _, ok := routeAccess[key]; !ok {
			t.Errorf("the OpenAPI document has %s, which is no route", key)
		}
	}
}

// TestOpenAPIRoutesAnswer: the live server answers the document at
// /openapi.json to anyone, and every operation in it, asked with an
// admin's token, reaches a handler: no 405, and no 404 or 403 from the
// mux or the access table rather than from the handler.
func TestOpenAPIRoutesAnswer(t *testing.T) {
	e := startAgentEnv(t)
	tc, err := client.TLSConfig(client.Config{CAFile: e.adm.CAFile})
	if err != nil {
		t.Fatal(err)
	}
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: tc}}
	defer hc.CloseIdleConnections()
	do := func(method, path, token string, body []byte) (int, []byte) {
		t.Helper()
		req, err := http.NewRequestWithContext(e.ctx, method, e.url+path, bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		return resp.StatusCode, b
	}

	code, doc := do("GET", "/openapi.json", "", nil)
	if code != http.StatusOK || !bytes.Equal(doc, openapi.Document()) {
		t.Fatalf("GET /openapi.json without credentials: %d, %d bytes; want 200 and the document", code, len(doc))
	}
	var parsed struct {
		Paths      map[string]map[string]any `json:"paths"`
		Components struct {
			Schemas map[string]map[string]any `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal(doc, &parsed); err != nil {
		t.Fatalf("the document is not JSON: %v", err)
	}

	jobID, err := e.admin.SubmitID(e.ctx, []byte(`{"ranks": 1, "command": ["true"]}`))
	if err != nil {
		t.Fatal(err)
	}
	values := map[string]string{"id": jobID, "name": "nothing-by-this-name", "action": "cordon"}
	n := 0
	for path, methods := range parsed.Paths {
		for method := range methods {
			n++
			p := path
			for k, v := range values {
				p = strings.ReplaceAll(p, "{"+k+"}", v)
			}
			if strings.Contains(p, "{") {
				t.Errorf("%s %s: no value for its path parameter", method, path)
				continue
			}
			var body []byte
			if method == "post" {
				body = []byte("{}")
			}
			code, b := do(strings.ToUpper(method), p, e.adm.Token, body)
			t.Logf("%s %s: %d", strings.ToUpper(method), p, code)
			if code/100 == 2 {
				checkAnswerKeys(t, method+" "+path, methods[method], parsed.Components.Schemas, b)
			}
			switch {
			case code == http.StatusMethodNotAllowed,
				code == http.StatusNotFound && strings.Contains(string(b), "no such endpoint"),
				code == http.StatusForbidden && strings.Contains(string(b), "no access rule"):
				t.Errorf("%s %s (documented) answers %d %s", strings.ToUpper(method), p, code, b)
			}
		}
	}
	if n != len(openapi.Operations) {
		t.Errorf("the served document has %d operations; the table %d", n, len(openapi.Operations))
	}
}

// checkAnswerKeys: a JSON object answered by op has only keys its
// documented success schema has (one level deep), so that the document's
// schemas are those of what the server writes.
func checkAnswerKeys(t *testing.T, name string, op any, schemas map[string]map[string]any, body []byte) {
	t.Helper()
	var answer any
	if err := json.Unmarshal(body, &answer); err != nil {
		return // text (logs)
	}
	obj, ok := answer.(map[string]any)
	if !ok {
		return
	}
	var sch map[string]any
	for code, r := range op.(map[string]any)["responses"].(map[string]any) {
		if strings.HasPrefix(code, "2") {
			c, _ := r.(map[string]any)["content"].(map[string]any)
			j, _ := c["application/json"].(map[string]any)
			sch, _ = j["schema"].(map[string]any)
		}
	}
	if ref, ok := sch["$ref"].(string); ok {
		sch = schemas[strings.TrimPrefix(ref, "#/components/schemas/")]
	}
	props, ok := sch["properties"].(map[string]any)
	if !ok {
		return // documented as any object (the document itself)
	}
	for k := range obj {
		if _, ok := props[k]; !ok {
			t.Errorf("%s answers key %q, which its schema lacks", name, k)
		}
	}
}
