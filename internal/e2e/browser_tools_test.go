package e2e

// Browser tests of tool calls (issue 4): the demo agent of `serve --demo`
// asks the chat page to run the client tool client.now, which the page runs
// by itself, and asks for a human's approval of demo.transfer, which the
// user gives or refuses with the card's buttons.

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// toolCard mirrors an entry of window.agentplaneChat.state().tools.
type toolCard struct {
	ToolCallID string         `json:"toolCallId"`
	ToolName   string         `json:"toolName"`
	RunID      string         `json:"runId"`
	State      string         `json:"state"`
	Detail     string         `json:"detail"`
	OK         *bool          `json:"ok"`
	Result     map[string]any `json:"result"`
}

// approvalCard mirrors an entry of window.agentplaneChat.state().approvals.
type approvalCard struct {
	ApprovalID string `json:"approvalId"`
	ToolName   string `json:"toolName"`
	RunID      string `json:"runId"`
	State      string `json:"state"`
	Decision   string `json:"decision"`
	Detail     string `json:"detail"`
}

func (p *chatPage) tools() []toolCard {
	p.t.Helper()
	return evalIn[[]toolCard](p, `window.agentplaneChat.state().tools`)
}

func (p *chatPage) approvals() []approvalCard {
	p.t.Helper()
	return evalIn[[]approvalCard](p, `window.agentplaneChat.state().approvals`)
}

// startDemo starts `serve --demo` and waits until the demo agent and its
// tools are registered (the demo lines follow the listening line).
func startDemo(t *testing.T) *server {
	t.Helper()
	return startDemoOn(t, "sqlite:"+filepath.Join(t.TempDir(), "demo.db"), nil)
}

// startDemoOn is startDemo on the database dsn with extra environment.
func startDemoOn(t *testing.T, dsn string, env []string) *server {
	t.Helper()
	s := startServerEnv(t, dsn, env, "--demo")
	// "open the console:" is the demo's last startup line; waiting for an
	// earlier one raced the lines still being written after it.
	for deadline := time.Now().Add(15 * time.Second); !strings.Contains(s.output(), "open the console:"); {
		if time.Now().After(deadline) {
			t.Fatalf("the demo did not start:\n%s", s.output())
		}
		time.Sleep(20 * time.Millisecond)
	}
	return s
}

// pendingApprovalJS selects the approval card still waiting for a decision.
const pendingApprovalJS = `.msg.notice[data-kind="approval"][data-state="pending"]`

