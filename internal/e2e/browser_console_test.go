package e2e

// Browser tests of the operator console (issue 11, internal/console/static/{console,timeline,
// pages,session,replay,boot}.js) in headless Chromium against the real binary: the session
// view's run tree and timeline, live following, replay, the approvals inbox, what a user key
// may open, and deep links that survive a reload. They read the page's own state through
// window.agentplaneConsole and check the DOM shows it.

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// openConsole opens a tab on the console at path and logs in with key through the form.
func openConsole(t *testing.T, browser context.Context, base, key, path string) *chatPage {
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
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("open tab: %v", err)
	}
	p.do("open the console", chromedp.Navigate(base+path))
	p.waitFor("the login form", `!document.getElementById('login').hidden`)
	p.do("log in",
		chromedp.SetValue(`#login-key`, key),
		chromedp.Click(`#login-submit`))
	p.waitFor("logged in", `document.getElementById('login').hidden && window.agentplaneConsole.auth() !== null`)
	t.Cleanup(p.assertNoExceptions)
	return p
}

// consoleState reads window.agentplaneConsole.state() into v.
func consoleState[T any](p *chatPage) T {
	p.t.Helper()
	return evalIn[T](p, `window.agentplaneConsole.state()`)
}

// timelineState mirrors the session view's state (Model.summary in timeline.js).
type timelineState struct {
	SessionID string         `json:"sessionId"`
	Live      string         `json:"live"`
	LastSeq   int64          `json:"lastSeq"`
	Events    int64          `json:"events"`
	Rows      int            `json:"rows"`
	Rendered  int            `json:"rendered"`
	Error     string         `json:"error"`
	Counts    map[string]int `json:"counts"`
	Runs      []struct {
		RunID    string  `json:"runId"`
		AgentID  string  `json:"agentId"`
		Status   string  `json:"status"`
		Depth    int     `json:"depth"`
		LLMCalls int     `json:"llmCalls"`
		Cost     float64 `json:"cost"`
	} `json:"runs"`
	LLM []struct {
		Model            string  `json:"model"`
		PromptTokens     int64   `json:"promptTokens"`
		CompletionTokens int64   `json:"completionTokens"`
		Cost             float64 `json:"cost"`
		TTFTMs           float64 `json:"ttftMs"`
		LatencyMs        float64 `json:"latencyMs"`
		Done             bool    `json:"done"`
	} `json:"llm"`
	Tools []struct {
		ToolName string `json:"toolName"`
		State    string `json:"state"`
		Policy   *struct {
			Decision string `json:"decision"`
			Rule     string `json:"rule"`
		} `json:"policy"`
		Approval *struct {
			Outcome   string  `json:"outcome"`
			DecidedBy string  `json:"decidedBy"`
			Reason    string  `json:"reason"`
			WaitedMs  float64 `json:"waitedMs"`
		} `json:"approval"`
		DurationMs float64 `json:"durationMs"`
	} `json:"tools"`
}

// chipText is the text of a field chip of the first timeline row of kind.
func chipText(p *chatPage, kind, field string) string {
	p.t.Helper()
	return evalIn[string](p, fmt.Sprintf(`(function () { var c = document.querySelector('.tl-row[data-kind=%q] [data-field=%q]'); return c ? c.textContent : ''; })()`, kind, field))
}

// demoTransfer runs "Send 250 to Bob" in the chat page and approves it there.
func demoTransfer(p *chatPage) {
	p.t.Helper()
	p.sendByClick("Send 250 to Bob")
	p.waitFor("the approval card shows", `!!document.querySelector('`+pendingApprovalJS+`')`)
	p.do("approve", chromedp.Click(pendingApprovalJS+` [data-testid="approve-button"]`))
	p.waitAssistantStatus("done")
}

