package e2e

// Browser tests: the embedded chat page (internal/console) in a real headless
// Chromium, against the real server binary and real agents. They drive the
// page as a user would (type, click, press Enter, reload, lose the network)
// and check both the page's own state (window.agentplaneChat.state()) and
// what the DOM shows.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	cdpruntime "github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
)

const (
	chromiumPath = "/usr/bin/chromium"
	// browserWait bounds every wait on the page; generous because the
	// server and agents run with -race.
	browserWait = 20 * time.Second
)

// chatState mirrors window.agentplaneChat.state() (Chat.prototype.snapshot
// in internal/console/static/chat.js).
type chatState struct {
	Connected   bool          `json:"connected"`
	Connection  string        `json:"connection"`
	SessionID   string        `json:"sessionId"`
	LastSeq     int64         `json:"lastSeq"`
	ActiveRunID string        `json:"activeRunId"`
	Messages    []chatMessage `json:"messages"`
}

type chatMessage struct {
	Role   string `json:"role"`
	Text   string `json:"text"`
	Status string `json:"status"`
	Detail string `json:"detail"`
	RunID  string `json:"runId"`
}

// bubble is one rendered `.msg` element of #messages.
type bubble struct {
	Role       string `json:"role"`
	Status     string `json:"status"`
	Text       string `json:"text"`
	StatusText string `json:"statusText"`
	StatusCode string `json:"statusCode"` // the status line's title: the error code of a failed run
	Visible    bool   `json:"visible"`
}

const bubblesJS = `Array.from(document.querySelectorAll('#messages .msg')).map(function (el) {
	var st = el.querySelector('.status');
	return {
		role: el.classList.contains('user') ? 'user' : el.classList.contains('assistant') ? 'assistant' : 'notice',
		status: el.dataset.status || '',
		text: el.querySelector('.text').textContent,
		statusText: st ? st.textContent : '',
		statusCode: st ? st.title : '',
		visible: !!(el.offsetWidth || el.offsetHeight),
	};
})`

// controls reports the composer's state.
type controls struct {
	InputDisabled  bool   `json:"inputDisabled"`
	SendDisabled   bool   `json:"sendDisabled"`
	CancelDisabled bool   `json:"cancelDisabled"`
	InputValue     string `json:"inputValue"`
}

const controlsJS = `({
	inputDisabled: document.getElementById('message-input').disabled,
	sendDisabled: document.getElementById('send-button').disabled,
	cancelDisabled: document.getElementById('cancel-button').disabled,
	inputValue: document.getElementById('message-input').value,
})`

// newBrowser starts a headless Chromium with a fresh profile for this test
// and returns its root context. Without Chromium the test is skipped, except
// in CI, where a skipped browser test would hide a broken page.
func newBrowser(t *testing.T) context.Context {
	t.Helper()
	if _, err := os.Stat(chromiumPath); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("browser tests need Chromium at %s: %v", chromiumPath, err)
		}
		t.Skipf("skipping browser test: no Chromium at %s (install the chromium package; with CI=true this fails)", chromiumPath)
	}
	profile := t.TempDir() // before the cleanup below, so it is removed after Chromium exits
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromiumPath),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-extensions", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		// A tab in the background must not have its timers (reconnect
		// backoff) throttled.
		chromedp.Flag("disable-background-timer-throttling", true),
		chromedp.Flag("disable-renderer-backgrounding", true),
		chromedp.Flag("disable-backgrounding-occluded-windows", true),
		chromedp.Flag("force-color-profile", "srgb"),
		chromedp.Flag("password-store", "basic"),
		chromedp.UserDataDir(profile),
		chromedp.WindowSize(1100, 800),
	}
	// A hung browser fails the test rather than the whole package run.
	root, cancelRoot := context.WithTimeout(context.Background(), 4*time.Minute)
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(root, opts...)
	browserCtx, cancelBrowser := chromedp.NewContext(allocCtx)
	t.Cleanup(func() {
		cancelBrowser()
		cancelAlloc() // waits for the browser process to exit
		cancelRoot()
	})
	if err := chromedp.Do(browserCtx); err != nil {
		t.Fatalf("start Chromium: %v", err)
	}
	return browserCtx
}

