package httpapi

import (
	"net/http"
	"slices"
	"strings"

	"github.com/agentplane/agentplane/internal/respond"
)

// Handler serves mux, answering the requests no route takes with the JSON
// error envelope (DESIGN §2.7) instead of ServeMux's plain text: 404
// not_found, and 405 method_not_allowed with the Allow header. Matched
// requests go to mux untouched, so streaming handlers keep the server's
// ResponseWriter (Flush, Hijack, deadlines).
func Handler(mux *http.ServeMux) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if allow, ok := verbMismatch(mux, r); ok {
			methodNotAllowed(w, r, allow)
			return
		}
		if _, pattern := mux.Handler(r); pattern != "" {
			mux.ServeHTTP(w, r)
			return
		}
		// No pattern: ServeMux would answer 404 or 405 in plain text, or
		// redirect to a cleaned path. Let it decide, then reword.
		rec := &unrouted{header: http.Header{}}
		mux.ServeHTTP(rec, r)
		path := r.URL.Path
		if len(path) > 200 {
			path = path[:200] + "…"
		}
		switch rec.status {
		case http.StatusNotFound:
			respond.Err(w, r, respond.E(http.StatusNotFound, "not_found", "no route for "+r.Method+" "+path+"; the routes are listed in docs/API.md"))
		case http.StatusMethodNotAllowed:
			allow := rec.header.Get("Allow")
			if _, segment, ok := verbRoute(mux, r); ok && !strings.Contains(segment, ":") {
				allow = idMethods(mux, r) // not the verb route's POST
			}
			methodNotAllowed(w, r, allow)
		default:
			for k, v := range rec.header {
				w.Header()[k] = v
			}
			w.WriteHeader(rec.status)
			w.Write(rec.body)
		}
	})
}

func methodNotAllowed(w http.ResponseWriter, r *http.Request, allow string) {
	path := r.URL.Path
	if len(path) > 200 {
		path = path[:200] + "…"
	}
	w.Header().Set("Allow", allow)
	respond.Err(w, r, respond.E(http.StatusMethodNotAllowed, "method_not_allowed", r.Method+" is not allowed on "+path+"; allowed: "+allow))
}

// verbRoutes are the POST routes whose last segment is "{id}:{verb}", and
// their verbs (DESIGN §6). ServeMux's wildcards match "a1:heartbeat" as an
// id too, so without this a GET of a verb reached the GET handler as an
// unknown id (404), and a plain id path listed POST among its methods.
var verbRoutes = map[string][]string{
	"POST /v1/agents/{verb}":     {"heartbeat", "invoke"},
	"POST /v1/runs/{verb}":       {"cancel"},
	"POST /v1/tools/{verb}":      {"invoke"},
	"POST /v1/tool_calls/{verb}": {"wait", "cancel"},
	"POST /v1/approvals/{verb}":  {"decide"},
}

// verbMismatch tells a request whose path belongs to a verb route but whose
// method does not: another method on "{id}:{verb}" (it takes POST only), or
// POST on a plain "{id}" (it takes the methods of the id's other routes). It
// returns the Allow header's value then. A segment with an unknown verb is
// left to the route (which names the operations it knows).
func verbMismatch(mux *http.ServeMux, r *http.Request) (string, bool) {
	known, segment, ok := verbRoute(mux, r)
	if !ok {
		return "", false
	}
	_, verb, hasVerb := splitVerb(segment)
	switch {
	case hasVerb && slices.Contains(known, verb) && r.Method != http.MethodPost:
		return http.MethodPost, true
	case !strings.Contains(segment, ":") && r.Method == http.MethodPost:
		return idMethods(mux, r), true
	}
	return "", false
}

// verbRoute finds the verb route r's path would take by POST: its verbs
// and the path's last segment.
func verbRoute(mux *http.ServeMux, r *http.Request) ([]string, string, bool) {
	if !hasVerbPrefix(r.URL.Path) {
		return nil, "", false // most requests (the LLM proxy's): no second route lookup
	}
	post := *r
	post.Method = http.MethodPost
	_, pattern := mux.Handler(&post)
	known, ok := verbRoutes[pattern]
	return known, r.URL.Path[strings.LastIndexByte(r.URL.Path, '/')+1:], ok
}

// verbPrefixes are verbRoutes' paths without their last segment
// ("/v1/agents/").
var verbPrefixes = func() []string {
	var out []string
	for pattern := range verbRoutes {
		path := strings.TrimPrefix(pattern, http.MethodPost+" ")
		out = append(out, path[:strings.LastIndexByte(path, '/')+1])
	}
	return out
}()

// hasVerbPrefix: path is under one of verbRoutes' prefixes.
func hasVerbPrefix(path string) bool {
	for _, p := range verbPrefixes {
		if strings.HasPrefix(path, p) {
			return true
		}
	}
	return false
}

// idMethods lists the methods routed for r's path other than a verb
// route's POST, as ServeMux spells an Allow header.
func idMethods(mux *http.ServeMux, r *http.Request) string {
	var allow []string
	for _, m := range []string{http.MethodDelete, http.MethodGet, http.MethodHead, http.MethodPatch, http.MethodPost, http.MethodPut} {
		other := *r
		other.Method = m
		if _, pattern := mux.Handler(&other); pattern != "" {
			if _, verb := verbRoutes[pattern]; !verb {
				allow = append(allow, m)
			}
		}
	}
	return strings.Join(allow, ", ")
}

// unrouted records ServeMux's own small answer to an unmatched request.
type unrouted struct {
	header http.Header
	status int
	body   []byte
}

func (u *unrouted) Header() http.Header { return u.header }

func (u *unrouted) WriteHeader(status int) {
	if u.status == 0 {
		u.status = status
	}
}

func (u *unrouted) Write(b []byte) (int, error) {
	if u.status == 0 {
		u.status = http.StatusOK
	}
	u.body = append(u.body, b...)
	return len(b), nil
}