// TestBrowserConsoleSessionView: the session view of a demo run shows the run, its LLM calls
// with model, tokens, cost, TTFT and latency, and the tool call with its policy decision and
// rule, the approval (who decided, how long it waited) and its result; any row opens to its
// events' JSON; the URL survives a reload; the sessions list links to it.
func TestBrowserConsoleSessionView(t *testing.T) {
	browser := newBrowser(t)
	s := startDemo(t)
	chat := openChat(t, browser, s.URL, "demo")
	demoTransfer(chat)
	sid := chat.state().SessionID

	// From the sessions list, as an operator finds it.
	p := openConsole(t, browser, s.URL, adminKey, "/console/sessions")
	p.waitFor("the session is listed", `!!document.querySelector('[data-testid="sessions"] tr[data-session-id="`+sid+`"]')`)
	p.do("open the session", chromedp.Click(`tr[data-session-id="`+sid+`"] a`))
	p.waitFor("the session view", `window.agentplaneConsole.page() === 'session' && location.pathname === '/console/sessions/`+sid+`'`)

	check := func(when string) {
		t.Helper()
		p.waitFor("the run, its LLM calls and its tool call "+when, `(function () { var s = window.agentplaneConsole.state();
			return s && s.live === 'live' && s.tools.length === 1 && s.tools[0].state === 'SUCCEEDED' && s.llm.length >= 2 && s.llm.every(function (c) { return c.done; }) &&
				s.runs.length === 1 && s.runs[0].status === 'DONE' && document.querySelectorAll('[data-testid="run-tree"] li[data-status="DONE"]').length === 1; })()`)
		st := consoleState[timelineState](p)
		if st.Error != "" || st.SessionID != sid || st.Events != st.LastSeq || st.Rendered == 0 {
			t.Fatalf("%s: session view %+v", when, st)
		}
		for _, c := range st.LLM {
			if c.Model != "demo-llm" || c.PromptTokens <= 0 || c.CompletionTokens <= 0 || c.Cost <= 0 || c.TTFTMs <= 0 || c.LatencyMs < c.TTFTMs {
				t.Fatalf("%s: LLM call %+v", when, c)
			}
		}
		tool := st.Tools[0]
		if tool.ToolName != "demo.transfer" || tool.Policy == nil || tool.Policy.Decision != "require_approval" || tool.Policy.Rule == "" ||
			tool.Approval == nil || tool.Approval.Outcome != "approved" || tool.Approval.DecidedBy == "" || tool.Approval.WaitedMs <= 0 || tool.DurationMs <= 0 {
			t.Fatalf("%s: tool call %+v (policy %+v, approval %+v)", when, tool, tool.Policy, tool.Approval)
		}
		if r := st.Runs[0]; r.AgentID != "demo" || r.LLMCalls != len(st.LLM) || r.Cost <= 0 {
			t.Fatalf("%s: run %+v", when, r)
		}
		// What the DOM shows.
		for field, want := range map[string]string{"model": "demo-llm", "outcome": "ok"} {
			if got := chipText(p, "llm", field); !strings.Contains(got, want) {
				t.Errorf("%s: the LLM row's %s shows %q", when, field, got)
			}
		}
		for _, field := range []string{"prompt_tokens", "completion_tokens", "cost", "ttft", "latency"} {
			if got := chipText(p, "llm", field); got == "" || strings.HasSuffix(got, "—") {
				t.Errorf("%s: the LLM row's %s shows %q", when, field, got)
			}
		}
		if got := chipText(p, "tool", "policy"); !strings.Contains(got, "require_approval") || !strings.Contains(got, "rule") {
			t.Errorf("%s: the tool row's policy shows %q", when, got)
		}
		if got := chipText(p, "tool", "approval"); !strings.Contains(got, "approved by") || !strings.Contains(got, "after") {
			t.Errorf("%s: the tool row's approval shows %q", when, got)
		}
		if got := chipText(p, "tool", "state"); got != "SUCCEEDED" {
			t.Errorf("%s: the tool row's state shows %q", when, got)
		}
		if got := evalIn[int](p, `document.querySelectorAll('[data-testid="run-tree"] li[data-status="DONE"]').length`); got != 1 {
			t.Errorf("%s: the run tree shows %d finished runs", when, got)
		}
	}
	check("after navigating")

	p.screenshot("console-session.png")

	// Any row opens to its events.
	p.do("open the tool row's JSON", chromedp.Click(`.tl-row[data-kind="tool"] details.tl-json summary`))
	p.waitFor("the tool row's events", `(function () { var t = document.querySelector('.tl-row[data-kind="tool"] .tl-json-body').textContent;
		return t.indexOf('"policy_decision"') >= 0 && t.indexOf('"approval_decision"') >= 0 && t.indexOf('"tool_result"') >= 0; })()`)
	p.do("open an output row's JSON", chromedp.Click(`.tl-row[data-kind="output"] details.tl-json summary`))
	p.waitFor("the output row's deltas, fetched", `document.querySelector('.tl-row[data-kind="output"] .tl-json-body').textContent.indexOf('"agent_stream_delta"') >= 0`)

	// Deep link: a reload lands on the same view.
	p.do("reload", chromedp.Reload())
	check("after a reload")
	if got := evalIn[string](p, `location.pathname`); got != "/console/sessions/"+sid {
		t.Fatalf("the reload moved to %s", got)
	}
	// The browser's back button returns to the list.
	p.do("go back", chromedp.NavigateBack())
	p.waitFor("the sessions list", `window.agentplaneConsole.page() === 'sessions'`)
}