// chatPage is one tab showing the chat page.
type chatPage struct {
	t   *testing.T
	ctx context.Context

	mu         sync.Mutex
	log        bytes.Buffer // console output and exceptions, shown on failure
	exceptions []string
}

// openChat opens a new tab of browser on the chat page at base (the server's
// URL, or a proxy's) as alice talking to agentID, and waits until the page
// is connected.
func openChat(t *testing.T, browser context.Context, base, agentID string) *chatPage {
	t.Helper()
	p := &chatPage{t: t}
	ctx, cancel := chromedp.NewContext(browser, chromedp.WithListener(p.onEvent))
	t.Cleanup(cancel)
	p.ctx = ctx
	t.Cleanup(func() {
		if t.Failed() {
			p.mu.Lock()
			defer p.mu.Unlock()
			t.Logf("browser console:\n%s", p.log.String())
		}
	})
	if err := chromedp.Do(ctx); err != nil { // opens the tab, bound to ctx (no per-action deadline)
		t.Fatalf("open tab: %v", err)
	}
	frag := url.Values{"user": {"alice"}, "key": {"alice-key"}, "agent": {agentID}}
	p.do("open the chat page", chromedp.Navigate(base+"/#"+frag.Encode()))
	p.waitConnected()
	t.Cleanup(p.assertNoExceptions)
	return p
}

// onEvent runs in the tab's event loop: record, never block.
func (p *chatPage) onEvent(ev any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch ev := ev.(type) {
	case *cdpruntime.EventConsoleAPICalled:
		var parts []string
		for _, a := range ev.Args {
			if a.Value != nil {
				parts = append(parts, string(a.Value))
			} else {
				parts = append(parts, a.Description)
			}
		}
		fmt.Fprintf(&p.log, "console.%s: %s\n", ev.Type, strings.Join(parts, " "))
	case *cdpruntime.EventExceptionThrown:
		d := ev.ExceptionDetails
		msg := d.Text
		if d.Exception != nil && d.Exception.Description != "" {
			msg += " " + d.Exception.Description
		}
		msg = fmt.Sprintf("%s (%s:%d:%d)", msg, d.URL, d.LineNumber+1, d.ColumnNumber+1)
		p.exceptions = append(p.exceptions, msg)
		fmt.Fprintf(&p.log, "EXCEPTION: %s\n", msg)
	}
}

func (p *chatPage) assertNoExceptions() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.exceptions) > 0 {
		p.t.Errorf("the page threw %d uncaught exception(s):\n%s", len(p.exceptions), strings.Join(p.exceptions, "\n"))
	}
}

// actx bounds one action.
func (p *chatPage) actx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(p.ctx, browserWait+10*time.Second)
}

func (p *chatPage) do(what string, actions ...chromedp.Action[chromedp.Void]) {
	p.t.Helper()
	ctx, cancel := p.actx()
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		p.t.Fatalf("%s: %v\n%s", what, err, p.describe())
	}
}

func evalIn[T any](p *chatPage, expr string) T {
	p.t.Helper()
	ctx, cancel := p.actx()
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		p.t.Fatalf("evaluate %s: %v", expr, err)
	}
	return v
}

func (p *chatPage) state() chatState {
	p.t.Helper()
	return evalIn[chatState](p, `window.agentplaneChat.state()`)
}

func (p *chatPage) bubbles() []bubble {
	p.t.Helper()
	return evalIn[[]bubble](p, bubblesJS)
}

func (p *chatPage) controls() controls {
	p.t.Helper()
	return evalIn[controls](p, controlsJS)
}

