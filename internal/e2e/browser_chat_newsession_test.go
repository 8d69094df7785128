package e2e

// Browser test of a new session's first message whose answer never reached the page (the chat
// audit): the page learns a new session's id only from the run_started answering its first
// message, so a page reloaded, or left and come back to, within that round trip forgot a
// conversation the server went on with — the user's message and the agent's answer were
// nowhere on the page.

import (
	"bytes"
	"net"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// replyHoldProxy is a TCP proxy between the browser and the server that can hold back what the
// server sends on the WebSockets open at the time (holdReplies): the page's messages reach the
// server and the server's answers stay on the wire, as on a slow network. HTTP connections, and
// WebSockets opened later, pass freely.
type replyHoldProxy struct {
	ln     net.Listener
	target string
	URL    string

	mu    sync.Mutex
	conns map[*proxiedConn]bool
}

// proxiedConn is one browser connection through the proxy.
type proxiedConn struct {
	closed chan struct{} // closed once the browser's side has ended

	mu        sync.Mutex
	websocket bool          // the browser asked for a WebSocket upgrade on it
	gate      chan struct{} // while non-nil, the server's bytes wait; closed to let them go
}

func newReplyHoldProxy(t *testing.T, target string) *replyHoldProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("proxy listen: %v", err)
	}
	p := &replyHoldProxy{ln: ln, target: target, URL: "http://" + ln.Addr().String(), conns: map[*proxiedConn]bool{}}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go p.pipe(c)
		}
	}()
	t.Cleanup(func() { ln.Close(); p.release() })
	return p
}

func (p *replyHoldProxy) pipe(c net.Conn) {
	defer c.Close()
	up, err := net.Dial("tcp", p.target)
	if err != nil {
		return
	}
	defer up.Close()
	pc := &proxiedConn{closed: make(chan struct{})}
	p.mu.Lock()
	p.conns[pc] = true
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		delete(p.conns, pc)
		p.mu.Unlock()
	}()
	go func() {
		defer close(pc.closed)
		defer up.Close()
		buf := make([]byte, 32<<10)
		for {
			n, err := c.Read(buf)
			if n > 0 {
				if bytes.Contains(bytes.ToLower(buf[:n]), []byte("upgrade: websocket")) {
					pc.mu.Lock()
					pc.websocket = true
					pc.mu.Unlock()
				}
				if _, werr := up.Write(buf[:n]); werr != nil {
					return
				}
			}
			if err != nil {
				return
			}
		}
	}()
	buf := make([]byte, 32<<10)
	for {
		n, err := up.Read(buf)
		if n > 0 {
			pc.mu.Lock()
			gate := pc.gate
			pc.mu.Unlock()
			if gate != nil {
				select {
				case <-gate:
				case <-pc.closed:
					return // the browser left: what the server said never reaches it
				}
			}
			if _, werr := c.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// holdReplies holds back the server's bytes on every WebSocket now open, and returns how many.
func (p *replyHoldProxy) holdReplies() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for pc := range p.conns {
		pc.mu.Lock()
		if pc.websocket && pc.gate == nil {
			pc.gate = make(chan struct{})
			n++
		}
		pc.mu.Unlock()
	}
	return n
}

// release lets everything held go.
func (p *replyHoldProxy) release() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for pc := range p.conns {
		pc.mu.Lock()
		if pc.gate != nil {
			close(pc.gate)
			pc.gate = nil
		}
		pc.mu.Unlock()
	}
}

// aliceSessions lists alice's sessions, newest first, as her key sees them.
func aliceSessions(t *testing.T, s *server) []string {
	t.Helper()
	code, body := s.call("GET", "/v1/sessions?user_id=alice", "alice-key", nil)
	if code != 200 {
		t.Fatalf("list sessions: %d %v", code, body)
	}
	var ids []string
	for _, x := range body["sessions"].([]any) {
		ids = append(ids, x.(map[string]any)["session_id"].(string))
	}
	return ids
}

