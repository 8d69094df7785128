package console_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/agentplane/agentplane/internal/console"
)

// get fetches path from srv and returns the response with its body read.
func get(t *testing.T, srv *httptest.Server, path string, header ...string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, srv.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	res, err := srv.Client().Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatalf("GET %s: read body: %v", path, err)
	}
	return res, string(body)
}

// newServer mounts the console the way the server does: one handler for "/" and "/static/".
func newServer(t *testing.T) *httptest.Server {
	t.Helper()
	mux := http.NewServeMux()
	h := console.Handler()
	mux.Handle("GET /", h)
	mux.Handle("GET /console", h)
	mux.Handle("GET /console/", h)
	mux.Handle("GET /static/", h)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

var assetURL = regexp.MustCompile(`/static/([a-z]+)\.([0-9a-f]{8})\.(js|css|svg)`)

// assetURLs returns the checksummed asset URLs in the index page, keyed by source file name.
func assetURLs(t *testing.T, index string) map[string]string {
	t.Helper()
	urls := map[string]string{}
	for _, m := range assetURL.FindAllStringSubmatch(index, -1) {
		urls[m[1]+"."+m[3]] = m[0]
	}
	return urls
}

func assertSecurityHeaders(t *testing.T, res *http.Response) {
	t.Helper()
	csp := res.Header.Get("Content-Security-Policy")
	for _, want := range []string{"default-src 'self'", "connect-src 'self' ws: wss:", "frame-ancestors 'none'"} {
		if !strings.Contains(csp, want) {
			t.Errorf("%s: Content-Security-Policy %q lacks %q", res.Request.URL.Path, csp, want)
		}
	}
	if strings.Contains(csp, "unsafe-inline") || strings.Contains(csp, "unsafe-eval") {
		t.Errorf("%s: Content-Security-Policy %q allows unsafe code", res.Request.URL.Path, csp)
	}
	if got := res.Header.Get("X-Content-Type-Options"); got != "nosniff" {
		t.Errorf("%s: X-Content-Type-Options = %q, want nosniff", res.Request.URL.Path, got)
	}
}

func TestIndex(t *testing.T) {
	srv := newServer(t)
	res, body := get(t, srv, "/")
	if res.StatusCode != http.StatusOK {
		t.Fatalf("GET / = %d", res.StatusCode)
	}
	if got := res.Header.Get("Content-Type"); got != "text/html; charset=utf-8" {
		t.Errorf("Content-Type = %q", got)
	}
	if got := res.Header.Get("Cache-Control"); got != "no-cache" {
		t.Errorf("Cache-Control = %q, want no-cache", got)
	}
	assertSecurityHeaders(t, res)

	urls := assetURLs(t, body)
	for _, name := range []string{"chat.js", "chatview.js", "app.js", "app.css", "favicon.svg"} {
		if urls[name] == "" {
			t.Errorf("index does not link %s by a checksummed URL", name)
		}
	}
	// The ids and classes browser tests and the lead's chromedp test rely on.
	for _, want := range []string{
		`id="message-input"`, `id="send-button"`, `id="cancel-button"`,
		`id="new-session-button"`, `id="connection-status"`, `id="messages"`,
		`<label for="message-input"`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("index lacks %s", want)
		}
	}

	// Revalidation: same page, same ETag → 304.
	etag := res.Header.Get("ETag")
	if etag == "" {
		t.Fatal("index has no ETag")
	}
	res, _ = get(t, srv, "/", "If-None-Match", etag)
	if res.StatusCode != http.StatusNotModified {
		t.Errorf("GET / with If-None-Match = %d, want 304", res.StatusCode)
	}
}

func TestIndexHead(t *testing.T) {
	srv := newServer(t)
	res, err := srv.Client().Head(srv.URL + "/")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK || res.Header.Get("Content-Type") != "text/html; charset=utf-8" {
		t.Errorf("HEAD / = %d %q", res.StatusCode, res.Header.Get("Content-Type"))
	}
}

func TestAssets(t *testing.T) {
	srv := newServer(t)
	_, index := get(t, srv, "/")
	urls := assetURLs(t, index)

	for name, ctype := range map[string]string{
		"app.js":      "text/javascript; charset=utf-8",
		"chat.js":     "text/javascript; charset=utf-8",
		"chatview.js": "text/javascript; charset=utf-8",
		"app.css":     "text/css; charset=utf-8",
		"favicon.svg": "image/svg+xml",
	} {
		t.Run(name, func(t *testing.T) {
			res, body := get(t, srv, urls[name])
			if res.StatusCode != http.StatusOK {
				t.Fatalf("GET %s = %d", urls[name], res.StatusCode)
			}
			if got := res.Header.Get("Content-Type"); got != ctype {
				t.Errorf("Content-Type = %q, want %q", got, ctype)
			}
			if got := res.Header.Get("Cache-Control"); got != "public, max-age=31536000, immutable" {
				t.Errorf("Cache-Control = %q", got)
			}
			assertSecurityHeaders(t, res)
			want, err := os.ReadFile("static/" + name)
			if err != nil {
				t.Fatal(err)
			}
			if body != string(want) {
				t.Errorf("served %s differs from static/%s", urls[name], name)
			}
		})
	}
}

