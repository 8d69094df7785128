package e2e

// Browser test of sub-agent cards (issue 9 deliverable 7): the demo planner
// of `serve --demo` in the chat page, in a real headless Chromium.

import (
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
)

// subAgentCard mirrors an entry of window.agentplaneChat.state().subAgents.
type subAgentCard struct {
	RunID       string `json:"runId"`
	ParentRunID string `json:"parentRunId"`
	AgentID     string `json:"agentId"`
	Input       string `json:"input"`
	State       string `json:"state"`
	Text        string `json:"text"`
	Partial     string `json:"partial"`
	Output      string `json:"output"`
	DurationMs  *int64 `json:"durationMs"`
	Detail      string `json:"detail"`
}

func (p *chatPage) subAgents() []subAgentCard {
	p.t.Helper()
	return evalIn[[]subAgentCard](p, `window.agentplaneChat.state().subAgents`)
}

// The order of the page's top-level items, and what each card holds.
const topOrderJS = `Array.from(document.querySelectorAll('#messages > .msg')).map(function (e) {
	return e.classList.contains('user') ? 'user' : e.classList.contains('assistant') ? 'assistant' : 'card:' + e.dataset.kind; }).join(',')`

const nestedApprovalJS = `.msg.subagent .sub-children > .msg.notice[data-kind="approval"]`

// TestBrowserPlannerSubAgents: the page suggests the planner's prompt; sent,
// each sub-agent call shows as a card above the planner's reply — the
// agent, its input, its output streaming in — and the payments agent's
// approval shows inside its card, with the header saying the run waits for
// it. Approved in the page, the transfer goes through, both cards end with
// their answer and duration and the planner's answer arrives. A reload
// rebuilds it all from the log, settled.
func TestBrowserPlannerSubAgents(t *testing.T) {
	browser := newBrowser(t)
	s := startDemo(t)
	p := openChat(t, browser, s.URL, "planner")

	prompts := evalIn[[]string](p, `Array.from(document.querySelectorAll('#suggestions button[data-prompt]:not([hidden])')).map(function (b) { return b.dataset.prompt; })`)
	const prompt = "Plan my trip: weather in Paris, then send 250 to Bob"
	if !slices.Equal(prompts, []string{prompt, "Convert currency for the trip"}) {
		t.Fatalf("the planner's page suggests %q", prompts)
	}
	p.do("click the planner's suggestion", chromedp.Click(`#suggestions button[data-prompt="`+prompt+`"]`))

	// The weather researcher's card streams its answer and ends; the payments
	// agent's card holds its pending approval.
	p.waitFor("the approval shows inside the payments card", `!!document.querySelector('`+nestedApprovalJS+`[data-state="pending"]')`)
	p.waitFor("the header says the run waits for the approval", `document.getElementById('run-status').textContent === 'waiting for your approval'`)
	subs := p.subAgents()
	if len(subs) != 2 || subs[0].AgentID != "weather" || subs[0].Input != "Plan my trip: weather in Paris" || subs[0].State != "done" ||
		!strings.Contains(subs[0].Partial, "city: Paris") || subs[0].DurationMs == nil ||
		subs[1].AgentID != "payments" || subs[1].Input != "send 250 to Bob" || subs[1].State != "running" {
		t.Fatalf("sub-agent cards %+v\n%s", subs, p.describe())
	}
	// What the payments agent streamed so far is on its card while it waits.
	p.waitFor("the payments card shows its partial output", `(function () { var b = window.agentplaneChat.state().subAgents[1]; return b.partial.indexOf('approval') >= 0; })()`)
	paymentsRun := subs[1].RunID
	if owner := evalIn[string](p, `document.querySelector('`+nestedApprovalJS+`').closest('.msg.subagent').dataset.runId`); owner != paymentsRun {
		t.Fatalf("the approval sits in the card of %s, want %s", owner, paymentsRun)
	}
	if text := evalIn[string](p, `document.querySelector('`+nestedApprovalJS+` .text').textContent`); !strings.Contains(text, "demo.transfer") {
		t.Fatalf("the nested approval says %q", text)
	}
	card := evalIn[string](p, `(function () { var c = document.querySelector('.msg.subagent[data-run-id="`+paymentsRun+`"]');
		return c.querySelector('.sub-agent').textContent + '|' + c.querySelector('.sub-input').textContent; })()`)
	if card != "payments|“send 250 to Bob”" {
		t.Fatalf("the payments card's summary says %q", card)
	}
	if order := evalIn[string](p, topOrderJS); order != "user,card:subagent,card:subagent,assistant" {
		t.Fatalf("the page shows %s", order)
	}
	p.screenshot("planner-approval.png")

	p.do("approve inside the card", chromedp.Click(nestedApprovalJS+`[data-state="pending"] [data-testid="approve-button"]`))
	p.waitAssistantStatus("done")
	st := p.state()
	reply := st.Messages[len(st.Messages)-1].Text
	for _, want := range []string{"Tool results:", "call_weather: Tool result: city: Paris", "call_payments:", "status: sent"} {
		if !strings.Contains(reply, want) {
			t.Fatalf("the planner's answer %q lacks %q", reply, want)
		}
	}
	duration := regexp.MustCompile(`^done · .*\d+(\.\d+)? (ms|s)$`)
	for _, b := range p.subAgents() {
		if b.State != "done" || b.Output == "" || !duration.MatchString(b.Detail) {
			t.Errorf("card %+v", b)
		}
	}
	if aps := p.approvals(); len(aps) != 1 || aps[0].State != "approved" || aps[0].RunID != paymentsRun {
		t.Fatalf("approvals %+v", aps)
	}
	if out := evalIn[string](p, `document.querySelector('.msg.subagent[data-run-id="`+paymentsRun+`"] .sub-text').textContent`); !strings.Contains(out, "status: sent") {
		t.Fatalf("the payments card shows %q", out)
	}
	p.waitFor("the run status line is cleared", `document.getElementById('run-status').hidden`)
	p.screenshot("planner-done.png")

	// Reload: the replay rebuilds the cards, the nested approval settled, nothing to click.
	p.do("reload", chromedp.Reload())
	p.waitConnected()
	p.waitFor("the conversation is rebuilt", `window.agentplaneChat.state().messages.length === 2 && `+lastAssistantJS+`.status === 'done'`)
	p.waitFor("the cards are rebuilt settled", `(function () { var s = window.agentplaneChat.state();
		return s.subAgents.length === 2 && s.subAgents.every(function (b) { return b.state === 'done'; }) && s.approvals.length === 1 && s.approvals[0].state === 'approved'; })()`)
	if order := evalIn[string](p, topOrderJS); order != "user,card:subagent,card:subagent,assistant" {
		t.Fatalf("after reload the page shows %s", order)
	}
	if owner := evalIn[string](p, `document.querySelector('`+nestedApprovalJS+`').closest('.msg.subagent').dataset.runId`); owner != paymentsRun {
		t.Fatalf("after reload the approval sits in the card of %s", owner)
	}
	if n := evalIn[int](p, `document.querySelectorAll('.msg.notice button:not([disabled]), .msg.notice .actions:not([hidden])').length`); n != 0 {
		t.Fatalf("after reload %d card controls are live\n%s", n, p.describe())
	}
	if got := p.state().Messages[1].Text; got != reply {
		t.Fatalf("after reload the answer is %q, was %q", got, reply)
	}
}
