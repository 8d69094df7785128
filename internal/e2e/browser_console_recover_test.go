package e2e

// Browser test of the console's pages while the server restarts (internal/console/static:
// keepLoading in console.js, used by pages.js and session.js): a page that cannot reach the
// server says so, says it is trying again, tries again with a backoff (1 s doubling to 15 s) and
// at once when the window gets the focus back, one request at a time, and shows the data as soon
// as the server is back — without a reload. (The session view's live stream already resumed by
// itself, TestBrowserConsoleLiveRun; what the view reads before the stream starts did not.)

import (
	"fmt"
	"net"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
)

// freeAddr is a loopback address no one listens on just now, for a server that must come back
// on the same address.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// fetchLogJS wraps the page's fetch to count the console's API calls (not the follow stream) and
// how many were ever under way at once, and watches the load-error notes for the backoffs they
// announce. Set once: the console routes between its pages without reloading.
const fetchLogJS = `(function () {
	var f = window.fetch;
	var log = window.fetchLog = { inflight: 0, max: 0, count: 0, backoffs: [] };
	window.fetch = function (url) {
		var u = String(url);
		if (u.indexOf('/v1/') !== 0 || u.indexOf('follow=1') >= 0) return f.apply(this, arguments);
		log.count++;
		log.inflight++;
		log.max = Math.max(log.max, log.inflight);
		var p = f.apply(this, arguments);
		var done = function () { log.inflight--; };
		p.then(done, done);
		return p;
	};
	new MutationObserver(function (list) {
		list.forEach(function (m) { if (m.target.dataset.retryMs) log.backoffs.push(Number(m.target.dataset.retryMs)); });
	}).observe(document.getElementById('view'), { subtree: true, attributes: true, attributeFilter: ['data-retry-ms'] });
	window.notReloaded = true;
})()`

type fetchLog struct {
	Inflight int   `json:"inflight"`
	Max      int   `json:"max"`
	Count    int   `json:"count"`
	Backoffs []int `json:"backoffs"`
}