// TestBrowserConsoleLiveRun: a run that starts while the session view is open appears as it
// streams (its output grows while it runs), the summary line (events, last event) keeping up,
// and a dropped connection resumes after the last seq: every event shown once, none missing.
func TestBrowserConsoleLiveRun(t *testing.T) {
	browser := newBrowser(t)
	s := startServer(t, "sqlite:"+t.TempDir()+"/a.db")
	goAgent(t, s, "echo")
	sid, _ := chat(t, s, "alice", "alice-key", "echo", "", "first")
	proxy := newCutProxy(t, strings.TrimPrefix(s.URL, "http://"))
	p := openConsole(t, browser, proxy.URL, adminKey, "/console/sessions/"+sid)
	p.waitFor("the session is followed live", `window.agentplaneConsole.state().live === 'live' && window.agentplaneConsole.state().runs.length === 1`)
	first := s.events("/v1/sessions/" + sid + "/events")
	p.waitFor("the summary line counts the first run's events", fmt.Sprintf(`window.agentplaneConsole.state().summary.events === %d`, seqOf(first[len(first)-1])))

	c := dial(t, s, "alice", "alice-key")
	c.send(map[string]any{"type": "agent_invoke", "request_id": "r", "session_id": sid, "agent_id": "echo", "message": map[string]any{"role": "user", "content": words(60)}})
	// Streaming: the second run is running and its output already shows, in the DOM too.
	p.waitFor("the new run streams in", `(function () { var s = window.agentplaneConsole.state(); var r = s.runs[1];
		var out = document.querySelectorAll('.tl-row[data-kind="output"][data-run-id="' + (r && r.runId) + '"] .tl-text');
		return r && r.status === 'RUNNING' && out.length === 1 && out[0].textContent.indexOf('word3 ') >= 0; })()`)
	// The summary line keeps up with the timeline while the run streams.
	p.waitFor("the summary line counts the new run's events", fmt.Sprintf(`(function () { var s = window.agentplaneConsole.state();
		return s.summary.events > %d && s.summary.events === s.lastSeq && document.querySelector('[data-testid="session-events"]').textContent === String(s.lastSeq)
			&& s.summary.agents.join() === 'echo'; })()`, seqOf(first[len(first)-1])))
	proxy.cut()
	p.waitFor("the page notices the lost stream", `window.agentplaneConsole.state().live === 'reconnecting'`)
	time.Sleep(time.Second)
	proxy.restore()
	if msgs := c.untilEnd(); msgs[len(msgs)-1]["type"] != "done" {
		t.Fatalf("the run ended %v", msgs[len(msgs)-1])
	}
	p.waitFor("the run ends in the view", `(function () { var s = window.agentplaneConsole.state(); return s.live === 'live' && s.runs.length === 2 && s.runs[1].status === 'DONE'; })()`)
	all := s.events("/v1/sessions/" + sid + "/events")
	want := seqOf(all[len(all)-1])
	p.waitFor("every event is in", fmt.Sprintf(`window.agentplaneConsole.state().lastSeq === %d`, want))
	st := consoleState[timelineState](p)
	if st.Events != want {
		t.Fatalf("the view applied %d events, the session has %d (each exactly once)", st.Events, want)
	}
	// The summary line: every event counted, the last one's time.
	lastTS := int64(all[len(all)-1]["ts"].(float64))
	p.waitFor("the summary line ends with the session", fmt.Sprintf(`(function () { var s = window.agentplaneConsole.state();
		var last = document.querySelector('[data-testid="session-last-event"]');
		return s.summary.events === %d && s.summary.lastEventAt === %d && document.querySelector('[data-testid="session-events"]').textContent === '%d'
			&& last.dataset.ts === '%d' && last.textContent === AP.fmtTime(%d); })()`, want, lastTS, want, lastTS, lastTS))
	reply := transcriptReply(t, s, sid, 1)
	out := evalIn[string](p, `(function () { var s = window.agentplaneConsole.state(); var o = document.querySelectorAll('.tl-row[data-kind="output"][data-run-id="' + s.runs[1].runId + '"] .tl-text'); return o.length === 1 ? o[0].textContent : ''; })()`)
	if out != reply {
		t.Fatalf("the view shows the output %q, the transcript %q", out, reply)
	}
}