// TestBrowserClientToolAndApproval asks the demo agent for the time (the
// page runs client.now and the reply quotes what it answered) and for a
// transfer of 250 (the page shows an approval card; Approve lets the
// transfer through). A reload then rebuilds both cards as settled.
func TestBrowserClientToolAndApproval(t *testing.T) {
	browser := newBrowser(t)
	s := startDemo(t)
	p := openChat(t, browser, s.URL, "demo")

	prompts := evalIn[[]string](p, `Array.from(document.querySelectorAll('#suggestions button[data-prompt]:not([hidden])')).map(function (b) { return b.dataset.prompt; })`)
	if want := []string{"What's the weather in Paris?", "What time is it?", "Send 250 to Bob", "Look up order 1042", "What's the weather?"}; !slices.Equal(prompts, want) {
		t.Fatalf("the empty state suggests %q, want %q", prompts, want)
	}

	// The time: a suggestion sends at once; the page runs client.now itself.
	p.do("click the time suggestion", chromedp.Click(`#suggestions button[data-prompt="What time is it?"]`))
	p.waitAssistantStatus("done")
	tools := p.tools()
	if len(tools) != 1 || tools[0].ToolName != "client.now" || tools[0].State != "done" || tools[0].OK == nil || !*tools[0].OK {
		t.Fatalf("tool cards %+v\n%s", tools, p.describe())
	}
	iso, _ := tools[0].Result["iso"].(string)
	zone, _ := tools[0].Result["time_zone"].(string)
	when, err := time.Parse(time.RFC3339Nano, iso)
	if err != nil || zone == "" || time.Since(when).Abs() > time.Minute {
		t.Fatalf("client.now answered %v (%v)", tools[0].Result, err)
	}
	if ms, _ := tools[0].Result["epoch_ms"].(float64); int64(ms) != when.UnixMilli() {
		t.Fatalf("client.now: epoch_ms %v is not iso %s", tools[0].Result["epoch_ms"], iso)
	}
	st := p.state()
	reply := st.Messages[len(st.Messages)-1].Text
	// The model (the demo's fake upstream) answers with what the page's tool said.
	if !strings.Contains(reply, "iso: "+iso) || !strings.Contains(reply, "time_zone: "+zone) {
		t.Fatalf("the reply %q does not tell the page's answer %v", reply, tools[0].Result)
	}
	if got := transcriptReply(t, s, st.SessionID, 0); got != reply {
		t.Fatalf("transcript reply %q, page shows %q", got, reply)
	}
	card := evalIn[string](p, `document.querySelector('.msg.notice[data-kind="tool"] .status').textContent`)
	if !strings.HasPrefix(card, "done") {
		t.Fatalf("the tool card says %q", card)
	}
	p.waitFor("the run status line is cleared", `document.getElementById('run-status').hidden`)

	// The transfer: the card asks; the status line says whose turn it is.
	p.sendByClick("Send 250 to Bob")
	p.waitFor("the approval card shows", `!!document.querySelector('`+pendingApprovalJS+`')`)
	p.waitFor("the header says the run waits for an approval", `!document.getElementById('run-status').hidden && document.getElementById('run-status').textContent === 'waiting for your approval'`)
	text := evalIn[string](p, `document.querySelector('`+pendingApprovalJS+` .text').textContent`)
	if !strings.Contains(text, "demo.transfer") {
		t.Fatalf("the approval card says %q", text)
	}
	if c := p.controls(); !c.InputDisabled || !c.SendDisabled {
		t.Fatalf("composer open while the run waits: %+v", c)
	}
	p.do("give a reason and approve",
		chromedp.SendKeys(pendingApprovalJS+` [data-testid="approval-reason"]`, "fine by me"),
		chromedp.Click(pendingApprovalJS+` [data-testid="approve-button"]`),
	)
	p.waitAssistantStatus("done")
	aps := p.approvals()
	if len(aps) != 1 || aps[0].ToolName != "demo.transfer" || aps[0].State != "approved" || aps[0].Decision != "approve" {
		t.Fatalf("approval cards %+v", aps)
	}
	st = p.state()
	if reply := st.Messages[len(st.Messages)-1].Text; !strings.Contains(reply, "amount: 250") || !strings.Contains(reply, "to: Bob") || !strings.Contains(reply, "status: sent") {
		t.Fatalf("the transfer reply %q", reply)
	}
	if n := evalIn[int](p, `document.querySelectorAll('.msg.notice[data-kind="approval"] button:not([disabled])').length`); n != 0 {
		t.Fatalf("%d approval buttons still enabled", n)
	}
	p.screenshot("tools.png")

	// Reload: the replay rebuilds both cards as settled, with nothing to click.
	p.do("reload", chromedp.Reload())
	p.waitConnected()
	p.waitFor("the conversation is rebuilt", `window.agentplaneChat.state().messages.length === 4 && `+lastAssistantJS+`.status === 'done'`)
	p.waitFor("the cards are rebuilt settled", `(function () { var s = window.agentplaneChat.state(); return s.tools.length === 1 && s.tools[0].state === 'done' && s.approvals.length === 1 && s.approvals[0].state === 'approved'; })()`)
	if n := evalIn[int](p, `document.querySelectorAll('.msg.notice button:not([disabled]), .msg.notice .actions:not([hidden])').length`); n != 0 {
		t.Fatalf("after reload %d card controls are live\n%s", n, p.describe())
	}
}

