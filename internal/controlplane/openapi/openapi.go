// Package openapi describes gangway's HTTP API (/v1, health) as an OpenAPI
// 3.0 document, which the server answers at GET /openapi.json. The
// operations are written here by hand, one table row each; the schemas of
// their bodies are derived from internal/api's types by their JSON form,
// so that a field added to a wire type is in the document without an
// edit here. The server's tests hold the table to the routes it serves.
//
// It imports api.
package openapi

import (
	"encoding/json"
	"reflect"
	"strconv"
	"strings"
	"sync"

	"github.com/gangway/gangway/internal/api"
)

// Operation is one route of the API: a method on a path pattern (as the
// server's mux and OpenAPI both spell it, "/v1/jobs/{id}").
type Operation struct {
	Method, Path string
	// Tag groups operations (jobs, nodes, ...).
	Tag         string
	Summary     string
	Description string
	// Params are the query parameters; path parameters are read from
	// Path.
	Params []Param
	// Body is the request body's type (nil: none); Spec says it is a
	// spec, sent as YAML or JSON; Optional that it may be left out.
	Body         reflect.Type
	Spec         bool
	BodyOptional bool
	// Status and Answer are the answer on success: its status code and
	// its body's type (nil: none described, e.g. a log stream).
	Status int
	Answer reflect.Type
	// Text names the content type of an answer that is not JSON.
	Text string
	// Public: no credentials needed.
	Public bool
	// Agent: only a node's agent calls it, with its certificate.
	Agent bool
}

// Param is one query parameter.
type Param struct {
	Name, Type, Description string
}

func typ[T any]() reflect.Type { return reflect.TypeFor[T]() }

// blocking are the parameters of a blocking query.
var blocking = []Param{
	{"index", "integer", "Makes the request a blocking query: the answer waits until what it shows changed after this store revision (the index of the previous answer) or wait passes. 0 or absent: answer at once."},
	{"wait", "string", "How long a blocking query waits at most, as a Go duration (default 30s, at most 5m)."},
}