// TestBrowserConsoleReplay: a replay at instant speed ends with the same chat as the live chat
// page, cards and the client tool's answer included; 1× plays on a clock; seeking forward and
// back lands on the seq asked for.
func TestBrowserConsoleReplay(t *testing.T) {
	browser := newBrowser(t)
	s := startDemo(t)
	chat := openChat(t, browser, s.URL, "demo")
	chat.sendByClick("What's the weather in Paris?")
	chat.waitAssistantStatus("done")
	chat.sendByClick("What time is it?") // the page runs client.now
	chat.waitFor("the second reply", `window.agentplaneChat.state().messages.length === 4 && `+lastAssistantJS+`.status === 'done'`)
	demoTransfer(chat)
	sid := chat.state().SessionID
	live := chat.state().Messages
	last := chat.waitLastSeq(s, sid)
	liveTree := evalIn[[]chatItem](chat, chatTreeJS("#messages"))

	p := openConsole(t, browser, s.URL, adminKey, "/console/sessions/"+sid+"/replay?speed=instant&autoplay=1")
	p.waitFor("the replay finishes", `(function () { var s = window.agentplaneConsole.state(); return s && s.finished && s.started; })()`)
	type replayState struct {
		Pos      int64     `json:"pos"`
		LastSeq  int64     `json:"lastSeq"`
		Finished bool      `json:"finished"`
		Playing  bool      `json:"playing"`
		Chat     chatState `json:"chat"`
		Timeline struct {
			Rows    int   `json:"rows"`
			LastSeq int64 `json:"lastSeq"`
		} `json:"timeline"`
	}
	all := s.events("/v1/sessions/" + sid + "/events")
	lastEvent := seqOf(all[len(all)-1])
	st := consoleState[replayState](p)
	if st.Pos != lastEvent || st.Timeline.LastSeq != lastEvent || st.Chat.LastSeq != last {
		t.Fatalf("replay ended at seq %d (timeline %d, chat %d), the log at %d (last client-facing %d)", st.Pos, st.Timeline.LastSeq, st.Chat.LastSeq, lastEvent, last)
	}
	a, _ := json.Marshal(live)
	b, _ := json.Marshal(st.Chat.Messages)
	if string(a) != string(b) {
		t.Fatalf("the replay's chat differs from the live page's:\nlive   %s\nreplay %s", a, b)
	}
	if n := evalIn[int](p, `document.querySelectorAll('[data-testid="replay-chat"] .msg.user, [data-testid="replay-chat"] .msg.assistant').length`); n != len(live) {
		t.Fatalf("the replay's chat pane shows %d bubbles, want %d", n, len(live))
	}
	// What the pane draws — cards too, the client tool's answer included — is what the chat page drew.
	a, _ = json.MarshalIndent(liveTree, "", "  ")
	b, _ = json.MarshalIndent(evalIn[[]chatItem](p, chatTreeJS(`[data-testid="replay-chat"]`)), "", "  ")
	if string(a) != string(b) {
		t.Fatalf("the replay's chat pane differs from the chat page's:\nchat page %s\nreplay    %s", a, b)
	}
	if !strings.Contains(string(b), `"kind": "card:tool"`) || !strings.Contains(string(b), `epoch_ms`) {
		t.Fatalf("the replay's chat pane lacks the client tool's card and answer: %s", b)
	}
	p.screenshot("console-replay.png")

	// Seek back to the start of the last turn, then to the end: the chat follows.
	var lastStart int64
	for _, e := range all {
		if e["type"] == "run_started" {
			lastStart = seqOf(e)
		}
	}
	seek := func(seq int64) {
		t.Helper()
		p.do(fmt.Sprintf("seek to %d", seq), chromedp.Evaluate[chromedp.Void](fmt.Sprintf(`(function () { var s = document.querySelector('[data-testid="seek"]'); s.value = '%d'; s.dispatchEvent(new Event('change')); })()`, seq)))
		// Settled: the seek's page is read and drawn, so nothing moves under the next click.
		p.waitFor(fmt.Sprintf("the replay at seq %d", seq), fmt.Sprintf(`(function () { var s = window.agentplaneConsole.state(); return s.pos === %d && !s.playing && !s.seeking; })()`, seq))
		p.do("let the page settle", chromedp.Evaluate[chromedp.Void](`new Promise(function (r) { requestAnimationFrame(function () { requestAnimationFrame(r); }); })`, chromedp.EvalAwaitPromise))
	}
	seek(lastStart - 1)
	if st := consoleState[replayState](p); len(st.Chat.Messages) != len(live)-2 {
		t.Fatalf("before the last turn the replay shows %+v", st.Chat.Messages)
	}
	seek(lastEvent)
	if st := consoleState[replayState](p); len(st.Chat.Messages) != len(live) {
		t.Fatalf("at the end after seeking the replay shows %+v", st.Chat.Messages)
	}

	// 1×: a click plays from the start on the log's clock.
	p.do("1×", chromedp.Click(`[data-testid="speed-1"]`))
	seek(0)
	p.do("play", chromedp.Click(`[data-testid="play"]`))
	p.waitFor("1× plays", `(function () { var s = window.agentplaneConsole.state(); return s.playing && s.pos > 0; })()`)
	p.do("pause", chromedp.Click(`[data-testid="play"]`))
	p.waitFor("paused", `!window.agentplaneConsole.state().playing`)
	if got := evalIn[string](p, `document.querySelector('[data-testid="replay-pos"]').textContent`); !strings.Contains(got, "paused") {
		t.Fatalf("position line %q", got)
	}
}

// TestBrowserConsoleApprovalsInbox: a pending approval waits in the inbox; deciding it there
// with a reason lets the run continue.
func TestBrowserConsoleApprovalsInbox(t *testing.T) {
	browser := newBrowser(t)
	s := startDemo(t)
	c := dial(t, s, "alice", "alice-key")
	c.send(map[string]any{"type": "agent_invoke", "request_id": "r", "agent_id": "demo", "message": map[string]any{"role": "user", "content": "Send 250 to Bob"}})
	ar := c.readUntilAll("approval_required", isType("approval_required"))
	apID := sv(find(t, ar, "approval", isType("approval_required")), "approval_id")
	runID := sv(ar[0], "run_id")

	p := openConsole(t, browser, s.URL, adminKey, "/console/approvals")
	card := `[data-testid="approval"][data-approval-id="` + apID + `"]`
	p.waitFor("the pending approval", `!!document.querySelector('`+card+`') && window.agentplaneConsole.state().pending.indexOf('`+apID+`') === 0`)
	if text := evalIn[string](p, `document.querySelector('`+card+`').textContent`); !strings.Contains(text, "demo.transfer") || !strings.Contains(text, "250") {
		t.Fatalf("the card says %q", text)
	}
	p.do("approve with a reason",
		chromedp.SendKeys(card+` [data-testid="approval-reason"]`, "checked with Bob"),
		chromedp.Click(card+` [data-testid="approve-button"]`))
	if msgs := c.untilEnd(); msgs[len(msgs)-1]["type"] != "done" {
		t.Fatalf("the run ended %v", msgs[len(msgs)-1])
	}
	if st := runStatus(t, s, runID); st != "DONE" {
		t.Fatalf("run %s", st)
	}
	ap := approvalByID(t, s, "APPROVED", apID)
	if ap == nil || ap["reason"] != "checked with Bob" || ap["decided_by"] == "" {
		t.Fatalf("approval %v", ap)
	}
	p.waitFor("the decision is listed and nothing is pending", `window.agentplaneConsole.state().pending.length === 0 && !!document.querySelector('[data-testid="decided"] tr[data-approval-id="`+apID+`"][data-status="APPROVED"]')`)
	// Decided, the card has left Pending (it no longer counts down there).
	p.waitFor("the card is gone from Pending", `!document.querySelector('`+card+`') && !!document.querySelector('[data-testid="pending-none"]')`)
}