// describe renders what the page shows, for failure messages. It never fails.
func (p *chatPage) describe() string {
	ctx, cancel := context.WithTimeout(p.ctx, 5*time.Second)
	defer cancel()
	js := `({state: window.agentplaneChat && window.agentplaneChat.state(), bubbles: ` + bubblesJS + `, controls: ` + controlsJS + `, status: document.getElementById('connection-status').textContent, toasts: Array.from(document.querySelectorAll('#toasts .toast span')).map(function (e) { return e.textContent; })})`
	if console, _ := chromedp.Run(ctx, chromedp.Evaluate[bool](`!!window.agentplaneConsole`)); console {
		// The operator console (browser_console_test.go): its page and state.
		js = `({url: location.href, page: window.agentplaneConsole.page(), state: window.agentplaneConsole.state(), view: document.getElementById('view').innerText.slice(0, 2000)})`
	}
	raw, err := chromedp.Run(ctx, chromedp.Evaluate[[]byte](js))
	if err != nil {
		return fmt.Sprintf("(page state unavailable: %v)", err)
	}
	var pretty bytes.Buffer
	if json.Indent(&pretty, raw, "", "  ") != nil {
		return string(raw)
	}
	return "page: " + pretty.String()
}

// waitFor polls the JavaScript predicate expr until it is truthy.
func (p *chatPage) waitFor(what, expr string) {
	p.t.Helper()
	ctx, cancel := p.actx()
	defer cancel()
	_, err := chromedp.Run(ctx, chromedp.Poll[chromedp.Void](expr,
		chromedp.WithPollingInterval(25*time.Millisecond), chromedp.WithPollingTimeout(browserWait)))
	if err != nil {
		p.t.Fatalf("waiting until %s (%s): %v\n%s", what, expr, err, p.describe())
	}
}

func (p *chatPage) waitConnected() {
	p.t.Helper()
	p.waitFor("the page is connected", `window.agentplaneChat && window.agentplaneChat.state().connected && document.getElementById('connection-status').dataset.state === 'connected'`)
}

// waitLastSeq waits until the page's lastSeq is the seq of the session's
// last client-facing event in the replay API (GET /v1/sessions/{id}/events),
// and returns it. Both are read afresh each round: the run's closing events
// may still be committing when the page shows the reply as done.
func (p *chatPage) waitLastSeq(s *server, sid string) int64 {
	p.t.Helper()
	deadline := time.Now().Add(browserWait)
	for {
		want := lastClientFacingSeq(p.t, s, sid)
		got := p.state().LastSeq
		if got == want && want > 0 {
			return want
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("page lastSeq %d, the session's last client-facing seq is %d\n%s", got, want, p.describe())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// lastAssistant is a predicate prefix: the newest assistant message of the page's state.
const lastAssistantJS = `(function () { var m = window.agentplaneChat.state().messages.filter(function (m) { return m.role === 'assistant'; }); return m[m.length - 1] || {}; })()`

func (p *chatPage) waitAssistantStatus(status string) {
	p.t.Helper()
	p.waitFor("the reply's status is "+status, lastAssistantJS+`.status === '`+status+`'`)
}

// sendByClick types text into the composer and presses Send.
func (p *chatPage) sendByClick(text string) {
	p.t.Helper()
	p.do("type and click Send",
		chromedp.WaitEnabled(chromedp.ID("send-button")),
		chromedp.Click(chromedp.ID("message-input")),
		chromedp.SendKeys(chromedp.ID("message-input"), text),
		chromedp.Click(chromedp.ID("send-button")),
	)
}

// pasteAndSend puts text into the composer at once (typing a long message
// key by key takes seconds) and presses Send.
func (p *chatPage) pasteAndSend(text string) {
	p.t.Helper()
	p.do("fill in and click Send",
		chromedp.WaitEnabled(chromedp.ID("send-button")),
		chromedp.SetValue(chromedp.ID("message-input"), text),
		chromedp.Click(chromedp.ID("send-button")),
	)
}

// sendByEnter types text and presses Enter.
func (p *chatPage) sendByEnter(text string) {
	p.t.Helper()
	p.do("type and press Enter",
		chromedp.WaitEnabled(chromedp.ID("send-button")),
		chromedp.SendKeys(chromedp.ID("message-input"), text+"\r"),
	)
}

// screenshot saves the viewport to AGENTPLANE_SCREENSHOT, or to the test's
// temporary directory.
func (p *chatPage) screenshot(name string) string {
	p.t.Helper()
	ctx, cancel := p.actx()
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
	if err != nil {
		p.t.Fatalf("screenshot: %v", err)
	}
	path := os.Getenv("AGENTPLANE_SCREENSHOT")
	if path == "" {
		path = filepath.Join(p.t.TempDir(), name)
	}
	if err := os.WriteFile(path, png, 0o644); err != nil {
		p.t.Fatalf("write screenshot: %v", err)
	}
	p.t.Logf("screenshot: %s", path)
	return path
}

// cutProxy is a TCP proxy between the browser and the server. cut drops
// every connection through it at once, as a network failure would, and
// drops new ones until restore: the page sees its WebSocket die and its
// reconnect attempts fail. (DevTools' offline emulation is no substitute: it
// stalls an open WebSocket but never closes it.)
type cutProxy struct {
	ln     net.Listener
	target string
	URL    string

	mu    sync.Mutex
	down  bool
	conns map[net.Conn]bool
}

func newCutProxy(t *testing.T, target string) *cutProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("proxy listen: %v", err)
	}
	p := &cutProxy{ln: ln, target: target, URL: "http://" + ln.Addr().String(), conns: map[net.Conn]bool{}}
	go p.serve()
	t.Cleanup(func() { ln.Close(); p.cut() })
	return p
}

func (p *cutProxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		go p.pipe(c)
	}
}

