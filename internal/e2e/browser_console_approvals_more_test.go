package e2e

// Browser test of the approvals page's Decided table past its first page (internal/console/
// static/pages.js): what the operator loaded with "Load more" stays through the page's 5 s
// refresh, which used to read the first page only and so dropped it, and a decision made
// meanwhile joins the top without a row listed twice.

import (
	"fmt"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// decideApprovals has alice ask the demo agent for n transfers, each stopped at an approval she
// decides over the WebSocket; it returns the approvals' ids, oldest first.
func decideApprovals(t *testing.T, c *client, n int, tag string) []string {
	t.Helper()
	var ids []string
	for i := range n {
		c.send(map[string]any{"type": "agent_invoke", "request_id": fmt.Sprint(tag, "r", i), "agent_id": "demo", "message": map[string]any{"role": "user", "content": "Send 250 to Bob"}})
		ar := c.readUntilAll("approval_required", isType("approval_required"))
		m := find(t, ar, "approval", isType("approval_required"))
		c.send(map[string]any{"type": "approval_decision", "request_id": fmt.Sprint(tag, "d", i), "run_id": m["run_id"], "approval_id": m["approval_id"], "decision": "approve"})
		c.untilEnd()
		ids = append(ids, sv(m, "approval_id"))
	}
	return ids
}

// TestBrowserConsoleApprovalsLoadMoreSurvivesRefresh: 51 decided approvals, the table shows 50;
// Load more brings the 51st. A 52nd decided meanwhile, the refreshes that follow show all 52,
// newest first, each once, and Load more is no longer offered.
func TestBrowserConsoleApprovalsLoadMoreSurvivesRefresh(t *testing.T) {
	browser := newBrowser(t)
	s := startDemo(t)
	c := dial(t, s, "alice", "alice-key")
	ids := decideApprovals(t, c, 51, "a")

	p := openConsole(t, browser, s.URL, adminKey, "/console/approvals")
	rowsJS := `(function () { var ids = Array.prototype.map.call(document.querySelectorAll('[data-testid="decided"] tbody tr[data-approval-id]'), function (r) { return r.dataset.approvalId; });
		return { ids: ids, unique: new Set(ids).size, decided: window.agentplaneConsole.state().decided,
			more: !document.querySelector('[data-testid="load-more"]').hidden }; })()`
	p.waitFor("the first page of the Decided table", `window.agentplaneConsole.page() === 'approvals' && window.agentplaneConsole.state().decided === 50
		&& !document.querySelector('[data-testid="load-more"]').hidden`)
	p.do("load more", chromedp.Click(`[data-testid="load-more"]`))
	p.waitFor("all 51", `window.agentplaneConsole.state().decided === 51 && document.querySelectorAll('[data-testid="decided"] tbody tr[data-approval-id]').length === 51`)

	newest := decideApprovals(t, c, 1, "b")[0]
	want := append([]string{newest}, reversed(ids)...)
	type rows struct {
		IDs     []string `json:"ids"`
		Unique  int      `json:"unique"`
		Decided int      `json:"decided"`
		More    bool     `json:"more"`
	}
	check := func(when string) {
		t.Helper()
		r := evalIn[rows](p, rowsJS)
		if fmt.Sprint(r.IDs) != fmt.Sprint(want) || r.Unique != len(want) || r.Decided != len(want) || r.More {
			t.Fatalf("%s: the Decided table lists %d rows (%d distinct, decided %d, Load more offered %v), want the %d approvals newest first, each once\ngot  %v\nwant %v",
				when, len(r.IDs), r.Unique, r.Decided, r.More, len(want), r.IDs, want)
		}
	}
	p.waitFor("the refresh adds the newest on top", `document.querySelector('[data-testid="decided"] tbody tr[data-approval-id]').dataset.approvalId === '`+newest+`'`)
	check("after the refresh that brought the newest")
	// Two more refreshes (every 5 s): nothing dropped, nothing doubled.
	time.Sleep(11 * time.Second)
	check("two refreshes later")
}

func reversed(s []string) []string {
	out := make([]string, len(s))
	for i, v := range s {
		out[len(s)-1-i] = v
	}
	return out
}