// TestBrowserApprovalReject refuses the transfer: the agent says so, and the
// card shows the rejection.
func TestBrowserApprovalReject(t *testing.T) {
	browser := newBrowser(t)
	s := startDemo(t)
	p := openChat(t, browser, s.URL, "demo")

	p.sendByClick("Send 250 to Bob")
	p.waitFor("the approval card shows", `!!document.querySelector('`+pendingApprovalJS+`')`)
	p.do("give a reason and reject",
		chromedp.SendKeys(pendingApprovalJS+` [data-testid="approval-reason"]`, "not today"),
		chromedp.Click(pendingApprovalJS+` [data-testid="reject-button"]`),
	)
	p.waitAssistantStatus("done")
	aps := p.approvals()
	if len(aps) != 1 || aps[0].State != "rejected" || aps[0].Decision != "reject" || aps[0].Detail != "rejected — not today" {
		t.Fatalf("approval cards %+v", aps)
	}
	st := p.state()
	reply := st.Messages[len(st.Messages)-1].Text
	if !strings.Contains(reply, "error.code: rejected") || strings.Contains(reply, "status: sent") {
		t.Fatalf("the reply to a rejected transfer: %q", reply)
	}
	status := evalIn[string](p, `document.querySelector('.msg.notice[data-kind="approval"] .status').textContent`)
	if status != "rejected — not today" {
		t.Fatalf("the card says %q", status)
	}
	// The session goes on.
	p.sendByEnter("What time is it?")
	p.waitFor("the next reply finishes", `window.agentplaneChat.state().messages.length === 4 && `+lastAssistantJS+`.status === 'done'`)
}

// TestBrowserReloadWhileApprovalPending (issue 8 item 15): after a reload the
// server re-sends the pending approval while it replays the session, in
// either order; the page rebuilt the run from whichever came first and lost
// the user's own message. Each reload must show the message, then the
// approval card still pending, and approving from the rebuilt page works.
func TestBrowserReloadWhileApprovalPending(t *testing.T) {
	browser := newBrowser(t)
	s := startDemo(t)
	p := openChat(t, browser, s.URL, "demo")

	p.sendByClick("Send 250 to Bob")
	p.waitFor("the approval card shows", `!!document.querySelector('`+pendingApprovalJS+`')`)

	// The order the page shows: each run's user message, its cards, its reply.
	const orderJS = `Array.from(document.querySelectorAll('#messages .msg')).map(function (e) {
		return e.classList.contains('user') ? 'user' : e.classList.contains('assistant') ? 'assistant' : 'card:' + e.dataset.kind; }).join(',')`
	// The two orders race on the server: reload a few times to meet both.
	for i := range 5 {
		p.do("reload", chromedp.Reload())
		p.waitConnected()
		p.waitFor("the conversation is rebuilt with the pending card", `(function () { var s = window.agentplaneChat.state();
			return s.approvals.length === 1 && s.approvals[0].state === 'pending' && s.messages.length === 2; })()`)
		st := p.state()
		if st.Messages[0].Role != "user" || st.Messages[0].Text != "Send 250 to Bob" || st.Messages[1].Role != "assistant" {
			t.Fatalf("reload %d: messages %+v\n%s", i+1, st.Messages, p.describe())
		}
		if order := evalIn[string](p, orderJS); order != "user,card:approval,assistant" {
			t.Fatalf("reload %d: the page shows %s", i+1, order)
		}
		if n := evalIn[int](p, `document.querySelectorAll('.msg.notice[data-kind="approval"]').length`); n != 1 {
			t.Fatalf("reload %d: %d approval cards", i+1, n)
		}
	}
	// A re-send held back for the replay is not shown a second time later.
	time.Sleep(2 * time.Second)
	if n := len(p.approvals()); n != 1 {
		t.Fatalf("%d approval cards after the grace", n)
	}

	p.do("approve", chromedp.Click(pendingApprovalJS+` [data-testid="approve-button"]`))
	p.waitAssistantStatus("done")
	aps := p.approvals()
	if len(aps) != 1 || aps[0].State != "approved" {
		t.Fatalf("approval cards %+v", aps)
	}
	st := p.state()
	if reply := st.Messages[len(st.Messages)-1].Text; !strings.Contains(reply, "status: sent") || st.Messages[0].Text != "Send 250 to Bob" {
		t.Fatalf("after approving: %+v", st.Messages)
	}
}
