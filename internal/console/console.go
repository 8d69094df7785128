// Package console is agentplane's embedded web UI: the chat page a newcomer opens after
// `agentplane serve --demo` (at "/", speaking the ingress WebSocket protocol of DESIGN.md §4), and
// the operator console (at "/console/…", DESIGN.md §14: sessions, the run-tree timeline, replay,
// approvals, agents, tools, MCP servers, usage), which reads only the public HTTP API.
// Everything it serves is compiled into the binary; nothing is fetched from anywhere else at run
// time, and there is no build step.
package console

import (
	"bytes"
	"net/http"
	"sync"
	"time"
)

// contentSecurityPolicy allows the page its own scripts, styles and images and a WebSocket back
// to the server, and nothing else: no inline script, no third-party origin, no framing. ws: and
// wss: are listed besides 'self' because older browsers do not let 'self' cover WebSockets.
const contentSecurityPolicy = "default-src 'self'; script-src 'self'; style-src 'self'; " +
	"img-src 'self'; connect-src 'self' ws: wss:; object-src 'none'; base-uri 'none'; " +
	"form-action 'self'; frame-ancestors 'none'"

// loadSite prepares the embedded files once per process, however many times Handler is called.
var loadSite = sync.OnceValues(newSite)

// Handler returns the console: the chat page at "/", the operator console's shell at "/console"
// and every path under "/console/" (its scripts route by the URL, so a deep link survives a
// reload), and the assets at "/static/<name>.<sum>.<ext>". It routes all of them itself, so the
// caller can mount it for "GET /", "GET /console", "GET /console/" and "GET /static/" alike;
// any other path it is given answers 404. Assets are served with year-long immutable caching because
// their URLs change with their content; the page itself is revalidated on every load.
//
// Handler panics if the embedded files are broken (a build defect the package tests catch).
func Handler() http.Handler {
	s, err := loadSite()
	if err != nil {
		panic(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", s.serveIndex)
	mux.HandleFunc("GET /console", s.serveConsole)
	mux.HandleFunc("GET /console/", s.serveConsole)
	mux.HandleFunc("GET /static/{name}", s.serveAsset)
	return securityHeaders(mux)
}

func (s *site) serveIndex(w http.ResponseWriter, r *http.Request) {
	servePage(w, r, s.index, s.indexETag)
}

// serveConsole answers every console URL with the same shell; console.js renders the view the
// path names.
func (s *site) serveConsole(w http.ResponseWriter, r *http.Request) {
	servePage(w, r, s.console, s.consoleETag)
}

func servePage(w http.ResponseWriter, r *http.Request, page []byte, etag string) {
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Cache-Control", "no-cache")
	h.Set("ETag", etag)
	http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(page))
}

func (s *site) serveAsset(w http.ResponseWriter, r *http.Request) {
	a, ok := s.assets[r.PathValue("name")]
	if !ok {
		// An old checksum is a 404 too: serving today's bytes under yesterday's immutable URL
		// would let a cache pin the wrong version for a year.
		http.NotFound(w, r)
		return
	}
	h := w.Header()
	h.Set("Content-Type", a.contentType)
	h.Set("Cache-Control", "public, max-age=31536000, immutable")
	h.Set("ETag", a.etag)
	http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(a.data))
}

// securityHeaders sets the headers every console response carries, errors included.
func securityHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", contentSecurityPolicy)
		h.Set("X-Content-Type-Options", "nosniff")
		// The page's URL fragment may hold an API key; fragments are never sent as a referrer,
		// but nothing here needs one either.
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("X-Frame-Options", "DENY")
		next.ServeHTTP(w, r)
	})
}