// Operations is every route the document describes, in the order it
// lists them.
var Operations = []Operation{
	{Method: "GET", Path: "/healthz", Tag: "health", Summary: "Health of this replica, and whether it leads", Status: 200, Answer: typ[api.Health](), Public: true},
	{Method: "GET", Path: "/openapi.json", Tag: "health", Summary: "This document", Status: 200, Public: true},
	{Method: "GET", Path: "/v1/whoami", Tag: "tokens", Summary: "Who the credentials presented are", Status: 200, Answer: typ[api.Who]()},

	{Method: "POST", Path: "/v1/jobs", Tag: "jobs", Summary: "Submit a job (or a job array)", Description: "The body is a job spec in YAML or JSON, as `gangway submit` sends it. An Idempotency-Key header makes a retried submission answer the first one's job. An array spec (spec.array) answers an ArraySubmission instead of a Job.", Body: typ[api.JobSpec](), Spec: true, Status: 201, Answer: typ[api.Job]()},
	{Method: "GET", Path: "/v1/jobs", Tag: "jobs", Summary: "List jobs, oldest first (with all, newest first)", Params: append([]Param{
		{"live", "boolean", "Only jobs not finished."},
		{"all", "boolean", "Add the finished jobs retention moved to the job archive."},
		{"since", "string", "Only jobs not finished or finished since then: a duration ago (7d, 12h) or a time (RFC 3339 or a date)."},
		{"limit", "integer", "Only the newest this many jobs."},
		{"user", "string", "Only this user's jobs."},
		{"selector", "string", "Only jobs whose labels match: k=v, k!=v, k, !k, joined by commas."},
	}, blocking...), Status: 200, Answer: typ[api.JobList]()},
	{Method: "GET", Path: "/v1/jobs/{id}", Tag: "jobs", Summary: "A job's detail: attempts, ranks, checkpoints, progress", Description: "The X-Gangway-Index header of the answer is the index for a blocking query on the job.", Params: blocking, Status: 200, Answer: typ[api.JobDetail]()},
	{Method: "POST", Path: "/v1/jobs/{id}/cancel", Tag: "jobs", Summary: "Cancel a job (or, with array, every task of an array)", Params: []Param{{"array", "boolean", "Cancel the array the ID names; the answer is an ArrayCancel."}}, Status: 202, Answer: typ[api.Job]()},
	{Method: "GET", Path: "/v1/jobs/{id}/logs", Tag: "jobs", Summary: "One rank's log, as text", Params: []Param{
		{"rank", "integer", "The rank (default 0)."},
		{"attempt", "integer", "The attempt, from 1 (default: the newest)."},
		{"stream", "string", "stdout, stderr or both."},
		{"follow", "boolean", "Keep the answer open while the rank writes."},
		{"node", "boolean", "In per-node launches, the node launcher's whole log rather than the rank's lines."},
		{"tail", "integer", "Only the last this many lines of what is retained (then, with follow, everything after)."},
		{"timestamps", "boolean", "Put the time each line was written (RFC 3339, nanoseconds, UTC) and a space before it."},
		{"since", "string", "Only the lines written since then: how long ago (30s, 10m, 12h, 7d) or an RFC 3339 time."},
	}, Status: 200, Text: "text/plain"},
	{Method: "POST", Path: "/v1/jobs/{id}/hold", Tag: "jobs", Summary: "Hold a waiting job: nothing places it until it is released", Status: 200, Answer: typ[api.Job]()},
	{Method: "POST", Path: "/v1/jobs/{id}/release", Tag: "jobs", Summary: "Release a held job (or one submitted with spec.hold)", Status: 200, Answer: typ[api.Job]()},
	{Method: "POST", Path: "/v1/jobs/{id}/requeue", Tag: "jobs", Summary: "Requeue a running job: its ranks get the checkpoint signal, its attempt stops (cause requeued) and it waits again under its ID", Description: "As Slurm's scontrol requeue. A waiting job is refused (409), and so is a finished one: resubmit it.", Status: 202, Answer: typ[api.Job]()},
	{Method: "POST", Path: "/v1/jobs/{id}/signal", Tag: "jobs", Summary: "Send a signal to every rank of a running job, which runs on", Description: "As Slurm's scancel --signal. A job whose ranks are not all running yet is refused (409).", Params: []Param{{"signal", "string", "HUP, INT, USR1, USR2 or TERM, with or without SIG, any case, or their numbers 1, 2, 10, 12, 15."}}, Status: 202, Answer: typ[api.Job]()},
	{Method: "POST", Path: "/v1/jobs/{id}/priority", Tag: "jobs", Summary: "Set a pending job's priority", Params: []Param{{"priority", "integer", "The new priority."}}, Status: 200, Answer: typ[api.Job]()},

	{Method: "POST", Path: "/v1/deployments", Tag: "deployments", Summary: "Create or update a deployment (201 when created, 200 when updated)", Body: typ[api.DeploymentSpec](), Spec: true, Status: 201, Answer: typ[api.Deployment]()},
	{Method: "GET", Path: "/v1/deployments", Tag: "deployments", Summary: "List deployments", Params: blocking, Status: 200, Answer: typ[api.DeploymentList]()},
	{Method: "GET", Path: "/v1/deployments/{name}", Tag: "deployments", Summary: "One deployment", Status: 200, Answer: typ[api.Deployment]()},
	{Method: "POST", Path: "/v1/deployments/{name}/scale", Tag: "deployments", Summary: "Set a deployment's replicas", Params: []Param{{"replicas", "integer", "How many replicas."}}, Status: 200, Answer: typ[api.Deployment]()},
	{Method: "DELETE", Path: "/v1/deployments/{name}", Tag: "deployments", Summary: "Delete a deployment (its replicas stop first)", Status: 202, Answer: typ[api.Deployment]()},

	{Method: "GET", Path: "/v1/nodes", Tag: "nodes", Summary: "List nodes", Params: append([]Param{{"selector", "string", "Only nodes whose labels match: k=v, k!=v, k, !k, joined by commas."}}, blocking...), Status: 200, Answer: typ[api.NodeList]()},
	{Method: "GET", Path: "/v1/nodes/{name}", Tag: "nodes", Summary: "One node", Status: 200, Answer: typ[api.Node]()},
	{Method: "POST", Path: "/v1/nodes/{name}/{action}", Tag: "nodes", Summary: "cordon, uncordon, drain or revoke a node (admins)", Description: "drain takes an optional DrainRequest body; without one it moves the node's gangs at once.", Body: typ[api.DrainRequest](), BodyOptional: true, Status: 200, Answer: typ[api.Node]()},

	{Method: "POST", Path: "/v1/queues", Tag: "queues", Summary: "Create or replace a queue (admins)", Body: typ[api.QueueSpec](), Spec: true, Status: 200, Answer: typ[api.Queue]()},
	{Method: "GET", Path: "/v1/queues", Tag: "queues", Summary: "List queues with their use", Params: blocking, Status: 200, Answer: typ[api.QueueList]()},
	{Method: "DELETE", Path: "/v1/queues/{name}", Tag: "queues", Summary: "Delete a queue (admins)", Status: 200, Answer: typ[api.Deleted]()},

	{Method: "POST", Path: "/v1/tokens", Tag: "tokens", Summary: "Create a token (admins); its secret is shown once", Body: typ[api.TokenRequest](), Status: 201, Answer: typ[api.TokenCreated]()},
	{Method: "GET", Path: "/v1/tokens", Tag: "tokens", Summary: "List tokens, without secrets (admins)", Status: 200, Answer: typ[[]*api.Token]()},
	{Method: "DELETE", Path: "/v1/tokens/{id}", Tag: "tokens", Summary: "Revoke a token (admins)", Status: 200, Answer: typ[api.Token]()},
	{Method: "GET", Path: "/v1/audit", Tag: "tokens", Summary: "The newest mutating requests this replica served (admins)", Params: []Param{
		{"who", "string", "Only this caller's."},
		{"since", "string", "Only since this RFC 3339 time."},
		{"limit", "integer", "At most this many (default 100)."},
	}, Status: 200, Answer: typ[[]api.AuditRecord]()},

	{Method: "GET", Path: "/v1/reports/usage", Tag: "reports", Summary: "GPU-hours, goodput and lost work, by user, queue or job", Params: []Param{
		{"by", "string", "user, queue or job."},
		{"since", "string", "From then: a duration ago (7d) or a time."},
		{"user", "string", "Only this user's jobs."},
		{"archived", "boolean", "Add the jobs in the job archive."},
	}, Status: 200, Answer: typ[api.UsageReport]()},
	{Method: "GET", Path: "/v1/top/jobs", Tag: "reports", Summary: "Running jobs' GPU use from the nodes' latest readings", Params: []Param{{"user", "string", "Only this user's jobs."}}, Status: 200, Answer: typ[api.JobTopList]()},
	{Method: "GET", Path: "/v1/events", Tag: "reports", Summary: "What happened to jobs, nodes, deployments and queues, oldest first", Params: append([]Param{
		{"job", "string", "Only this job's events."},
		{"node", "string", "Only events of this node and of jobs on it."},
		{"deployment", "string", "Only this deployment's events."},
		{"queue", "string", "Only this queue's events."},
		{"kind", "string", "Only events of this kind of object: job, node, deployment or queue."},
		{"since", "string", "Only events since then: how long ago (30m, 12h, 7d), an RFC 3339 time or a date."},
		{"limit", "integer", "At most this many, the newest."},
	}, blocking...), Status: 200, Answer: typ[api.EventList]()},
	{Method: "GET", Path: "/v1/gateway/stats", Tag: "reports", Summary: "The inference gateway's counters, by model", Status: 200, Answer: typ[api.GatewayStats]()},

	{Method: "GET", Path: "/v1/simulate/traces", Tag: "simulate", Summary: "The traces a simulation may name (the server's --trace-dir) and the simulator's policies", Description: "501 on a server without a simulator.", Status: 200, Answer: typ[api.SimulateTraces]()},
	{Method: "POST", Path: "/v1/simulate", Tag: "simulate", Summary: "Replay a trace through the simulator: each policy's summary, JCT distribution and queue and GPU use over time (users and admins)",
		Description: "The body names a trace of the server's --trace-dir, or uploads one as traceData (at most 64 MiB; the formats `gangway simulate` reads), with the options of `gangway simulate`'s flags of the same names. It answers when every policy has run: one simulation runs at a time on a replica (429 while another does), for at most 10 minutes, and ends if the caller goes. 501 on a server without a simulator.",
		Body:        typ[api.SimulateRequest](), Status: 200, Answer: typ[api.SimulateResult]()},

	{Method: "POST", Path: "/v1/agent/join", Tag: "agent", Summary: "A new node trades a join token for its certificate", Body: typ[api.JoinRequest](), Status: 200, Answer: typ[api.JoinAnswer](), Public: true, Agent: true},
	{Method: "POST", Path: "/v1/agent/renew", Tag: "agent", Summary: "A node renews its certificate", Body: typ[api.JoinRequest](), Status: 200, Answer: typ[api.JoinAnswer](), Agent: true},
	{Method: "POST", Path: "/v1/agent/register", Tag: "agent", Summary: "A node's agent registers its hardware", Body: typ[api.RegisterRequest](), Status: 200, Answer: typ[api.RegisterResponse](), Agent: true},
	{Method: "POST", Path: "/v1/agent/heartbeat", Tag: "agent", Summary: "A node's agent reports its ranks and health", Body: typ[api.Heartbeat](), Status: 200, Answer: typ[api.HeartbeatResponse](), Agent: true},
	{Method: "GET", Path: "/v1/agent/assignments", Tag: "agent", Summary: "What a node should run", Params: append([]Param{{"node", "string", "The node (its certificate's)."}}, blocking...), Status: 200, Answer: typ[api.AssignmentList](), Agent: true},
}

