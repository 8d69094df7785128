package e2e

// Browser test of the replay's paging (internal/console/static/replay.js): a session longer than
// one page of the log (1,000 events) is read a page at a time, and a seek that lands while the
// next page is still loading must settle at its target with every event applied once, in order,
// reading each page once — not drop the page it was waiting for and spin on it (the page froze:
// a promise loop that never yields), nor let an older seek carry on past a newer one's target,
// nor ask again and again for a page the server refuses (it is asked again on a backoff).

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// deltaAgent streams n deltas, "w0 " to "w<n-1> ", as fast as it can, then done: a session with
// thousands of events in a second or two.
func deltaAgent(t *testing.T, n int) *httptest.Server {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) {})
	mux.HandleFunc("POST /invoke", func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		for i := range n {
			fmt.Fprintf(w, "event: delta\ndata: {\"text\":\"w%d \"}\n\n", i)
		}
		fmt.Fprint(w, "event: done\ndata: {}\n\n")
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

// pageGate is an HTTP proxy in front of a server that records every request for a page of a
// session's log (GET /v1/sessions/{id}/events, not the follow stream) and can hold the next one
// with a given after_seq until released, or refuse them all, so a test acts while a page loads.
type pageGate struct {
	URL string

	mu       sync.Mutex
	pages    []string // after_seq of each page asked for, in order
	holdSeq  string   // hold the next page asked for after this seq
	held     chan struct{}
	released chan struct{}
	refuse   bool // answer every page 503
}

func newPageGate(t *testing.T, target string) *pageGate {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	g := &pageGate{}
	proxy := httputil.NewSingleHostReverseProxy(u)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, "/v1/sessions/") && strings.HasSuffix(r.URL.Path, "/events") && r.URL.Query().Get("follow") == "" {
			after := r.URL.Query().Get("after_seq")
			g.mu.Lock()
			g.pages = append(g.pages, after)
			refuse := g.refuse
			var release chan struct{}
			if g.held != nil && after == g.holdSeq {
				close(g.held)
				g.held = nil
				release = g.released
			}
			g.mu.Unlock()
			if refuse {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusServiceUnavailable)
				fmt.Fprint(w, `{"error":{"code":"unavailable","message":"the test refuses pages"}}`)
				return
			}
			if release != nil {
				select {
				case <-release:
				case <-r.Context().Done():
					return
				}
			}
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	g.URL = srv.URL
	return g
}

// hold arms the gate for the next page asked for after seq; the returned function waits until
// that request has arrived (and is being held).
func (g *pageGate) hold(t *testing.T, seq int64) (arrived func()) {
	t.Helper()
	held := make(chan struct{})
	g.mu.Lock()
	g.holdSeq, g.held, g.released = fmt.Sprint(seq), held, make(chan struct{})
	g.mu.Unlock()
	return func() {
		t.Helper()
		select {
		case <-held:
		case <-time.After(browserWait):
			t.Fatalf("the page after seq %d was never asked for; pages asked for: %v", seq, g.requests())
		}
	}
}

// release lets the held page through.
func (g *pageGate) release() {
	g.mu.Lock()
	defer g.mu.Unlock()
	close(g.released)
}

func (g *pageGate) setRefuse(on bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.refuse = on
}

func (g *pageGate) requests() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]string(nil), g.pages...)
}

// responsive fails the test when the page's main thread does not answer within a few seconds:
// a page spinning in a promise loop never yields to anything else, the test's questions included.
func responsive(p *chatPage, when string) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, 5*time.Second)
	defer cancel()
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`true`)); err != nil {
		p.t.Fatalf("%s: the page froze (it answers nothing: %v)", when, err)
	}
}