// TestBrowserConsolePagesRecoverWhenTheServerComesBack: the agents list, the sessions list and
// a session's view, each opened while the server is down, show that they cannot reach it and
// are trying again, then fill in by themselves once the server (SQLite file, same address) is
// back: on the backoff's timer, and at once on the window's focus. Never more than one request
// of a list at a time; the backoff doubles from 1 s to 15 s.
func TestBrowserConsolePagesRecoverWhenTheServerComesBack(t *testing.T) {
	browser := newBrowser(t)
	s := startServer(t, "sqlite:"+t.TempDir()+"/a.db", "--addr", freeAddr(t))
	s.register("fast", fastAgent(t).URL)
	sid, _ := chat(t, s, "alice", "alice-key", "fast", "", "hello")
	all := s.events("/v1/sessions/" + sid + "/events")
	last := seqOf(all[len(all)-1])

	p := openConsole(t, browser, s.URL, adminKey, "/console/approvals")
	p.waitFor("the approvals page", `window.agentplaneConsole.page() === 'approvals' && !!document.querySelector('[data-testid="pending-none"]')`)
	p.do("watch the page's requests", chromedp.Evaluate[chromedp.Void](fetchLogJS))
	readLog := func() fetchLog { t.Helper(); return evalIn[fetchLog](p, `window.fetchLog`) }
	resetLog := func() {
		t.Helper()
		p.do("reset the request log", chromedp.Evaluate[chromedp.Void](`window.fetchLog.max = window.fetchLog.inflight; window.fetchLog.count = 0; window.fetchLog.backoffs = []`))
	}
	const noteJS = `document.querySelector('#view [data-testid="load-error"]')`
	waitRetrying := func(what string) {
		t.Helper()
		p.waitFor(what+" says it cannot reach the server and is trying again", `(function () { var n = `+noteJS+`;
			return !!n && !n.hidden && n.dataset.state === 'waiting' && n.textContent.indexOf('the server cannot be reached') >= 0
				&& /trying again in \d+ s/.test(n.textContent) && !!n.querySelector('[data-testid="retry-now"]:not([hidden])'); })()`)
	}

	// 1. The agents list, opened while the server is down, fills in on a retry of its own.
	s.stop()
	resetLog()
	p.do("open the agents", chromedp.Click(`#nav a[data-page="agents"]`))
	waitRetrying("the agents page")
	p.waitFor("a few tries", `window.fetchLog.backoffs.indexOf(4000) >= 0`)
	s.restart()
	p.waitFor("the agents, without a reload", `(function () { var s = window.agentplaneConsole.state(); var n = `+noteJS+`;
		return window.agentplaneConsole.page() === 'agents' && s.rows === 1 && s.load === 'ok' && n.hidden
			&& !!document.querySelector('[data-testid="agents"] tr[data-agent-id="fast"]') && window.notReloaded === true; })()`)
	if l := readLog(); l.Max != 1 || l.Count < 3 || l.Count > 6 {
		t.Fatalf("the agents page asked %d times, up to %d at once: want a few tries, one at a time (%+v)", l.Count, l.Max, l)
	}

	// 2. The sessions list: the backoff grows to its cap; the server back, the window's focus
	// brings the list at once, long before the next try was due.
	s.stop()
	resetLog()
	p.do("open the sessions", chromedp.Click(`#nav a[data-page="sessions"]`))
	waitRetrying("the sessions page")
	p.waitFor("the backoff at its cap", `window.fetchLog.backoffs.indexOf(15000) >= 0`)
	if l := readLog(); fmt.Sprint(l.Backoffs) != "[1000 2000 4000 8000 15000]" || l.Max != 1 {
		t.Fatalf("the sessions page backed off %v, up to %d requests at once: want 1, 2, 4, 8 then 15 s, one at a time", l.Backoffs, l.Max)
	}
	s.restart()
	due := evalIn[float64](p, noteJS+`.dataset.retryAt - Date.now()`)
	if due < 5000 {
		t.Fatalf("the next try is due in %v ms: too soon to tell the focus from the timer", due)
	}
	p.do("the window gets the focus back", chromedp.Evaluate[chromedp.Void](`window.dispatchEvent(new Event('focus'))`))
	p.waitFor("the sessions at once, without a reload", `(function () { var s = window.agentplaneConsole.state(); var n = `+noteJS+`;
		return window.agentplaneConsole.page() === 'sessions' && s.rows === 1 && s.load === 'ok' && n.hidden
			&& !!document.querySelector('[data-testid="sessions"] tr[data-session-id="`+sid+`"]') && window.notReloaded === true; })()`)
	if left := evalIn[float64](p, noteJS+`.dataset.retryAt - Date.now()`); left <= 0 {
		t.Fatalf("the list came with the timer's try (%v ms late), not on the focus", -left)
	}
	if l := readLog(); l.Max != 1 {
		t.Fatalf("the sessions page had %d requests under way at once", l.Max)
	}

	// 3. A session's view opened while the server is down: the log's first page is tried again,
	// then the view follows live as ever.
	s.stop()
	p.do("open the session", chromedp.Click(`tr[data-session-id="`+sid+`"] a`))
	p.waitFor("the session view is trying again", `(function () { var s = window.agentplaneConsole.state(); var n = `+noteJS+`;
		return window.agentplaneConsole.page() === 'session' && s.live === 'retrying' && s.error === '' && !!n && !n.hidden
			&& n.textContent.indexOf('Could not load the session') >= 0 && n.textContent.indexOf('trying again') >= 0; })()`)
	s.restart()
	p.waitFor("the session view follows live, without a reload", fmt.Sprintf(`(function () { var s = window.agentplaneConsole.state(); var n = `+noteJS+`;
		return s.live === 'live' && s.error === '' && s.lastSeq === %d && s.events === %d && s.runs.length === 1 && s.runs[0].status === 'DONE'
			&& !!s.summary && s.summary.events === %d && (!n || n.hidden) && window.notReloaded === true; })()`, last, last, last))
	if got := evalIn[string](p, `document.getElementById('view').textContent`); strings.Contains(got, "TypeError") || strings.Contains(got, "Failed to fetch") {
		t.Fatalf("the page reads %q", got)
	}
}