const description = `gangway's API: jobs, deployments, nodes, queues, tokens, reports and the simulator.

Every route but /healthz, /openapi.json and /v1/agent/join needs credentials: a bearer token (gangway token create) or, for the agent routes, the node's client certificate. The server's certificate is signed by the cluster CA. Errors answer an ErrorBody: a message and, for bad input, the fields at fault. Every GET takes ?pretty for indented JSON. The agent routes are listed for completeness; only gangway's node agents call them.`

// Document is the OpenAPI document as JSON, built once.
var Document = sync.OnceValue(func() []byte {
	b, err := json.Marshal(Build())
	if err != nil {
		panic("openapi: " + err.Error()) // maps of strings and numbers: cannot fail
	}
	return b
})

// Build is the OpenAPI document as a tree of maps and slices.
func Build() map[string]any {
	s := newSchemas()
	errRef := s.of(typ[api.ErrorBody]())
	paths := map[string]any{}
	for _, op := range Operations {
		item, _ := paths[op.Path].(map[string]any)
		if item == nil {
			item = map[string]any{}
			paths[op.Path] = item
		}
		item[strings.ToLower(op.Method)] = operation(s, op, errRef)
	}
	return map[string]any{
		"openapi": "3.0.3",
		"info": map[string]any{
			"title":       "gangway",
			"version":     "v1",
			"description": description,
		},
		"servers":  []any{map[string]any{"url": "/"}},
		"security": []any{map[string]any{"bearer": []any{}}},
		"paths":    paths,
		"components": map[string]any{
			"schemas": s.components,
			"securitySchemes": map[string]any{
				"bearer": map[string]any{"type": "http", "scheme": "bearer", "description": "A gangway token (gangway token create)."},
			},
		},
	}
}