// TestBrowserConsoleReplaySeekWhilePageLoads: a replay of a session of 2,600-odd events seeks
// forward while playing's prefetch of page 2 is in flight, forward again while its own page is
// in flight, back while its page is in flight, and back while a seek spans frames; each time it
// settles at the seq asked for with events 1…seq applied once each, in order — the chat's text
// exactly the deltas up to there — and each page of the log is read once per pass. A page the
// server refuses during a seek is waited for, asked again on the backoff, not again and again.
func TestBrowserConsoleReplaySeekWhilePageLoads(t *testing.T) {
	browser := newBrowser(t)
	s := startServer(t, "sqlite:"+t.TempDir()+"/a.db")
	const deltas = 2600
	s.register("stream", deltaAgent(t, deltas).URL)
	sid, _ := chat(t, s, "alice", "alice-key", "stream", "", "go")
	all := s.events("/v1/sessions/" + sid + "/events?limit=10000")
	last := seqOf(all[len(all)-1])
	if last != int64(len(all)) || last <= 2500 {
		t.Fatalf("the session has %d events, last seq %d: want more than 2,500, seqs from 1 without gaps", len(all), last)
	}
	// textAt is the chat's reply as it stood after seq: the deltas up to it, in order.
	textAt := func(seq int64) string {
		var b strings.Builder
		for _, e := range all {
			if seqOf(e) <= seq && e["type"] == "agent_stream_delta" {
				b.WriteString(e["payload"].(map[string]any)["text"].(string))
			}
		}
		return b.String()
	}

	gate := newPageGate(t, s.URL)
	p := openConsole(t, browser, gate.URL, adminKey, "/console/sessions/"+sid+"/replay?speed=instant")
	p.waitFor("the first page", fmt.Sprintf(`(function () { var s = window.agentplaneConsole.state(); return s && s.lastSeq === %d && s.buffered === 1000; })()`, last))

	seek := func(seq int64) {
		t.Helper()
		p.do(fmt.Sprintf("seek to %d", seq), chromedp.Evaluate[chromedp.Void](fmt.Sprintf(`(function () { var s = document.querySelector('[data-testid="seek"]'); s.value = '%d'; s.dispatchEvent(new Event('change')); })()`, seq)))
	}
	// settled checks the replay stands at seq: not seeking or playing, events 1…seq applied once
	// each (the timeline took every one, in order), and the chat shows exactly their deltas.
	settled := func(seq int64, when string) {
		t.Helper()
		responsive(p, when)
		want, _ := json.Marshal(textAt(seq))
		p.do("note the text expected", chromedp.Evaluate[chromedp.Void](`window.wantText = `+string(want)))
		p.waitFor(fmt.Sprintf("%s: the replay settles at seq %d", when, seq), fmt.Sprintf(`(function () { var s = window.agentplaneConsole.state();
			var m = s.chat.messages.filter(function (m) { return m.role === 'assistant'; });
			var dom = document.querySelector('[data-testid="replay-chat"] .msg.assistant .text');
			return s.pos === %d && !s.seeking && !s.playing && s.applied === %d && s.timeline.lastSeq === %d && s.timeline.events === %d
				&& m.length === 1 && m[0].text === window.wantText && !!dom && dom.textContent === window.wantText; })()`, seq, seq, seq, seq))
	}
	// stays checks nothing moves the replay off seq for a while (an older seek carrying on).
	stays := func(seq int64, when string) {
		t.Helper()
		for range 10 {
			p.do("two frames", chromedp.Evaluate[chromedp.Void](`new Promise(function (r) { requestAnimationFrame(function () { requestAnimationFrame(r); }); })`, chromedp.EvalAwaitPromise))
			time.Sleep(50 * time.Millisecond)
			if pos := evalIn[int64](p, `window.agentplaneConsole.state().pos`); pos != seq {
				t.Fatalf("%s: the replay moved on to seq %d after settling at %d\n%s", when, pos, seq, p.describe())
			}
		}
		settled(seq, when)
	}

	// 1. Playing, the prefetch of page 2 is held; pause and seek into page 2 meanwhile.
	arrived := gate.hold(t, 1000)
	p.do("play", chromedp.Click(`[data-testid="play"]`))
	arrived()
	p.do("pause", chromedp.Click(`[data-testid="play"]`))
	seek(1500)
	gate.release()
	settled(1500, "a seek while playing's next page loads")

	// 2. A seek into page 3 waits for it; a second seek forward lands meanwhile.
	arrived = gate.hold(t, 2000)
	seek(2300)
	arrived()
	seek(2500)
	gate.release()
	settled(2500, "a seek while a seek's page loads")

	// 3. Back into page 2 (read again from the start), held; back again to page 1 meanwhile:
	// the first seek must not carry on to its own target once its page comes.
	arrived = gate.hold(t, 1000)
	seek(1200)
	arrived()
	seek(500)
	settled(500, "a seek back while a seek's page loads")
	gate.release()
	stays(500, "after the first seek's page came")

	// 4. A seek that takes more than a frame (here: the page's clock says every frame's budget is
	// spent, so it applies nothing and waits for the next frame), and a seek back meanwhile: the
	// first stops where it is, it does not carry on to its own target after the second landed.
	seekJS := `function (seq) { var s = document.querySelector('[data-testid="seek"]'); s.value = String(seq); s.dispatchEvent(new Event('change')); }`
	p.do("seek to 900 over several frames, then back to 300", chromedp.Evaluate[chromedp.Void](`(function () { var seek = `+seekJS+`;
		var now = performance.now, t = now.call(performance);
		performance.now = function () { return t += 1000; };
		try { seek(900); seek(300); } finally { performance.now = now; } })()`))
	settled(300, "a seek back while a seek spans frames")
	stays(300, "after the first seek's next frame")

	// To the end from there: the rest of the log, each page read once.
	p.do("play", chromedp.Click(`[data-testid="play"]`))
	p.waitFor("the replay finishes", fmt.Sprintf(`(function () { var s = window.agentplaneConsole.state(); return s.finished && s.pos === %d; })()`, last))
	if st := consoleState[struct {
		Applied  int64 `json:"applied"`
		Timeline struct {
			Events int64 `json:"events"`
		} `json:"timeline"`
	}](p); st.Applied != last || st.Timeline.Events != last {
		t.Fatalf("at the end %d events applied, the timeline took %d; the log has %d", st.Applied, st.Timeline.Events, last)
	}
	// Open; pages 2 and 3 (one seek waited for each); pages 1 and 2 for the seek back to 1200,
	// page 1 again for the one back to 500 and for the one back to 300; pages 2 and 3 playing to
	// the end.
	want := []string{"0", "1000", "2000", "0", "1000", "0", "0", "1000", "2000"}
	if got := gate.requests(); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("pages asked for (after_seq): %v, want %v", got, want)
	}

	// 5. The server refuses the page a seek needs: the seek waits for it, saying so, and asks
	// again on the backoff (1 s, then 2 s…), not again and again; once the server answers, the
	// seek lands — without a reload.
	gate.setRefuse(true)
	before := len(gate.requests())
	seek(100)
	p.waitFor("the replay says it could not load the log and tries again", `(function () { var s = window.agentplaneConsole.state(); var n = document.querySelector('.replay-page [data-testid="load-error"]');
		return s.seeking && !s.playing && s.error === '' && !!n && !n.hidden && n.dataset.state === 'waiting' && n.textContent.indexOf('Could not load the log') >= 0; })()`)
	time.Sleep(2500 * time.Millisecond)
	if n := len(gate.requests()) - before; n < 2 || n > 3 {
		t.Fatalf("a refused page was asked for %d times in 2.5 s: want a try and a retry or two on the backoff: %v", n, gate.requests()[before:])
	}
	gate.setRefuse(false)
	p.do("the window gets the focus back", chromedp.Evaluate[chromedp.Void](`window.dispatchEvent(new Event('focus'))`))
	settled(100, "a seek whose page was refused, once the server answers")
	if n := evalIn[int](p, `document.querySelectorAll('.replay-page [data-testid="load-error"]:not([hidden])').length`); n != 0 {
		t.Fatalf("%d load-error notes still show", n)
	}
}