// track registers c, or closes it when the proxy is down.
func (p *cutProxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.down {
		c.Close()
		return false
	}
	p.conns[c] = true
	return true
}

func (p *cutProxy) pipe(c net.Conn) {
	if !p.track(c) {
		return
	}
	up, err := net.Dial("tcp", p.target)
	if err != nil {
		c.Close()
		return
	}
	if !p.track(up) {
		c.Close()
		return
	}
	go func() { io.Copy(up, c); up.Close() }()
	io.Copy(c, up)
	c.Close()
}

// cut drops every connection and refuses new ones until restore.
func (p *cutProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = true
	for c := range p.conns {
		if tc, ok := c.(*net.TCPConn); ok {
			tc.SetLinger(0) // a reset, not a polite close
		}
		c.Close()
	}
	clear(p.conns)
}

func (p *cutProxy) restore() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = false
}

// --- helpers on the server side ---

// transcriptReply returns the assistant message the server stored for the
// session's n-th turn (0-based).
func transcriptReply(t *testing.T, s *server, sid string, n int) string {
	t.Helper()
	code, body := s.call("GET", "/v1/sessions/"+sid+"/messages", "alice-key", nil)
	list, _ := body["messages"].([]any)
	if code != 200 {
		t.Fatalf("transcript: %d %v", code, body)
	}
	var replies []string
	for _, m := range list {
		if m := m.(map[string]any); m["role"] == "assistant" {
			c, _ := m["content"].(string)
			replies = append(replies, c)
		}
	}
	if n >= len(replies) {
		t.Fatalf("transcript has %d assistant messages, want #%d: %v", len(replies), n, body)
	}
	return replies[n]
}

// lastClientFacingSeq is the seq of the session's last event a client is sent.
func lastClientFacingSeq(t *testing.T, s *server, sid string) int64 {
	t.Helper()
	var last int64
	for _, e := range s.events("/v1/sessions/" + sid + "/events") {
		if clientFacing[e["type"].(string)] {
			last = seqOf(e)
		}
	}
	return last
}

// --- the tests ---

