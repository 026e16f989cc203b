package audit

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"time"

	"github.com/gangway/gangway/internal/api"
)

// Entry is who made a request, as the layers inside Middleware learn it.
// Middleware puts one in each mutating request's context; Annotate fills
// it.
type Entry struct {
	Name string
	Kind string
	Role api.Role
}

type entryKey struct{}

// Annotate says who made the request whose context ctx is: the
// authentication layer, which runs inside Middleware, calls it once it
// knows. It does nothing for a context Middleware did not make (a GET,
// or no audit log). Call it from the request's goroutine.
func Annotate(ctx context.Context, name, kind string, role api.Role) {
	if e, ok := ctx.Value(entryKey{}).(*Entry); ok {
		*e = Entry{Name: name, Kind: kind, Role: role}
	}
}

// errorBodyBytes is how much of a failed request's body is kept to read
// its {"error": "..."} message.
const errorBodyBytes = 1024

// Middleware records in log every request to next whose method is not
// GET, HEAD or OPTIONS, once next has answered: its time, method, URL path
// (never the query or the body, which may hold secrets), remote address,
// status code and, for codes of 400 and more, the "error" of a small JSON
// body.
//
// Who made it comes from Annotate, called by a layer inside this one;
// when nothing annotated the request, from who (which may be nil), called
// after next returns with the request next saw. An unnamed caller is
// recorded with an empty Who. A handler that panics is recorded with code
// 500 and the panic goes on. A nil log records nothing: it returns next.
func Middleware(log *Log, who func(*http.Request) (name, kind string, role api.Role), next http.Handler) http.Handler {
	if log == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.Method {
		case http.MethodGet, http.MethodHead, http.MethodOptions:
			next.ServeHTTP(w, r)
			return
		}
		start := time.Now()
		e := &Entry{}
		r = r.WithContext(context.WithValue(r.Context(), entryKey{}, e))
		rw := &recorder{ResponseWriter: w}
		completed := false
		defer func() {
			code := rw.code
			if !completed || code == 0 {
				// A panic, or a handler that wrote nothing (net/http then
				// answers 200, or drops the connection after a panic).
				code = http.StatusOK
				if !completed {
					code = http.StatusInternalServerError
				}
			}
			if e.Name == "" && who != nil {
				name, kind, role := who(r)
				*e = Entry{Name: name, Kind: kind, Role: role}
			}
			rec := api.AuditRecord{
				Time: start, Who: e.Name, Kind: e.Kind, Role: e.Role,
				Method: r.Method, Path: r.URL.Path, Remote: r.RemoteAddr, Code: code,
			}
			if code >= 400 {
				rec.Error = errorOf(rw.body, code)
			}
			log.Append(rec)
		}()
		next.ServeHTTP(rw, r)
		completed = true
	})
}

// errorOf is the "error" of a JSON error body, or the status text when
// the body is not one (or was longer than errorBodyBytes).
func errorOf(body []byte, code int) string {
	var b struct {
		Error string `json:"error"`
	}
	if json.Unmarshal(body, &b) == nil && b.Error != "" { // a cut body fails
		return b.Error
	}
	return http.StatusText(code)
}

// recorder keeps a response's status code and, for failures, the start of
// its body. It passes Flush through (the server streams logs and answers
// long polls) and unwraps for http.ResponseController.
type recorder struct {
	http.ResponseWriter
	code int
	body []byte
}

var (
	_ http.Flusher  = (*recorder)(nil)
	_ http.Hijacker = (*recorder)(nil)
)

func (rw *recorder) WriteHeader(code int) {
	if rw.code == 0 && code >= 200 { // 1xx are not the answer
		rw.code = code
	}
	rw.ResponseWriter.WriteHeader(code)
}

func (rw *recorder) Write(b []byte) (int, error) {
	if rw.code == 0 {
		rw.code = http.StatusOK
	}
	if rw.code >= 400 && len(rw.body) < errorBodyBytes {
		rw.body = append(rw.body, b[:min(len(b), errorBodyBytes-len(rw.body))]...)
	}
	return rw.ResponseWriter.Write(b)
}

// Flush flushes the response if the writer underneath can.
func (rw *recorder) Flush() {
	if rw.code == 0 {
		rw.code = http.StatusOK
	}
	if f, ok := rw.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Hijack hands over the connection if the writer underneath can; the
// request is then recorded as 101 Switching Protocols.
func (rw *recorder) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	h, ok := rw.ResponseWriter.(http.Hijacker)
	if !ok {
		return nil, nil, errors.New("audit: the response writer cannot hijack")
	}
	if rw.code == 0 {
		rw.code = http.StatusSwitchingProtocols
	}
	return h.Hijack()
}

// Unwrap serves http.ResponseController.
func (rw *recorder) Unwrap() http.ResponseWriter { return rw.ResponseWriter }