// TestBrowserConsoleApprovalsNarrow: at 1024×768 the approvals page, its Decided table full of
// long ids, arguments and reasons, fits the window: the page does not scroll sideways and no
// column is cut off. A user key with nothing decided sees an empty state, not a bare header;
// with the server gone the page says it cannot reach it.
func TestBrowserConsoleApprovalsNarrow(t *testing.T) {
	browser := newBrowser(t)
	s := startDemo(t)
	c := dial(t, s, "alice", "alice-key")
	for i, decision := range []string{"approve", "reject", "approve"} {
		c.send(map[string]any{"type": "agent_invoke", "request_id": fmt.Sprint("r", i), "agent_id": "demo", "message": map[string]any{"role": "user", "content": "Send 250 to Bob"}})
		ar := c.readUntilAll("approval_required", isType("approval_required"))
		m := find(t, ar, "approval", isType("approval_required"))
		c.send(map[string]any{"type": "approval_decision", "request_id": fmt.Sprint("d", i), "run_id": m["run_id"], "approval_id": m["approval_id"], "decision": decision,
			"reason": "checked with Bob on the phone; the invoice number matches the one in the contract"})
		c.untilEnd()
	}

	p := openConsole(t, browser, s.URL, adminKey, "/console/sessions")
	p.do("a 1024×768 window", chromedp.EmulateViewport(1024, 768))
	p.do("open the approvals", chromedp.Click(`#nav a[data-page="approvals"]`))
	p.waitFor("three decided approvals", `window.agentplaneConsole.page() === 'approvals' && window.agentplaneConsole.state().decided === 3 && document.querySelectorAll('[data-testid="decided"] tbody tr').length === 3`)
	type widths struct {
		Window, Page, Wrap, Table, LastColumnRight, WrapRight float64
	}
	w := evalIn[widths](p, `(function () { var t = document.querySelector('[data-testid="decided"]'), wrap = t.parentElement, th = t.querySelectorAll('th');
		return { Window: window.innerWidth, Page: document.documentElement.scrollWidth, Wrap: wrap.clientWidth, Table: t.scrollWidth,
			LastColumnRight: th[th.length - 1].getBoundingClientRect().right, WrapRight: wrap.getBoundingClientRect().right }; })()`)
	if w.Window != 1024 || w.Page > w.Window || w.Table > w.Wrap || w.LastColumnRight > w.WrapRight+1 {
		t.Fatalf("at 1024 px the approvals page is %+v", w)
	}
	p.screenshot("console-approvals-1024.png")
	for _, path := range []string{"sessions", "agents"} {
		p.do("open "+path, chromedp.Click(`#nav a[data-page="`+path+`"]`))
		p.waitFor(path, `window.agentplaneConsole.page() === '`+path+`' && window.agentplaneConsole.state().rows > 0`)
		if page := evalIn[float64](p, `document.documentElement.scrollWidth`); page > 1024 {
			t.Fatalf("at 1024 px the %s page is %v px wide", path, page)
		}
	}

	// Bob has decided nothing.
	u := openConsole(t, browser, s.URL, "bob:bob-key", "/console/approvals")
	u.waitFor("bob's empty inbox", `window.agentplaneConsole.page() === 'approvals' && !!document.querySelector('[data-testid="pending-none"]') && !!document.querySelector('[data-testid="decided"] tr.empty')`)
	if got := evalIn[string](u, `document.querySelector('[data-testid="decided"] tbody').textContent`); !strings.Contains(got, "None of your approvals") {
		t.Fatalf("bob's Decided table says %q", got)
	}

	// The server goes away: the next page says so in words.
	s.stop()
	p.do("open the approvals", chromedp.Click(`#nav a[data-page="approvals"]`))
	p.waitFor("the page says the server cannot be reached", `(function () { var e = document.querySelector('#view .error-box'); return !!e && e.textContent.indexOf('the server cannot be reached') >= 0; })()`)
	if got := evalIn[string](p, `document.getElementById('view').textContent`); strings.Contains(got, "TypeError") || strings.Contains(got, "Failed to fetch") {
		t.Fatalf("the page reads %q", got)
	}
}