// TestBrowserChatStreamsAReply sends two messages (Send button, then Enter)
// and checks the bubbles, the streamed reply and the final status.
func TestBrowserChatStreamsAReply(t *testing.T) {
	browser := newBrowser(t)
	s := startServer(t, "sqlite:"+filepath.Join(t.TempDir(), "a.db"))
	goAgent(t, s, "echo")
	p := openChat(t, browser, s.URL, "echo")

	if got := p.state(); got.SessionID != "" || len(got.Messages) != 0 {
		t.Fatalf("fresh page has a conversation: %+v", got)
	}
	if label := evalIn[string](p, `document.getElementById('agent-label').textContent`); label != "echo" {
		t.Fatalf("agent label %q", label)
	}

	msg := "hello from the browser"
	p.sendByClick(msg)
	// The user's bubble shows at once, and the input is cleared and locked.
	p.waitFor("the user bubble shows", `document.querySelectorAll('#messages .msg.user').length === 1`)
	p.waitFor("the assistant bubble shows", `document.querySelectorAll('#messages .msg.assistant').length === 1`)
	if c := p.controls(); c.InputValue != "" {
		t.Fatalf("input not cleared after send: %+v", c)
	}
	// The reply streams: the page shows part of it while the run is going,
	// with the input locked and Cancel offered (checked in one evaluation,
	// so the end of the run cannot slip in between).
	p.waitFor("part of the reply shows while running, with Cancel offered", lastAssistantJS+`.status === 'running' && `+lastAssistantJS+`.text.length > 0 && `+
		`document.getElementById('message-input').disabled && document.getElementById('send-button').disabled && !document.getElementById('cancel-button').disabled`)
	p.waitAssistantStatus("done")

	st := p.state()
	if st.SessionID == "" || !strings.HasPrefix(evalIn[string](p, `location.hash`), "#") ||
		!strings.Contains(evalIn[string](p, `location.hash`), "session="+url.QueryEscape(st.SessionID)) {
		t.Fatalf("session not remembered in the URL: state %+v, hash %q", st, evalIn[string](p, `location.hash`))
	}
	reply := transcriptReply(t, s, st.SessionID, 0)
	if !strings.Contains(reply, "You said: "+msg) {
		t.Fatalf("agent reply %q lacks the echo", reply)
	}
	if len(st.Messages) != 2 || st.Messages[0].Role != "user" || st.Messages[0].Text != msg || st.Messages[0].Status != "sent" ||
		st.Messages[1].Role != "assistant" || st.Messages[1].Text != reply || st.Messages[1].Status != "done" || st.ActiveRunID != "" {
		t.Fatalf("page state %+v, want user %q and assistant %q done", st, msg, reply)
	}
	b := p.bubbles()
	if len(b) != 2 || b[0].Role != "user" || b[0].Text != msg || !b[0].Visible ||
		b[1].Role != "assistant" || b[1].Text != reply || b[1].Status != "done" || !strings.HasPrefix(b[1].StatusText, "done") || !b[1].Visible {
		t.Fatalf("bubbles %+v", b)
	}
	if c := p.controls(); c.InputDisabled || c.SendDisabled || !c.CancelDisabled {
		t.Fatalf("controls after the reply: %+v", c)
	}
	p.waitFor("the keyboard is back in the input", `document.activeElement === document.getElementById('message-input')`)
	p.waitLastSeq(s, st.SessionID)

	// Second turn with Enter, in the same session: the agent sees the history.
	msg2 := "and again"
	p.sendByEnter(msg2)
	p.waitFor("the second reply finishes", `window.agentplaneChat.state().messages.length === 4 && `+lastAssistantJS+`.status === 'done'`)
	st2 := p.state()
	if st2.SessionID != st.SessionID {
		t.Fatalf("second turn moved to session %s from %s", st2.SessionID, st.SessionID)
	}
	reply2 := transcriptReply(t, s, st.SessionID, 1)
	if !strings.Contains(reply2, "You said: "+msg2) || !strings.Contains(reply2, "3 messages") {
		t.Fatalf("second reply %q", reply2)
	}
	b = p.bubbles()
	if len(b) != 4 || b[2].Role != "user" || b[2].Text != msg2 || b[3].Role != "assistant" || b[3].Text != reply2 || b[3].Status != "done" {
		t.Fatalf("bubbles after the second turn %+v", b)
	}
	if v := p.controls().InputValue; v != "" {
		t.Fatalf("Enter left %q in the input", v)
	}
	// The newest bubble is scrolled into view.
	p.waitFor("the conversation is scrolled to the bottom", `(function () { var c = document.getElementById('conversation'); return c.scrollHeight - c.scrollTop - c.clientHeight < 2; })()`)
	p.screenshot("chat.png")
}