// waitAnsweredSession waits until alice has a session not in known whose first run has
// finished, and returns its id and the agent's answer.
func waitAnsweredSession(t *testing.T, s *server, known []string) (string, string) {
	t.Helper()
	deadline := time.Now().Add(browserWait)
	for {
		for _, sid := range aliceSessions(t, s) {
			if slices.Contains(known, sid) {
				continue
			}
			_, body := s.call("GET", "/v1/runs?session_id="+sid, "alice-key", nil)
			runs, _ := body["runs"].([]any)
			if len(runs) == 1 && runs[0].(map[string]any)["status"] == "DONE" {
				return sid, transcriptReply(t, s, sid, 0)
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no new answered session of alice's; she has %v", aliceSessions(t, s))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// assertConversationResumed checks the page shows the session sid as its one turn, msg and
// reply, and remembers it.
func assertConversationResumed(t *testing.T, p *chatPage, sid, msg, reply string) {
	t.Helper()
	st := p.state()
	if st.SessionID != sid || len(st.Messages) != 2 ||
		st.Messages[0].Role != "user" || st.Messages[0].Text != msg || st.Messages[0].Status != "sent" ||
		st.Messages[1].Role != "assistant" || st.Messages[1].Text != reply || st.Messages[1].Status != "done" {
		t.Fatalf("the page shows %+v in session %q; want %q and the answer %q in %s", st.Messages, st.SessionID, msg, reply, sid)
	}
	b := p.bubbles()
	if len(b) != 2 || b[0].Role != "user" || b[0].Text != msg || !b[0].Visible ||
		b[1].Role != "assistant" || b[1].Text != reply || b[1].Status != "done" || !b[1].Visible {
		t.Fatalf("bubbles %+v", b)
	}
	if h := evalIn[string](p, `location.hash`); !strings.Contains(h, "session="+url.QueryEscape(sid)) {
		t.Fatalf("the URL fragment %q does not remember session %s", h, sid)
	}
	if got := evalIn[string](p, `localStorage.getItem('agentplane.chat.session:alice:echo')`); got != `"`+sid+`"` {
		t.Fatalf("local storage remembers session %s, want %q", got, sid)
	}
	if left := evalIn[bool](p, `localStorage.getItem('agentplane.chat.pendingNewSession:alice:echo') !== null`); left {
		t.Fatal("the first message is still kept as unanswered")
	}
}

// TestBrowserChatLeftBeforeTheFirstAnswer sends the first message of a new session and leaves
// the page before anything the server answers reaches it — by a reload, then by a visit
// elsewhere and Back — while the server runs it to the end. Both times the page comes back
// with the session: the message, the agent's answer, the session remembered.
func TestBrowserChatLeftBeforeTheFirstAnswer(t *testing.T) {
	browser := newBrowser(t)
	s := startServer(t, "sqlite:"+filepath.Join(t.TempDir(), "a.db"))
	goAgent(t, s, "echo")
	proxy := newReplyHoldProxy(t, strings.TrimPrefix(s.URL, "http://"))
	p := openChat(t, browser, proxy.URL, "echo")

	// leaveAfterSending sends msg with the server's answers held back, waits until the server
	// has run it to the end, checks the page has seen none of it, then has leave take the page
	// away (its WebSocket, and all that was held on it, goes with it).
	leaveAfterSending := func(msg string, known []string, leave func()) (string, string) {
		t.Helper()
		if n := proxy.holdReplies(); n != 1 {
			t.Fatalf("holding the replies of %d WebSockets, want the page's one", n)
		}
		p.sendByClick(msg)
		sid, reply := waitAnsweredSession(t, s, known)
		if st := p.state(); st.SessionID != "" || len(st.Messages) != 1 || st.Messages[0].Status != "sending" ||
			strings.Contains(evalIn[string](p, `location.hash`), "session=") {
			t.Fatalf("the page heard back before it was left (the race is lost): %+v", st)
		}
		leave()
		return sid, reply
	}

	msg := "sent just before the reload"
	sid, reply := leaveAfterSending(msg, nil, func() { p.do("reload", chromedp.Reload()) })
	p.waitConnected()
	p.waitFor("the conversation comes back after the reload", `window.agentplaneChat.state().messages.length === 2 && `+lastAssistantJS+`.status === 'done'`)
	assertConversationResumed(t, p, sid, msg, reply)
	p.waitLastSeq(s, sid)
	// It goes on in the same session.
	p.sendByEnter("and then")
	p.waitFor("the second reply", `window.agentplaneChat.state().messages.length === 4 && `+lastAssistantJS+`.status === 'done'`)
	if got := p.state().SessionID; got != sid {
		t.Fatalf("the next message went to session %s, want %s", got, sid)
	}
	if got := aliceSessions(t, s); len(got) != 1 {
		t.Fatalf("alice has sessions %v, want the one", got)
	}

	// Again from a new conversation, left for another page and come back to with Back.
	p.do("start a new conversation", chromedp.Click(chromedp.ID("new-session-button")))
	p.waitFor("the conversation is empty", `window.agentplaneChat.state().messages.length === 0 && !window.agentplaneChat.state().sessionId`)
	p.do("mark the page", chromedp.Evaluate[chromedp.Void](`window.bfcacheMark = 'chat'`))
	msg2 := "sent just before leaving"
	sid2, reply2 := leaveAfterSending(msg2, []string{sid}, func() {
		p.do("load another page", chromedp.Navigate(proxy.URL+"/console/sessions"))
		p.do("go back", chromedp.Evaluate[chromedp.Void](`history.back()`))
	})
	p.waitAcrossNavigation("the conversation comes back after Back", `window.agentplaneChat && window.agentplaneChat.state().connected &&
		window.agentplaneChat.state().messages.length === 2 && `+lastAssistantJS+`.status === 'done'`)
	t.Logf("Back restored the chat page from the back/forward cache: %v", evalIn[bool](p, `window.bfcacheMark === 'chat'`))
	assertConversationResumed(t, p, sid2, msg2, reply2)
	p.waitLastSeq(s, sid2)
}

// TestBrowserChatMessageThatNeverReachedTheServer: an earlier load of the page sent the first
// message of a new session and kept it (as the page does until the answer comes), but the
// server never got it. Reloaded after the server could have committed it, the page looks for
// the session, finds none, and shows the message as not sent — its text back in the message
// box, to send again — instead of a toast with the words lost.
func TestBrowserChatMessageThatNeverReachedTheServer(t *testing.T) {
	browser := newBrowser(t)
	s := startServer(t, "sqlite:"+filepath.Join(t.TempDir(), "a.db"))
	goAgent(t, s, "echo")
	p := openChat(t, browser, s.URL, "echo")
	evalIn[bool](p, `(localStorage.setItem('agentplane.chat.pendingNewSession:alice:echo',
		JSON.stringify({requestId: 'r-never-arrived', user: 'alice', agent: 'echo', sentAt: Date.now() - 25000, text: 'words worth keeping'})), true)`)
	p.do("reload", chromedp.Reload())
	p.waitConnected()
	p.waitFor("the message shown as not sent", `window.agentplaneChat.state().messages.length === 1 && window.agentplaneChat.state().messages[0].status === 'failed'`)
	st := p.state()
	if m := st.Messages[0]; m.Role != "user" || m.Text != "words worth keeping" || !strings.Contains(m.Detail, "never reached the server") {
		t.Fatalf("the page shows %+v", st.Messages)
	}
	if c := p.controls(); c.InputValue != "words worth keeping" || c.SendDisabled || c.InputDisabled {
		t.Fatalf("the message box after the lost message: %+v", c)
	}
	if left := evalIn[bool](p, `localStorage.getItem('agentplane.chat.pendingNewSession:alice:echo') !== null`); left {
		t.Fatal("the lost message is still kept as unanswered")
	}
	if got := aliceSessions(t, s); len(got) != 0 {
		t.Fatalf("alice has sessions %v", got)
	}

	// Sent again from the box, it starts the conversation.
	p.do("click Send", chromedp.Click(chromedp.ID("send-button")))
	p.waitFor("the reply", `window.agentplaneChat.state().messages.length === 3 && `+lastAssistantJS+`.status === 'done'`)
	if st := p.state(); st.Messages[1].Text != "words worth keeping" || st.Messages[1].Status != "sent" || st.SessionID == "" {
		t.Fatalf("after sending it again: %+v", st)
	}
}