// TestBrowserConsoleUserKey: a user key logs in as user:key, sees its own sessions only, and
// cannot open another user's session — in the console or through the API; admin pages are not
// offered to it. Deep links work after a reload.
func TestBrowserConsoleUserKey(t *testing.T) {
	browser := newBrowser(t)
	s := startServer(t, "sqlite:"+t.TempDir()+"/a.db")
	goAgent(t, s, "echo")
	aliceSID, _ := chat(t, s, "alice", "alice-key", "echo", "", "alice's secret")
	bobSID, _ := chat(t, s, "bob", "bob-key", "echo", "", "bob's own")

	p := openConsole(t, browser, s.URL, "bob:bob-key", "/console/sessions/"+aliceSID)
	p.waitFor("alice's session is refused", `window.agentplaneConsole.state() && window.agentplaneConsole.state().error === 'session_not_found'`)
	if got := evalIn[string](p, `document.querySelector('.error-box').textContent`); !strings.Contains(got, "No such session") {
		t.Fatalf("the page says %q", got)
	}
	if n := evalIn[int](p, `document.querySelectorAll('.tl-row').length`); n != 0 {
		t.Fatalf("alice's session shows %d rows to bob", n)
	}
	for _, path := range []string{"/v1/sessions/" + aliceSID + "/events", "/v1/sessions/" + aliceSID + "/events?follow=1"} {
		if code, body := s.call("GET", path, "bob-key", nil); code != http.StatusNotFound {
			t.Fatalf("the API gave bob %s: %d %v", path, code, body)
		}
	}
	if who := evalIn[string](p, `document.getElementById('whoami').textContent`); who != "user bob" {
		t.Fatalf("whoami shows %q", who)
	}
	if hidden := evalIn[bool](p, `document.querySelector('#nav a[data-page="usage"]').hidden && document.querySelector('#nav a[data-page="tools"]').hidden`); !hidden {
		t.Fatal("admin pages are offered to a user key")
	}

	// The list: bob's session only.
	p.do("open the sessions list", chromedp.Click(`#nav a[data-page="sessions"]`))
	p.waitFor("bob's sessions", `window.agentplaneConsole.page() === 'sessions' && window.agentplaneConsole.state().rows === 1 && !!document.querySelector('tr[data-session-id="`+bobSID+`"]')`)
	// A deep link to a filtered list survives a reload.
	p.do("search", chromedp.SetValue(`[data-testid="filter-q"]`, bobSID[:len(bobSID)-3]), chromedp.Click(`form.filters button[type="submit"]`))
	p.waitFor("the query in the URL", `location.search.indexOf('q=`+url.QueryEscape(bobSID[:len(bobSID)-3])+`') >= 0`)
	p.do("reload", chromedp.Reload())
	p.waitFor("the filtered list again", `window.agentplaneConsole.page() === 'sessions' && document.querySelector('[data-testid="filter-q"]').value === '`+bobSID[:len(bobSID)-3]+`' && window.agentplaneConsole.state().rows === 1`)
	// The admin-only page explains itself.
	p.do("open usage by URL", chromedp.Navigate(s.URL+"/console/usage"))
	p.waitFor("admin only", `document.querySelector('#view h1') && document.querySelector('#view h1').textContent === 'Admin only'`)
	// Bob's own session opens.
	p.do("open bob's session", chromedp.Navigate(s.URL+"/console/sessions/"+bobSID))
	p.waitFor("bob's session", `(function () { var s = window.agentplaneConsole.state(); return s && s.live === 'live' && s.runs.length === 1 && s.runs[0].status === 'DONE'; })()`)
}

