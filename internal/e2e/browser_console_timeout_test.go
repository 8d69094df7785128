package e2e

// Browser test of the console's API timeout (api in internal/console/static/console.js): a
// server that takes the request but never answers must not leave a page waiting for ever. The
// call is given up after AP.apiTimeoutMs and the page says so and tries again (keepLoading), as
// when the server cannot be reached at all; the follow stream, long-lived by design, is not cut.

import (
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// silentFront is an HTTP front of the server that, while silent is set, takes the agents list's
// requests and never answers them (until the browser gives up on one); everything else passes.
type silentFront struct {
	URL       string
	silent    atomic.Bool
	held      atomic.Int32 // agents requests taken and not answered
	abandoned atomic.Int32 // of those, the ones the browser gave up on
	follows   atomic.Int32 // follow streams opened
}

func newSilentFront(t *testing.T, target string) *silentFront {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(u)
	f := &silentFront{}
	quit := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("follow") == "1" {
			f.follows.Add(1)
		}
		if f.silent.Load() && strings.HasPrefix(r.URL.Path, "/v1/agents") {
			f.held.Add(1)
			select {
			case <-r.Context().Done():
				f.abandoned.Add(1)
			case <-quit:
			}
			return
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(quit) }) // runs first: Close waits for held requests
	f.URL = srv.URL
	return f
}

// TestBrowserConsoleRequestTimeout: the agents list, asked of a server that never answers,
// gives up after the (shortened) timeout, shows that it is trying again, and fills in once the
// server answers — without a reload, one request at a time. A session's follow stream outlives
// the timeout untouched.
func TestBrowserConsoleRequestTimeout(t *testing.T) {
	browser := newBrowser(t)
	s := startServer(t, "sqlite:"+t.TempDir()+"/a.db")
	s.register("fast", fastAgent(t).URL)
	sid, _ := chat(t, s, "alice", "alice-key", "fast", "", "hello")
	front := newSilentFront(t, s.URL)

	p := openConsole(t, browser, front.URL, adminKey, "/console/approvals")
	p.waitFor("the approvals page", `window.agentplaneConsole.page() === 'approvals' && !!document.querySelector('[data-testid="pending-none"]')`)
	const timeoutMs = 1500
	p.do("shorten the API timeout, watch the requests", chromedp.Evaluate[chromedp.Void](`window.AP.apiTimeoutMs = 1500`),
		chromedp.Evaluate[chromedp.Void](fetchLogJS))

	// 1. The server takes the agents list's request and never answers: the page gives up on it
	// after the timeout and says it is trying again.
	front.silent.Store(true)
	start := time.Now()
	p.do("open the agents", chromedp.Click(`#nav a[data-page="agents"]`))
	p.waitFor("the agents page says the server did not answer and it is trying again", `(function () {
		var n = document.querySelector('#view [data-testid="load-error"]');
		return window.agentplaneConsole.page() === 'agents' && !!n && !n.hidden && n.dataset.state === 'waiting'
			&& n.textContent.indexOf('the server did not answer within 2 s') >= 0 && /trying again in \d+ s/.test(n.textContent)
			&& !!n.querySelector('[data-testid="retry-now"]:not([hidden])'); })()`)
	if d := time.Since(start); d < timeoutMs*time.Millisecond {
		t.Fatalf("the page gave up after %v, before the %d ms timeout", d, timeoutMs)
	}
	deadline := time.Now().Add(browserWait)
	for front.abandoned.Load() < 1 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if front.abandoned.Load() < 1 {
		t.Fatalf("the browser never gave up on the held request (%d held)", front.held.Load())
	}

	// 2. The server answers again: the list fills in on the next try.
	front.silent.Store(false)
	p.waitFor("the agents, without a reload", `(function () { var s = window.agentplaneConsole.state();
		var n = document.querySelector('#view [data-testid="load-error"]');
		return s.rows === 1 && s.load === 'ok' && n.hidden
			&& !!document.querySelector('[data-testid="agents"] tr[data-agent-id="fast"]') && window.notReloaded === true; })()`)
	if l := evalIn[fetchLog](p, `window.fetchLog`); l.Max != 1 {
		t.Fatalf("the agents page had %d requests under way at once (%+v)", l.Max, l)
	}

	// 3. A session's follow stream stays open well past the API timeout.
	// (Routed to, not loaded: the shortened timeout stays set.)
	p.do("open the sessions", chromedp.Click(`#nav a[data-page="sessions"]`))
	p.waitFor("the sessions", `!!document.querySelector('[data-testid="sessions"] tr[data-session-id="`+sid+`"] a')`)
	p.do("open the session", chromedp.Click(`tr[data-session-id="`+sid+`"] a`))
	p.waitFor("the session followed live", `(function () { var s = window.agentplaneConsole.state();
		return s && s.live === 'live' && s.runs.length === 1 && s.runs[0].status === 'DONE'; })()`)
	opened := front.follows.Load()
	time.Sleep(3 * timeoutMs * time.Millisecond)
	if live := evalIn[string](p, `window.agentplaneConsole.state().live`); live != "live" || front.follows.Load() != opened || !evalIn[bool](p, `window.notReloaded === true && window.AP.apiTimeoutMs === 1500`) {
		t.Fatalf("after %d ms the session view is %q and opened %d follow streams: want the first still live", 3*timeoutMs, live, front.follows.Load()-opened+1)
	}
}
