package e2e

// Browser test of a new session's first message queued under the global run cap (the chat
// audit): the page learns a new session's id from the run_started answering its first message,
// which a queued run gets only once admitted; until then the page showed nothing but
// "sending…" — no session, nothing to cancel.

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// TestBrowserChatFirstMessageQueued holds the server's only run slot (max_active_runs: 1) with
// bob's run, then sends the first message of a new chat: the page opens the session while the
// run waits, shows it queued and lets it be cancelled (it never starts); the conversation then
// goes on in that session once the slot is free, and a reload shows every message, the
// cancelled ones' too.
func TestBrowserChatFirstMessageQueued(t *testing.T) {
	browser := newBrowser(t)
	s := startServerEnv(t, "sqlite:"+filepath.Join(t.TempDir(), "a.db"), writeConfig(t, "limits: {max_active_runs: 1}\n"))
	ga := startGateAgent(t, s, "gate")
	bob := dial(t, s, "bob", "bob-key")
	held := sv(bob.invoke("gate", "hold"), "run_id")
	ga.next(t)
	p := openChat(t, browser, s.URL, "gate")

	p.sendByClick("wait your turn")
	p.waitFor("the first message's run is shown queued in its session", `window.agentplaneChat.state().sessionId &&
		window.agentplaneChat.state().messages.length === 2 && `+lastAssistantJS+`.detail === 'queued — next in line'`)
	st := p.state()
	sid := st.SessionID
	if got := aliceSessions(t, s); len(got) != 1 || got[0] != sid {
		t.Fatalf("the page opened session %q; alice has %v", sid, got)
	}
	if st.Messages[0].Text != "wait your turn" || st.Messages[0].Status != "sent" || st.Messages[1].Status != "running" || st.ActiveRunID == "" {
		t.Fatalf("the page shows %+v", st)
	}
	if status := runStatus(t, s, st.ActiveRunID); status != "QUEUED" {
		t.Fatalf("the run is %s, want QUEUED", status)
	}
	if b := p.bubbles(); len(b) != 2 || !strings.Contains(b[1].StatusText, "queued") || !b[1].Visible {
		t.Fatalf("bubbles %+v", b)
	}
	if h := evalIn[string](p, `location.hash`); !strings.Contains(h, "session="+sid) {
		t.Fatalf("the URL fragment %q does not remember session %s", h, sid)
	}
	if left := evalIn[bool](p, `localStorage.getItem('agentplane.chat.pendingNewSession:alice:gate') !== null`); left {
		t.Fatal("the first message is still kept as unanswered")
	}

	// Cancelled while queued: never started, and the input is free again.
	if c := p.controls(); c.CancelDisabled || !c.SendDisabled {
		t.Fatalf("controls while queued: %+v", c)
	}
	assertHeaderQueued(t, p)
	p.do("click Cancel", chromedp.Click(chromedp.ID("cancel-button")))
	p.waitAssistantStatus("cancelled")
	if status := runStatus(t, s, st.ActiveRunID); status != "CANCELLED" {
		t.Fatalf("the run is %s, want CANCELLED", status)
	}
	ga.noneStarted(t, 300*time.Millisecond)

	// In the session now open, the next message is queued too: its QUEUED confirms it (not
	// "sending…"), and cancelled while queued it frees the message box, no reload needed.
	p.sendByClick("still waiting")
	p.waitFor("the second message's run is shown queued", `window.agentplaneChat.state().messages.length === 4 && `+lastAssistantJS+`.detail === 'queued — next in line'`)
	st = p.state()
	if st.Messages[2].Text != "still waiting" || st.Messages[2].Status != "sent" || st.ActiveRunID == "" {
		t.Fatalf("the page shows %+v", st)
	}
	if c := p.controls(); c.CancelDisabled || !c.SendDisabled {
		t.Fatalf("controls while queued: %+v", c)
	}
	assertHeaderQueued(t, p)
	p.do("click Cancel", chromedp.Click(chromedp.ID("cancel-button")))
	p.waitAssistantStatus("cancelled")
	if h := evalIn[bool](p, `document.getElementById('run-status').hidden`); !h {
		t.Fatal("the header still shows a run status after the queued run was cancelled")
	}
	if c := p.controls(); c.InputDisabled || c.SendDisabled {
		t.Fatalf("controls after the queued run was cancelled: %+v", c)
	}
	if status := runStatus(t, s, st.ActiveRunID); status != "CANCELLED" {
		t.Fatalf("the run is %s, want CANCELLED", status)
	}

	// With the slot free the conversation goes on in the same session.
	ga.release(held)
	p.sendByClick("now")
	ga.next(t)
	p.waitFor("the reply", `window.agentplaneChat.state().messages.length === 6 && `+lastAssistantJS+`.status === 'done'`)
	if got := p.state().SessionID; got != sid {
		t.Fatalf("the next message went to session %s, want %s", got, sid)
	}

	// Reloaded, the session shows each message above its reply: the two cancelled while
	// queued never had a run_started, and their text comes from their first QUEUED.
	p.do("reload", chromedp.Reload())
	p.waitConnected()
	p.waitFor("the conversation is rebuilt", `window.agentplaneChat.state().messages.length === 6 && `+lastAssistantJS+`.status === 'done'`)
	var got []string
	for _, m := range p.state().Messages {
		got = append(got, m.Role+":"+m.Status+":"+m.Text)
	}
	if want := []string{"user:sent:wait your turn", "assistant:cancelled:", "user:sent:still waiting", "assistant:cancelled:", "user:sent:now"}; strings.Join(got[:5], "|") != strings.Join(want, "|") || !strings.HasPrefix(got[5], "assistant:done:") {
		t.Fatalf("after the reload the page shows %q", got)
	}
}

// assertHeaderQueued: the header says the run waits for a slot, and where in line (the only
// one queued: next), not "running…" (the agent has not been invoked).
func assertHeaderQueued(t *testing.T, p *chatPage) {
	t.Helper()
	got := evalIn[[]string](p, `(() => { const e = document.getElementById('run-status'); return [String(e.hidden), e.textContent, e.dataset.phase]; })()`)
	if want := []string{"false", "queued — next in line", "queued"}; strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("the header's run status while queued is %q, want %q", got, want)
	}
}