// TestBrowserReconnectResumesAndReloadRebuilds cuts the network mid-reply:
// the page reconnects, resubscribes from its last seq and ends with the whole
// reply, each word once. A reload then rebuilds the conversation from the
// session's replay.
func TestBrowserReconnectResumesAndReloadRebuilds(t *testing.T) {
	browser := newBrowser(t)
	s := startServer(t, "sqlite:"+filepath.Join(t.TempDir(), "a.db"))
	goAgent(t, s, "echo")
	proxy := newCutProxy(t, strings.TrimPrefix(s.URL, "http://"))
	p := openChat(t, browser, proxy.URL, "echo")

	// ~80 words stream for ~4 s: the page reconnects while the reply is
	// still going, so it gets the missed part replayed and the rest live.
	const n = 80
	msg := words(n)
	p.pasteAndSend(msg)
	p.waitFor("the reply is streaming", lastAssistantJS+`.status === 'running' && `+lastAssistantJS+`.text.indexOf('word3 ') >= 0`)

	proxy.cut()
	p.waitFor("the page notices the lost connection", `!window.agentplaneChat.state().connected && document.getElementById('connection-status').dataset.state === 'reconnecting'`)
	cut := p.state()
	if a := cut.Messages[len(cut.Messages)-1]; a.Status != "running" || strings.Contains(a.Text, fmt.Sprintf("word%d", n-1)) {
		t.Fatalf("the cut did not happen mid-reply: %+v", a)
	}
	// Stay down a while: the reply goes on server-side, and the page's
	// first reconnect attempt (after 0.5 s) fails.
	time.Sleep(time.Second)
	if st := p.state(); st.Connected {
		t.Fatalf("page connected through a cut network: %+v", st)
	}
	proxy.restore()
	p.waitConnected()
	if st := p.state(); len(st.Messages) == 2 {
		t.Logf("reconnected: lastSeq %d → %d, reply %s", cut.LastSeq, st.LastSeq, st.Messages[1].Status)
	}
	p.waitAssistantStatus("done")

	st := p.state()
	if st.SessionID != cut.SessionID {
		t.Fatalf("session changed over the reconnect: %s → %s", cut.SessionID, st.SessionID)
	}
	reply := transcriptReply(t, s, st.SessionID, 0)
	if !strings.Contains(reply, "You said: "+msg) {
		t.Fatalf("agent reply %q", reply)
	}
	if len(st.Messages) != 2 || st.Messages[0].Text != msg || st.Messages[1].Text != reply {
		t.Fatalf("after the reconnect the page shows %+v,\nwant the reply %q", st.Messages, reply)
	}
	for i := range n {
		w := fmt.Sprintf("word%d", i)
		if count := len(regexp.MustCompile(`\b`+w+`\b`).FindAllString(st.Messages[1].Text, -1)); count != 1 {
			t.Fatalf("%s appears %d times in %q", w, count, st.Messages[1].Text)
		}
	}
	if b := p.bubbles(); len(b) != 2 || b[1].Text != reply || b[1].Status != "done" {
		t.Fatalf("bubbles %+v", b)
	}
	want := p.waitLastSeq(s, st.SessionID)

	// Reload: the URL fragment carries the session; the page rebuilds the
	// conversation from the replay.
	hash := evalIn[string](p, `location.hash`)
	if !strings.Contains(hash, "session=") {
		t.Fatalf("URL fragment %q has no session", hash)
	}
	p.do("reload", chromedp.Reload())
	p.waitConnected()
	p.waitFor("the conversation is rebuilt", `window.agentplaneChat.state().messages.length === 2 && `+lastAssistantJS+`.status === 'done'`)
	if got := p.waitLastSeq(s, st.SessionID); got != want {
		t.Fatalf("the session grew over the reload: last client-facing seq %d, was %d", got, want)
	}
	re := p.state()
	if re.SessionID != st.SessionID {
		t.Fatalf("after reload: session %s, want %s", re.SessionID, st.SessionID)
	}
	if re.Messages[0].Role != "user" || re.Messages[0].Text != msg || re.Messages[1].Role != "assistant" || re.Messages[1].Text != reply {
		t.Fatalf("after reload the page shows %+v", re.Messages)
	}
	b := p.bubbles()
	if len(b) != 2 || b[0].Role != "user" || b[0].Text != msg || b[1].Role != "assistant" || b[1].Text != reply || b[1].Status != "done" || !b[1].Visible {
		t.Fatalf("bubbles after reload %+v", b)
	}
	if h := evalIn[string](p, `location.hash`); h != hash {
		t.Fatalf("reload changed the URL fragment: %q → %q", hash, h)
	}
	if hidden := evalIn[bool](p, `document.getElementById('empty-state').hidden`); !hidden {
		t.Fatal("the empty-state hint shows over a rebuilt conversation")
	}
}

