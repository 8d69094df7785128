package e2e

// Browser test of the replay page (internal/console/static/replay.js) while the server cannot be
// reached: a replay opened then, and a prefetch refused while it plays, say so, try again on
// keepLoading's backoff (1 s doubling to 15 s, at once on the window's focus) with one request
// for a page at a time, and carry on once the server answers — without a reload. (A failure was
// final: the replay showed an error until reloaded.)

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// eventsInflightJS counts how many requests for a page of a log are ever under way at once.
const eventsInflightJS = `(function () {
	var f = window.fetch;
	var log = window.pageLog = { inflight: 0, max: 0 };
	window.fetch = function (url) {
		var u = String(url);
		if (u.indexOf('/events?') < 0 || u.indexOf('follow=1') >= 0) return f.apply(this, arguments);
		log.inflight++;
		log.max = Math.max(log.max, log.inflight);
		var p = f.apply(this, arguments);
		var done = function () { log.inflight--; };
		p.then(done, done);
		return p;
	};
})()`

func TestBrowserConsoleReplayRecovers(t *testing.T) {
	browser := newBrowser(t)
	s := startServer(t, "sqlite:"+t.TempDir()+"/a.db", "--addr", freeAddr(t))
	s.register("stream", deltaAgent(t, 1500).URL)
	sid, _ := chat(t, s, "alice", "alice-key", "stream", "", "go")
	all := s.events("/v1/sessions/" + sid + "/events?limit=10000")
	last := seqOf(all[len(all)-1])
	if last <= 1000 {
		t.Fatalf("the session has %d events: want more than a page", last)
	}
	gate := newPageGate(t, s.URL)
	p := openConsole(t, browser, gate.URL, adminKey, "/console/sessions")
	p.waitFor("the sessions page", `window.agentplaneConsole.page() === 'sessions' && window.agentplaneConsole.state().rows === 1`)
	p.do("watch the page's requests", chromedp.Evaluate[chromedp.Void](fetchLogJS+`; `+eventsInflightJS))
	const noteJS = `document.querySelector('.replay-page [data-testid="load-error"]:not([hidden])')`

	// 1. Opened while the server is down: the summary and the first page are tried again.
	s.stop()
	p.do("open the replay", chromedp.Evaluate[chromedp.Void](`AP.navigate('/console/sessions/`+sid+`/replay?speed=instant')`))
	p.waitFor("the replay says it cannot load the log and is trying again", `(function () { var s = window.agentplaneConsole.state(); var n = `+noteJS+`;
		return window.agentplaneConsole.page() === 'replay' && s.error === '' && !!n && n.dataset.state === 'waiting'
			&& n.textContent.indexOf('Could not load the log') >= 0 && /trying again in \d+ s/.test(n.textContent); })()`)
	p.waitFor("a few tries", `window.fetchLog.backoffs.indexOf(2000) >= 0`)
	s.restart()
	p.waitFor("the first page and the summary, without a reload", fmt.Sprintf(`(function () { var s = window.agentplaneConsole.state();
		return s.error === '' && s.lastSeq === %d && s.buffered === 1000 && !s.fetching && !%s && window.notReloaded === true; })()`, last, noteJS))

	// 2. Playing, the prefetch of the next page is refused: the replay waits for it, saying so,
	// and asks again on the backoff; the window's focus brings it at once once the server answers.
	gate.setRefuse(true)
	before := len(gate.requests())
	p.do("play", chromedp.Click(`[data-testid="play"]`))
	p.waitFor("the replay waits for the refused page", `(function () { var s = window.agentplaneConsole.state(); var n = `+noteJS+`;
		return s.pos === 1000 && s.playing && s.error === '' && !!n && n.dataset.state === 'waiting' && n.textContent.indexOf('Could not load the log') >= 0; })()`)
	time.Sleep(2500 * time.Millisecond)
	got := gate.requests()[before:]
	if len(got) < 2 || len(got) > 3 || strings.Count(strings.Join(got, ",")+",", "1000,") != len(got) {
		t.Fatalf("the refused page was asked for as %v in 2.5 s: want the page after seq 1000, a try and a retry or two", got)
	}
	gate.setRefuse(false)
	p.do("the window gets the focus back", chromedp.Evaluate[chromedp.Void](`window.dispatchEvent(new Event('focus'))`))
	p.waitFor("the replay plays to the end", fmt.Sprintf(`(function () { var s = window.agentplaneConsole.state();
		return s.finished && s.pos === %d && s.applied === %d && s.timeline.events === %d && s.error === '' && !%s; })()`, last, last, last, noteJS))
	if max := evalIn[int](p, `window.pageLog.max`); max != 1 {
		t.Fatalf("%d requests for a page of the log were under way at once", max)
	}
	if text := evalIn[string](p, `document.getElementById('view').textContent`); strings.Contains(text, "TypeError") {
		t.Fatalf("the page reads %q", text)
	}
}