// TestBrowserConsoleRegistryPages: agents (health, links, a remote A2A agent's card), tools
// (policy), MCP servers (the demo's), usage (the demo's LLM calls by agent, model and user).
func TestBrowserConsoleRegistryPages(t *testing.T) {
	browser := newBrowser(t)
	s := startDemo(t)
	chat(t, s, "alice", "alice-key", "demo", "", "What's the weather in Paris?")
	s.register("linked", "http://127.0.0.1:9/")
	if code, body := s.call("POST", "/v1/agents/register", adminKey, map[string]any{"agent_id": "linked", "endpoint": "http://127.0.0.1:9/", "linked_agents": []string{"demo"}}); code != 200 {
		t.Fatalf("re-register: %d %v", code, body)
	}

	p := openConsole(t, browser, s.URL, adminKey, "/console/agents")
	p.waitFor("the agents", `!!document.querySelector('[data-testid="agents"] tr[data-agent-id="linked"]') && !!document.querySelector('[data-testid="agents"] tr[data-agent-id="demo"][data-status="healthy"]')`)
	if got := evalIn[string](p, `document.querySelector('tr[data-agent-id="linked"]').textContent`); !strings.Contains(got, "demo") {
		t.Fatalf("the linked agent's row says %q", got)
	}
	// The demo's currency agent is a remote A2A agent: its A2A column shows so, with the card
	// stored at its registration (name, skills) and a link to where that card is.
	code, cur := s.call("GET", "/v1/agents/currency", adminKey, nil)
	card, _ := cur["a2a_card"].(map[string]any)
	if code != http.StatusOK || cur["protocol"] != "a2a" || card == nil {
		t.Fatalf("the currency agent: %d %v", code, cur)
	}
	p.waitFor("the remote agent's card", `(function () { var c = document.querySelector('tr[data-agent-id="currency"] [data-testid="a2a"]'); return !!c && c.dataset.a2a === 'remote' && !!c.querySelector('[data-testid="a2a-card-link"]'); })()`)
	cell := evalIn[string](p, `document.querySelector('tr[data-agent-id="currency"] [data-testid="a2a"]').textContent`)
	for _, want := range []string{"remote A2A agent", card["name"].(string), "skills: convert"} {
		if !strings.Contains(cell, want) {
			t.Fatalf("the currency agent's A2A column says %q, want %q in it", cell, want)
		}
	}
	if href := evalIn[string](p, `document.querySelector('tr[data-agent-id="currency"] [data-testid="a2a-card-link"]').href`); href != cur["endpoint"] {
		t.Fatalf("the card link goes to %q, the agent's card is at %v", href, cur["endpoint"])
	}
	// The demo agent is served over A2A here; the agent registered above takes no part.
	if got := evalIn[string](p, `(function () { var c = document.querySelector('tr[data-agent-id="demo"] [data-testid="a2a"]'); return c.dataset.a2a + '|' + c.querySelector('a').getAttribute('href'); })()`); got != "served|/a2a/demo/.well-known/agent-card.json" {
		t.Fatalf("the demo agent's A2A column: %q", got)
	}
	if got := evalIn[string](p, `document.querySelector('tr[data-agent-id="linked"] [data-testid="a2a"]').textContent`); got != "—" {
		t.Fatalf("the linked agent's A2A column says %q", got)
	}

	p.do("tools", chromedp.Click(`#nav a[data-page="tools"]`))
	p.waitFor("the tools", `window.agentplaneConsole.page() === 'tools' && !!document.querySelector('[data-testid="tools"] tr[data-tool="demo.transfer"]')`)
	if got := evalIn[string](p, `document.querySelector('tr[data-tool="demo.transfer"]').textContent`); !strings.Contains(got, "require_approval") {
		t.Fatalf("the transfer tool's row says %q", got)
	}

	p.do("MCP servers", chromedp.Click(`#nav a[data-page="mcp"]`))
	// serve --demo registers its MCP server (demo_mcp) through the admin API.
	p.waitFor("the demo's MCP server", `window.agentplaneConsole.page() === 'mcp' && window.agentplaneConsole.state().status === 'ok' && !!document.querySelector('[data-testid="mcp"] tr[data-name="demo_mcp"]')`)
	if got := evalIn[string](p, `document.querySelector('tr[data-name="demo_mcp"]').textContent`); !strings.Contains(got, "streamable_http") {
		t.Fatalf("the MCP server's row says %q", got)
	}

	p.do("usage", chromedp.Click(`#nav a[data-page="usage"]`))
	p.waitFor("usage by agent", `(function () { var s = window.agentplaneConsole.state(); return window.agentplaneConsole.page() === 'usage' && s.groupBy === 'agent' && s.rows.length === 1 && s.rows[0].key === 'demo' && s.total.llm_calls >= 2 && s.total.estimated_cost > 0; })()`)
	p.do("by model", chromedp.SetValue(`[data-testid="usage-group"]`, "model"), chromedp.Evaluate[chromedp.Void](`document.querySelector('[data-testid="usage-group"]').dispatchEvent(new Event('change'))`))
	p.waitFor("usage by model", `(function () { var s = window.agentplaneConsole.state(); return s.groupBy === 'model' && s.rows[0].key === 'demo-llm'; })()`)
	if !strings.Contains(evalIn[string](p, `location.search`), "group_by=model") {
		t.Fatal("the grouping is not in the URL")
	}
	p.do("reload", chromedp.Reload())
	p.waitFor("usage by model after a reload", `(function () { var s = window.agentplaneConsole.state(); return s && s.groupBy === 'model' && s.rows.length === 1; })()`)
	if got := evalIn[string](p, `document.querySelector('[data-testid="usage"] tr.total').textContent`); !strings.Contains(got, "total") {
		t.Fatalf("the total row says %q", got)
	}
	// Nothing stray beside the table, and one body per grid.
	if got := evalIn[string](p, `document.querySelector('[data-testid="usage"]').parentElement.textContent`); strings.Contains(got, "null") {
		t.Fatalf("the usage page reads %q", got)
	}
	if n := evalIn[float64](p, `document.querySelectorAll('table.grid tbody tbody').length`); n != 0 {
		t.Fatalf("%v nested tbody elements", n)
	}
	p.do("tools", chromedp.Click(`#nav a[data-page="tools"]`))
	p.waitFor("the tools grid", `document.querySelector('[data-testid="tools"] tbody tr') !== null`)
	if n := evalIn[float64](p, `document.querySelectorAll('table.grid tbody tbody').length`); n != 0 {
		t.Fatalf("%v nested tbody elements on the tools page", n)
	}
}

