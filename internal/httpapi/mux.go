package httpapi

import (
	"net/http"

	"github.com/agentplane/agentplane/internal/respond"
)

// Handler serves mux, answering the requests no route takes with the JSON
// error envelope (DESIGN §2.7) instead of ServeMux's plain text: 404
// not_found, and 405 method_not_allowed with the Allow header. Matched
// requests go to mux untouched, so streaming handlers keep the server's
// ResponseWriter (Flush, Hijack, deadlines).
func Handler(mux *http.ServeMux) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
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
			w.Header().Set("Allow", allow)
			respond.Err(w, r, respond.E(http.StatusMethodNotAllowed, "method_not_allowed", r.Method+" is not allowed on "+path+"; allowed: "+allow))
		default:
			for k, v := range rec.header {
				w.Header()[k] = v
			}
			w.WriteHeader(rec.status)
			w.Write(rec.body)
		}
	})
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
