package e2e

// Browser test of the session view's "Jump to latest" (internal/console/static/session.js)
// while the server cannot be reached: it said nothing and did nothing (its request's failure
// was dropped); now it says so, tries again on keepLoading's backoff, and jumps once the server
// is back — without a reload.

import (
	"fmt"
	"testing"

	"github.com/chromedp/chromedp"
)

func TestBrowserConsoleJumpToLatestRecovers(t *testing.T) {
	browser := newBrowser(t)
	s := startServer(t, "sqlite:"+t.TempDir()+"/a.db", "--addr", freeAddr(t))
	s.register("stream", deltaAgent(t, 400).URL)
	sid, _ := chat(t, s, "alice", "alice-key", "stream", "", "go")
	all := s.events("/v1/sessions/" + sid + "/events?limit=10000")
	last := seqOf(all[len(all)-1])

	p := openConsole(t, browser, s.URL, adminKey, "/console/sessions/"+sid)
	p.waitFor("the whole log, followed live", fmt.Sprintf(`(function () { var s = window.agentplaneConsole.state();
		return s.live === 'live' && s.lastSeq === %d && s.events === %d && !!s.summary; })()`, last, last))
	p.do("note the page", chromedp.Evaluate[chromedp.Void](`window.notReloaded = true`))

	s.stop()
	p.do("jump to latest", chromedp.Click(`[data-testid="jump-latest"]`))
	const noteJS = `document.querySelector('.session-page [data-testid="load-error"]:not([hidden])')`
	p.waitFor("the view says it cannot jump yet and is trying again", `(function () { var n = `+noteJS+`;
		return !!n && n.dataset.state === 'waiting' && n.textContent.indexOf('Could not jump to the latest events') >= 0
			&& /trying again in \d+ s/.test(n.textContent); })()`)
	s.restart()
	// The jump starts over 200 events before the end: the timeline holds just those.
	p.waitFor("the jump, once the server is back", fmt.Sprintf(`(function () { var s = window.agentplaneConsole.state();
		return s.live === 'live' && s.lastSeq === %d && s.events === 200 && s.error === '' && !%s && window.notReloaded === true; })()`, last, noteJS))
}
