package e2e

// Browser test of the console in the browser's back/forward cache (the console audit's item 1):
// a page left by a full load (a pasted URL, a bookmark, the "Chat" link, Back and Forward) may be
// kept whole in that cache, and a follow stream it left open there held one of the browser's six
// connections to the server; after six such loads the console stopped loading for a minute.

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// gauge reads the server's gauge name from /metrics.
func gauge(t *testing.T, s *server, name string) float64 {
	t.Helper()
	mf := scrapeMetrics(t, s)[name]
	if mf == nil || len(mf.GetMetric()) != 1 {
		t.Fatalf("no %s gauge: %v", name, mf)
	}
	return mf.GetMetric()[0].GetGauge().GetValue()
}

// waitGauge waits until the server's gauge name is n: a stream or socket the page closed ends
// on the server once it sees the connection go.
func waitGauge(t *testing.T, s *server, name string, n float64, when string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := gauge(t, s, name)
		if got == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: the server's %s is %v, want %v", when, name, got, n)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitStreams waits until the server has exactly n open follow streams.
func waitStreams(t *testing.T, s *server, n float64, when string) {
	t.Helper()
	waitGauge(t, s, "agentplane_event_streams", n, when)
}

// waitAcrossNavigation polls the JavaScript predicate expr until it is truthy, riding out the
// errors of a document being replaced. (chromedp's NavigateBack waits for a load event, which a
// page restored from the back/forward cache never fires, and its Poll keeps to the execution
// context it knew before the restore: history.back() and this instead.)
func (p *chatPage) waitAcrossNavigation(what, expr string) {
	p.t.Helper()
	deadline := time.Now().Add(browserWait)
	for {
		ctx, cancel := context.WithTimeout(p.ctx, 2*time.Second)
		ok, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`!!(`+expr+`)`))
		cancel()
		if err == nil && ok {
			return
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("waiting until %s (%s): %v\n%s", what, expr, err, p.describe())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestBrowserConsoleFullLoadsLeaveNoStreams loads nine session pages one after another in one
// tab, each by a full page load: every one loads at once and follows live, and the server never
// holds more than the one stream of the page in view. Back brings the previous page out of the
// cache, following live again from where it was; the approvals page (polling) and the chat page
// in between change nothing.
func TestBrowserConsoleFullLoadsLeaveNoStreams(t *testing.T) {
	browser := newBrowser(t)
	s := startServer(t, "sqlite:"+t.TempDir()+"/a.db")
	goAgent(t, s, "echo")
	const n = 9 // more than the browser's six connections per host
	sids := make([]string, n)
	for i := range sids {
		sids[i], _ = chat(t, s, "alice", "alice-key", "echo", "", fmt.Sprintf("session %d", i))
	}
	p := openConsole(t, browser, s.URL, adminKey, "/console/sessions")

	open := func(i int) {
		t.Helper()
		start := time.Now()
		p.do(fmt.Sprintf("load session page %d", i+1), chromedp.Navigate(s.URL+"/console/sessions/"+sids[i]))
		p.waitFor(fmt.Sprintf("session page %d follows live", i+1), `(function () { var s = window.agentplaneConsole.state();
			return s && s.sessionId === '`+sids[i]+`' && s.live === 'live' && s.runs.length === 1; })()`)
		if d := time.Since(start); d > 5*time.Second {
			t.Fatalf("session page %d took %v to load and follow", i+1, d)
		}
		// Marks this document: a page restored from the cache still has it, a reloaded one not.
		p.do("mark the page", chromedp.Evaluate[chromedp.Void](`window.bfcacheMark = '`+sids[i]+`'`))
		waitStreams(t, s, 1, fmt.Sprintf("on session page %d", i+1))
	}
	for i := range n {
		open(i)
		if i == n/2 {
			// A polling page between them.
			p.do("load the approvals page", chromedp.Navigate(s.URL+"/console/approvals"))
			p.waitFor("the approvals page", `window.agentplaneConsole.page() === 'approvals' && !!document.querySelector('[data-testid="pending-none"]')`)
			waitStreams(t, s, 0, "on the approvals page")
		}
	}

	// Back: the previous session page, out of the cache if the browser kept it, follows again.
	p.do("go back", chromedp.Evaluate[chromedp.Void](`history.back()`))
	prev := sids[n-2]
	p.waitAcrossNavigation("the previous page follows live again", `(function () { var s = window.agentplaneConsole && window.agentplaneConsole.state();
		return s && s.sessionId === '`+prev+`' && s.live === 'live'; })()`)
	restored := evalIn[bool](p, `window.bfcacheMark === '`+prev+`'`)
	t.Logf("Back restored the page from the back/forward cache: %v", restored)
	waitStreams(t, s, 1, "after Back")
	// What happened while it was away, and what happens now, shows.
	chat(t, s, "alice", "alice-key", "echo", prev, "while you were away")
	p.waitAcrossNavigation("the new run shows", `(function () { var s = window.agentplaneConsole.state();
		return s.runs.length === 2 && s.runs[1].status === 'DONE' && s.live === 'live'; })()`)
	all := s.events("/v1/sessions/" + prev + "/events")
	last := seqOf(all[len(all)-1])
	p.waitAcrossNavigation("every event is in, once", fmt.Sprintf(`(function () { var s = window.agentplaneConsole.state(); return s.lastSeq === %d && s.events === %d; })()`, last, last))

	// Forward, and the top bar's "Chat" link to the chat page and back.
	p.do("go forward", chromedp.Evaluate[chromedp.Void](`history.forward()`))
	p.waitAcrossNavigation("the last page follows live again", `(function () { var s = window.agentplaneConsole && window.agentplaneConsole.state();
		return s && s.sessionId === '`+sids[n-1]+`' && s.live === 'live'; })()`)
	waitStreams(t, s, 1, "after Forward")
	p.do("open the chat page", chromedp.Evaluate[chromedp.Void](`document.querySelector('.topbar-actions a[href="/"]').click()`))
	p.waitAcrossNavigation("the chat page", `!!document.getElementById('message-input')`)
	waitStreams(t, s, 0, "on the chat page")
	p.do("go back to the console", chromedp.Evaluate[chromedp.Void](`history.back()`))
	p.waitAcrossNavigation("the session page follows live again", `(function () { var s = window.agentplaneConsole && window.agentplaneConsole.state();
		return s && s.sessionId === '`+sids[n-1]+`' && s.live === 'live'; })()`)
	waitStreams(t, s, 1, "back from the chat page")
}

// TestBrowserChatPageBackForward: the chat page left by a full load closes its WebSocket (the
// server counts none), and Back brings it back connected, resubscribed after the last seq: the
// conversation as it was, each message once, and the next message goes through.
func TestBrowserChatPageBackForward(t *testing.T) {
	browser := newBrowser(t)
	s := startServer(t, "sqlite:"+t.TempDir()+"/a.db")
	goAgent(t, s, "echo")
	p := openChat(t, browser, s.URL, "echo")
	p.sendByClick("first")
	p.waitAssistantStatus("done")
	sid := p.state().SessionID
	seq := p.waitLastSeq(s, sid)
	waitGauge(t, s, "agentplane_ws_connections", 1, "on the chat page")
	p.do("mark the page", chromedp.Evaluate[chromedp.Void](`window.bfcacheMark = 'chat'`))

	p.do("load the console", chromedp.Navigate(s.URL+"/console/sessions"))
	waitGauge(t, s, "agentplane_ws_connections", 0, "on the console")
	// Meanwhile another tab of alice's adds a turn to the session.
	chat(t, s, "alice", "alice-key", "echo", sid, "from elsewhere")

	p.do("go back", chromedp.Evaluate[chromedp.Void](`history.back()`))
	p.waitAcrossNavigation("the chat page is connected again with the other turn", `window.agentplaneChat && window.agentplaneChat.state().connected &&
		window.agentplaneChat.state().messages.length === 4 && window.agentplaneChat.state().lastSeq > `+fmt.Sprint(seq))
	t.Logf("Back restored the chat page from the back/forward cache: %v", evalIn[bool](p, `window.bfcacheMark === 'chat'`))
	waitGauge(t, s, "agentplane_ws_connections", 1, "back on the chat page")
	p.do("send again", chromedp.Evaluate[chromedp.Void](`(function () { var i = document.getElementById('message-input'); i.value = 'second'; document.getElementById('send-button').click(); })()`))
	p.waitAcrossNavigation("the second reply", `window.agentplaneChat.state().messages.length === 6 && window.agentplaneChat.state().messages[5].status === 'done'`)
	got := evalIn[[]chatMessage](p, `window.agentplaneChat.state().messages`)
	want := []string{"first", "", "from elsewhere", "", "second", ""}
	for i, m := range got {
		if m.Role == "user" && m.Text != want[i] {
			t.Fatalf("after Back the page shows %+v", got)
		}
	}
}