func TestNotFound(t *testing.T) {
	srv := newServer(t)
	_, index := get(t, srv, "/")
	js := assetURLs(t, index)["app.js"]
	stale := assetURL.ReplaceAllString(js, "/static/$1.00000000.$3")
	if stale == js {
		t.Fatal("test needs a checksum other than the real one")
	}
	for _, path := range []string{
		"/static/app.js",                      // unhashed
		stale,                                 // an old checksum
		"/static/nope.1234abcd.js",            // no such asset
		"/static/",                            // the directory
		"/static/sub/" + js[len("/static/"):], // nested
		"/index.html",
		"/favicon.ico",
		"/nope",
	} {
		res, _ := get(t, srv, path)
		if res.StatusCode != http.StatusNotFound {
			t.Errorf("GET %s = %d, want 404", path, res.StatusCode)
		}
		assertSecurityHeaders(t, res)
	}
}

// TestNoExternalResources keeps the page self-contained: every src/href is one of our own
// checksummed assets, and no file names another origin.
func TestNoExternalResources(t *testing.T) {
	srv := newServer(t)
	_, index := get(t, srv, "/")
	for _, m := range regexp.MustCompile(`(?:src|href)="([^"]*)"`).FindAllStringSubmatch(index, -1) {
		if !assetURL.MatchString(m[1]) || !strings.HasPrefix(m[1], "/static/") {
			t.Errorf("index refers to %q, not a checksummed asset", m[1])
		}
	}
	_, shell := get(t, srv, "/console/sessions")
	for _, m := range regexp.MustCompile(`(?:src|href)="([^"]*)"`).FindAllStringSubmatch(shell, -1) {
		if !(assetURL.MatchString(m[1]) && strings.HasPrefix(m[1], "/static/")) && !strings.HasPrefix(m[1], "/console/") && m[1] != "/" {
			t.Errorf("the console refers to %q, not a checksummed asset or a console page", m[1])
		}
	}
	files := []string{"templates/index.html", "templates/console.html", "static/app.js", "static/chat.js", "static/chatview.js", "static/app.css", "static/favicon.svg"}
	for _, f := range consoleScripts {
		files = append(files, "static/"+f)
	}
	files = append(files, "static/console.css")
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		s := strings.ReplaceAll(string(b), `xmlns="http://www.w3.org/2000/svg"`, "")
		if i := regexp.MustCompile(`(?i)(https?:)?//[a-z0-9.-]+\.[a-z]{2,}/`).FindStringIndex(s); i != nil {
			t.Errorf("%s names another origin: %q", f, s[i[0]:i[1]])
		}
		if strings.Contains(s, "innerHTML") || strings.Contains(s, "insertAdjacentHTML") {
			t.Errorf("%s builds markup from strings; use textContent", f)
		}
	}
}

func TestHandlerTwice(t *testing.T) {
	// The server may call Handler once per route; both must serve the same URLs.
	a := httptest.NewServer(console.Handler())
	defer a.Close()
	b := httptest.NewServer(console.Handler())
	defer b.Close()
	_, ia := get(t, a, "/")
	_, ib := get(t, b, "/")
	if ia != ib {
		t.Error("two handlers render different pages")
	}
}

// consoleScripts are the operator console's scripts, in the order the shell loads them.
var consoleScripts = []string{"console.js", "timeline.js", "pages.js", "session.js", "replay.js", "boot.js"}

// TestConsoleShell: every console URL — deep links to a session, its replay, the inbox —
// answers the same shell page, so a reload lands on the view the URL names; the shell loads the
// chat page's protocol core and view and the console's scripts by checksummed URLs.
func TestConsoleShell(t *testing.T) {
	srv := newServer(t)
	_, first := get(t, srv, "/console")
	for _, path := range []string{"/console", "/console/", "/console/sessions", "/console/sessions/ses_123", "/console/sessions/ses_123/replay?speed=instant",
		"/console/approvals", "/console/agents", "/console/tools", "/console/mcp", "/console/usage", "/console/anything/else"} {
		res, body := get(t, srv, path)
		if res.StatusCode != http.StatusOK || res.Header.Get("Content-Type") != "text/html; charset=utf-8" || res.Header.Get("Cache-Control") != "no-cache" {
			t.Errorf("GET %s = %d %q %q", path, res.StatusCode, res.Header.Get("Content-Type"), res.Header.Get("Cache-Control"))
		}
		assertSecurityHeaders(t, res)
		if body != first {
			t.Errorf("GET %s is not the console shell", path)
		}
	}
	urls := assetURLs(t, first)
	for _, name := range append([]string{"chat.js", "chatview.js", "app.css", "console.css"}, consoleScripts...) {
		if urls[name] == "" {
			t.Errorf("the console shell does not load %s by a checksummed URL", name)
		}
	}
	// Scripts run in order: the chat core, its view and console.js before the pages that use them.
	order := regexp.MustCompile(`<script defer src="/static/([a-z]+)\.[0-9a-f]{8}\.js"`).FindAllStringSubmatch(first, -1)
	var got []string
	for _, m := range order {
		got = append(got, m[1]+".js")
	}
	if want := append([]string{"chat.js", "chatview.js"}, consoleScripts...); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("scripts load as %v, want %v", got, want)
	}
	for _, want := range []string{`id="login-form"`, `id="view"`, `id="nav"`} {
		if !strings.Contains(first, want) {
			t.Errorf("the console shell lacks %s", want)
		}
	}
	// The chat page is still at "/".
	if _, index := get(t, srv, "/"); !strings.Contains(index, `id="message-input"`) {
		t.Error("the chat page moved")
	}
}