// chatTreeJS describes the conversation drawn under the element selected by sel (the chat page's
// #messages, or a replay's chat pane) as data: each top-level item in order — its kind, run,
// status and state, author, text and status line — and, for a sub-agent card, its agent and
// input and the items nested inside it, the same way; for a tool card, the answer it shows.
func chatTreeJS(sel string) string {
	return `(function (root) {
	function item(e) {
		var sub = e.dataset.kind === 'subagent';
		var q = function (s) { var x = e.querySelector(s); return x ? x.textContent : null; };
		var o = {
			kind: e.classList.contains('user') ? 'user' : e.classList.contains('assistant') ? 'assistant' : 'card:' + e.dataset.kind,
			runId: e.dataset.runId || '', status: e.dataset.status || '', state: e.dataset.state || '',
			author: q(':scope > .author'), text: q(sub ? ':scope > details > .sub-text' : ':scope > .text'), statusText: q(':scope > .status'),
			answer: q(':scope > details.result:not([hidden]) > pre'),
		};
		if (sub) {
			o.agent = q(':scope > details > summary > .sub-agent');
			o.input = q(':scope > details > summary > .sub-input');
			o.children = Array.from(e.querySelectorAll(':scope > details > .sub-children > .msg')).map(item);
		}
		return o;
	}
	return Array.from(root.querySelectorAll(':scope > .msg')).map(item);
})(document.querySelector('` + sel + `'))`
}

// chatItem mirrors an entry of chatTreeJS.
type chatItem struct {
	Kind       string     `json:"kind"`
	RunID      string     `json:"runId"`
	Status     string     `json:"status"`
	State      string     `json:"state"`
	Author     *string    `json:"author"`
	Text       *string    `json:"text"`
	StatusText *string    `json:"statusText"`
	Answer     *string    `json:"answer"` // what a tool card says the page answered
	Agent      string     `json:"agent,omitempty"`
	Input      string     `json:"input,omitempty"`
	Children   []chatItem `json:"children,omitempty"`
}

// TestBrowserConsoleReplayPlannerChat: the replay of a planner session — two sub-agents, an
// approval inside the payments agent's run — draws the chat the chat page drew: the user's
// message, the weather card, the payments card with the approval inside it, then the planner's
// answer; no child's run as a bubble of its own. Mid-way, the approval waits inside its card,
// with nothing to click.
func TestBrowserConsoleReplayPlannerChat(t *testing.T) {
	browser := newBrowser(t)
	s := startDemo(t)
	chat := openChat(t, browser, s.URL, "planner")
	chat.sendByClick("Plan my trip: weather in Paris, then send 250 to Bob")
	chat.waitFor("the approval inside the payments card", `!!document.querySelector('`+nestedApprovalJS+`[data-state="pending"]')`)
	chat.do("approve inside the card", chromedp.Click(nestedApprovalJS+`[data-state="pending"] [data-testid="approve-button"]`))
	chat.waitAssistantStatus("done")
	sid := chat.state().SessionID
	chat.waitLastSeq(s, sid)
	live := evalIn[[]chatItem](chat, chatTreeJS("#messages"))
	if order := evalIn[string](chat, topOrderJS); order != "user,card:subagent,card:subagent,assistant" {
		t.Fatalf("the chat page shows %s", order)
	}

	p := openConsole(t, browser, s.URL, adminKey, "/console/sessions/"+sid+"/replay?speed=instant&autoplay=1")
	p.waitFor("the replay finishes", `(function () { var s = window.agentplaneConsole.state(); return s && s.finished && s.started; })()`)
	replay := evalIn[[]chatItem](p, chatTreeJS(`[data-testid="replay-chat"]`))
	a, _ := json.MarshalIndent(live, "", "  ")
	b, _ := json.MarshalIndent(replay, "", "  ")
	if string(a) != string(b) {
		t.Fatalf("the replay's chat differs from the chat page's:\nchat page %s\nreplay    %s", a, b)
	}
	if len(replay) != 4 || len(replay[2].Children) != 1 || replay[2].Children[0].Kind != "card:approval" || replay[2].Children[0].State != "approved" {
		t.Fatalf("the replay's chat %s", b)
	}
	if n := evalIn[int](p, `document.querySelectorAll('[data-testid="replay-chat"] .msg.child, [data-testid="replay-chat"] button, [data-testid="replay-chat"] input').length`); n != 0 {
		t.Fatalf("the replay's chat has %d child-run bubbles or controls", n)
	}
	p.screenshot("console-replay-planner.png")

	// Seek to where the approval was asked for: it waits inside the payments card.
	var asked int64
	for _, e := range s.events("/v1/sessions/" + sid + "/events") {
		if e["type"] == "approval_created" {
			asked = seqOf(e)
		}
	}
	p.do("seek to the approval", chromedp.Evaluate[chromedp.Void](fmt.Sprintf(`(function () { var s = document.querySelector('[data-testid="seek"]'); s.value = '%d'; s.dispatchEvent(new Event('change')); })()`, asked)))
	p.waitFor("the replay at the approval", fmt.Sprintf(`(function () { var s = window.agentplaneConsole.state(); return s.pos === %d && !s.seeking; })()`, asked))
	mid := evalIn[[]chatItem](p, chatTreeJS(`[data-testid="replay-chat"]`))
	if len(mid) != 4 || mid[0].Kind != "user" || mid[1].Agent != "weather" || mid[1].Status != "done" || mid[2].Agent != "payments" || mid[2].Status != "running" ||
		len(mid[2].Children) != 1 || mid[2].Children[0].State != "pending" || mid[3].Kind != "assistant" || mid[3].Status != "running" {
		m, _ := json.MarshalIndent(mid, "", "  ")
		t.Fatalf("at the approval the replay shows %s", m)
	}
}