func operation(s *schemas, op Operation, errRef Schema) map[string]any {
	o := map[string]any{
		"operationId": operationID(op),
		"summary":     op.Summary,
		"tags":        []any{op.Tag},
	}
	if op.Description != "" {
		o["description"] = op.Description
	}
	if op.Public {
		o["security"] = []any{}
	}
	var params []any
	for _, name := range pathParams(op.Path) {
		params = append(params, map[string]any{"name": name, "in": "path", "required": true, "schema": Schema{"type": "string"}})
	}
	for _, p := range op.Params {
		params = append(params, map[string]any{"name": p.Name, "in": "query", "description": p.Description, "schema": Schema{"type": p.Type}})
	}
	if op.Method == "POST" && op.Path == "/v1/jobs" {
		params = append(params, map[string]any{"name": api.IdempotencyKeyHeader, "in": "header", "description": "Makes a retried submission answer the first one's job (at most 255 characters).", "schema": Schema{"type": "string"}})
	}
	if params != nil {
		o["parameters"] = params
	}
	if op.Body != nil {
		content := map[string]any{"application/json": map[string]any{"schema": s.of(op.Body)}}
		if op.Spec {
			content["application/yaml"] = map[string]any{"schema": s.of(op.Body)}
		}
		o["requestBody"] = map[string]any{"required": !op.BodyOptional, "content": content}
	}
	ok := map[string]any{"description": "Success."}
	switch {
	case op.Text != "":
		ok["content"] = map[string]any{op.Text: map[string]any{"schema": Schema{"type": "string"}}}
	case op.Answer != nil:
		ok["content"] = map[string]any{"application/json": map[string]any{"schema": s.of(op.Answer)}}
	case op.Path == "/openapi.json":
		ok["content"] = map[string]any{"application/json": map[string]any{"schema": Schema{"type": "object"}}}
	}
	errAnswer := map[string]any{
		"description": "An error: bad input (400, 422 with the fields at fault), no or bad credentials (401), not allowed (403), not found (404), a conflict (409), too many requests (429), or the store unavailable (503).",
		"content":     map[string]any{"application/json": map[string]any{"schema": errRef}},
	}
	o["responses"] = map[string]any{strconv.Itoa(op.Status): ok, "default": errAnswer}
	return o
}

// pathParams are the {names} of a path pattern, in order.
func pathParams(path string) []string {
	var out []string
	for _, seg := range strings.Split(path, "/") {
		if strings.HasPrefix(seg, "{") && strings.HasSuffix(seg, "}") {
			out = append(out, strings.TrimSuffix(seg[1:], "}"))
		}
	}
	return out
}

// operationID is a name for op: its method and the path's words
// ("getV1JobsId").
func operationID(op Operation) string {
	var b strings.Builder
	b.WriteString(strings.ToLower(op.Method))
	for _, w := range strings.FieldsFunc(op.Path, func(r rune) bool { return r == '/' || r == '{' || r == '}' || r == '.' }) {
		b.WriteString(strings.ToUpper(w[:1]) + w[1:])
	}
	return b.String()
}