// TestBrowserCancel cancels a never-ending reply with the Cancel button.
func TestBrowserCancel(t *testing.T) {
	browser := newBrowser(t)
	s := startServer(t, "sqlite:"+filepath.Join(t.TempDir(), "a.db"))
	ag := newScriptedAgent(t, modeStreamForever, 0)
	s.register("forever", ag.URL)
	p := openChat(t, browser, s.URL, "forever")

	p.sendByClick("never stop")
	p.waitFor("the reply is streaming", lastAssistantJS+`.status === 'running' && `+lastAssistantJS+`.text.indexOf('w2 ') >= 0`)
	if c := p.controls(); !c.InputDisabled || c.CancelDisabled {
		t.Fatalf("controls while streaming: %+v", c)
	}
	p.do("click Cancel", chromedp.Click(chromedp.ID("cancel-button")))
	p.waitAssistantStatus("cancelled")
	p.waitFor("the input is enabled again", `!document.getElementById('message-input').disabled && !document.getElementById('send-button').disabled && document.getElementById('cancel-button').disabled`)

	st := p.state()
	a := st.Messages[len(st.Messages)-1]
	if st.ActiveRunID != "" || a.RunID == "" || !strings.Contains(a.Detail, "cancelled") {
		t.Fatalf("state after cancel %+v", st)
	}
	if code, run := s.call("GET", "/v1/runs/"+a.RunID, adminKey, nil); code != 200 || run["status"] != "CANCELLED" {
		t.Fatalf("run after cancel: %d %v", code, run)
	}
	b := p.bubbles()
	if len(b) != 2 || b[1].Status != "cancelled" || !strings.Contains(b[1].StatusText, "cancelled") || !strings.HasPrefix(b[1].Text, "w0 w1 w2 ") {
		t.Fatalf("bubbles after cancel %+v", b)
	}
	// Nothing more streams into the cancelled bubble.
	text := b[1].Text
	p.do("let late deltas arrive", chromedp.Sleep(300*time.Millisecond))
	if got := p.bubbles()[1].Text; got != text {
		t.Fatalf("the cancelled reply grew: %q → %q", text, got)
	}
	// The session takes a new message.
	p.sendByEnter("one more")
	p.waitFor("a second run starts", `window.agentplaneChat.state().messages.length === 4 && `+lastAssistantJS+`.status === 'running'`)
}

// TestBrowserAgentError shows a failed run with the agent error's code.
func TestBrowserAgentError(t *testing.T) {
	browser := newBrowser(t)
	s := startServer(t, "sqlite:"+filepath.Join(t.TempDir(), "a.db"))
	ag := newScriptedAgent(t, modeHTTP500, 0)
	s.register("broken", ag.URL)
	p := openChat(t, browser, s.URL, "broken")

	p.sendByClick("hi")
	p.waitAssistantStatus("failed")
	p.waitFor("the input is enabled again", `!document.getElementById('message-input').disabled && !document.getElementById('send-button').disabled`)
	st := p.state()
	if len(st.Messages) != 2 || st.Messages[0].Text != "hi" || st.Messages[0].Status != "sent" ||
		!strings.Contains(st.Messages[1].Detail, "agent_http_error") || st.ActiveRunID != "" {
		t.Fatalf("state after the failure %+v", st)
	}
	b := p.bubbles()
	if len(b) != 2 || b[1].Role != "assistant" || b[1].Status != "failed" ||
		!strings.Contains(b[1].StatusText, "failed") || !strings.Contains(b[1].StatusText, "agent_http_error") ||
		b[1].StatusCode != "agent_http_error" || !b[1].Visible {
		t.Fatalf("bubbles after the failure %+v", b)
	}
	if code, run := s.call("GET", "/v1/runs/"+st.Messages[1].RunID, adminKey, nil); code != 200 || run["status"] != "FAILED" {
		t.Fatalf("run %d %v", code, run)
	}
	p.waitLastSeq(s, st.SessionID)
}
