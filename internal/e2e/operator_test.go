package e2e

// The operator API of issue 11: listings with filters and cursors, usage,
// who a key is, what a user key may read, and the live follow stream of a
// session's events (SSE), against the real binary on both databases.

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// chat runs one message of user in a new session (or sessionID) to the end
// and returns the session id and run id.
func chat(t *testing.T, s *server, user, key, agentID, sessionID, text string) (string, string) {
	t.Helper()
	c := dial(t, s, user, key)
	m := map[string]any{"type": "agent_invoke", "request_id": "r", "agent_id": agentID, "message": map[string]any{"role": "user", "content": text}}
	if sessionID != "" {
		m["session_id"] = sessionID
	}
	c.send(m)
	msgs := c.untilEnd()
	if end := msgs[len(msgs)-1]; end["type"] != "done" {
		t.Fatalf("run of %s ended %v", user, end)
	}
	c.conn.Close()
	return sv(msgs[0], "session_id"), sv(msgs[0], "run_id")
}

// list GETs a listing and returns its items under field and next_cursor.
func list(t *testing.T, s *server, key, path, field string) ([]map[string]any, string) {
	t.Helper()
	code, body := s.call("GET", path, key, nil)
	if code != http.StatusOK {
		t.Fatalf("GET %s: %d %v", path, code, body)
	}
	var out []map[string]any
	items, ok := body[field].([]any)
	if !ok {
		t.Fatalf("GET %s: no %s list in %v", path, field, body)
	}
	for _, it := range items {
		out = append(out, it.(map[string]any))
	}
	next, ok := body["next_cursor"].(string)
	if !ok {
		t.Fatalf("GET %s: no next_cursor in %v", path, body)
	}
	return out, next
}

func field(items []map[string]any, k string) []string {
	out := []string{}
	for _, it := range items {
		out = append(out, sv(it, k))
	}
	return out
}

// pageAll follows next_cursor with limit per page and returns every item.
func pageAll(t *testing.T, s *server, key, path, fieldName string, limit int) []map[string]any {
	t.Helper()
	var all []map[string]any
	sep := "?"
	if strings.Contains(path, "?") {
		sep = "&"
	}
	cursor := ""
	for range 100 {
		p := path + sep + "limit=" + strconv.Itoa(limit)
		if cursor != "" {
			p += "&cursor=" + url.QueryEscape(cursor)
		}
		items, next := list(t, s, key, p, fieldName)
		if len(items) > limit {
			t.Fatalf("GET %s: %d items, limit %d", p, len(items), limit)
		}
		all = append(all, items...)
		if next == "" {
			return all
		}
		cursor = next
	}
	t.Fatalf("GET %s: more than 100 pages", path)
	return nil
}

func TestOperatorListings(t *testing.T) {
	eachStore(t, func(t *testing.T, dsn string) {
		s := startServer(t, dsn)
		goAgent(t, s, "echo")
		goAgent(t, s, "echo2")
		before := time.Now().UnixMilli()
		sa1, ra1 := chat(t, s, "alice", "alice-key", "echo", "", "one")
		_, ra2 := chat(t, s, "alice", "alice-key", "echo2", sa1, "two")
		sb1, rb1 := chat(t, s, "bob", "bob-key", "echo", "", "three")
		sa2, _ := chat(t, s, "alice", "alice-key", "echo", "", "four")

		// Sessions: newest first; the admin sees all, a user its own.
		all, next := list(t, s, adminKey, "/v1/sessions", "sessions")
		if got := field(all, "session_id"); !slices.Equal(got[:3], []string{sa2, sb1, sa1}) || next != "" {
			t.Fatalf("admin sessions %v (next %q), want %v first", got, next, []string{sa2, sb1, sa1})
		}
		s1 := all[2]
		if sv(s1, "user_id") != "alice" || sv(s1, "status") != "ended" || num(s1, "root_runs") != 2 || num(s1, "last_seq") < 4 ||
			num(s1, "last_event_at") < float64(before) || num(s1, "created_at") < float64(before) {
			t.Fatalf("session summary %v", s1)
		}
		if agents, _ := s1["agents"].([]any); len(agents) != 2 || agents[0] != "echo" || agents[1] != "echo2" {
			t.Fatalf("session agents %v", s1["agents"])
		}
		mine, _ := list(t, s, "alice-key", "/v1/sessions", "sessions")
		if got := field(mine, "session_id"); !slices.Equal(got, []string{sa2, sa1}) {
			t.Fatalf("alice's sessions %v", got)
		}
		if other, _ := list(t, s, "alice-key", "/v1/sessions?user_id=bob", "sessions"); len(other) != 0 {
			t.Fatalf("alice listing bob's sessions got %v", other)
		}
		for path, want := range map[string][]string{
			"/v1/sessions?user_id=bob":                            {sb1},
			"/v1/sessions?agent_id=echo2":                         {sa1},
			"/v1/sessions?status=active&user_id=alice":            {},
			"/v1/sessions?q=" + url.QueryEscape(sb1[:len(sb1)-2]): {sb1},
			"/v1/sessions?user_id=alice&since=" + strconv.FormatInt(before, 10) + "&until=" + time.Now().Add(time.Hour).Format(time.RFC3339): {sa2, sa1},
		} {
			got, _ := list(t, s, adminKey, path, "sessions")
			if !slices.Equal(field(got, "session_id"), want) {
				t.Errorf("GET %s = %v, want %v", path, field(got, "session_id"), want)
			}
		}
		paged := pageAll(t, s, adminKey, "/v1/sessions?user_id=alice", "sessions", 1)
		if got := field(paged, "session_id"); !slices.Equal(got, []string{sa2, sa1}) {
			t.Fatalf("alice's sessions one per page %v", got)
		}

		// Runs: filters and pages.
		runs := pageAll(t, s, adminKey, "/v1/runs?session_id="+sa1+"&order=asc", "runs", 1)
		if got := field(runs, "run_id"); !slices.Equal(got, []string{ra1, ra2}) {
			t.Fatalf("runs of %s oldest first %v", sa1, got)
		}
		if sv(runs[0], "agent_id") != "echo" || sv(runs[0], "status") != "DONE" || sv(runs[0], "session_id") != sa1 {
			t.Fatalf("run row %v", runs[0])
		}
		if _, ok := runs[0]["usage"].(map[string]any); !ok {
			t.Fatalf("run row %v: usage is not an object", runs[0])
		}
		for path, want := range map[string][]string{
			"/v1/runs?agent_id=echo2":              {ra2},
			"/v1/runs?user_id=bob":                 {rb1},
			"/v1/runs?status=active":               {},
			"/v1/runs?status=DONE&user_id=bob":     {rb1},
			"/v1/runs?root=true&session_id=" + sb1: {rb1},
			"/v1/runs?parent_run_id=" + ra1:        {},
		} {
			got, _ := list(t, s, adminKey, path, "runs")
			if !slices.Equal(field(got, "run_id"), want) {
				t.Errorf("GET %s = %v, want %v", path, field(got, "run_id"), want)
			}
		}
		if got, _ := list(t, s, "bob-key", "/v1/runs?session_id="+sa1, "runs"); len(got) != 0 {
			t.Fatalf("bob sees alice's runs: %v", got)
		}

		// Bad parameters are refused with a structured error.
		for _, path := range []string{
			"/v1/sessions?status=sleeping", "/v1/sessions?limit=0", "/v1/sessions?limit=1001", "/v1/sessions?since=yesterday",
			"/v1/sessions?cursor=garbage", "/v1/runs?status=SLEEPING", "/v1/runs?root=maybe", "/v1/runs?order=sideways",
			"/v1/usage?group_by=tool",
		} {
			code, body := s.call("GET", path, adminKey, nil)
			if code != http.StatusBadRequest || obj(body, "error")["code"] == nil {
				t.Errorf("GET %s: %d %v, want 400 with an error code", path, code, body)
			}
		}
		// A cursor of one listing is refused by another.
		_, cur := list(t, s, adminKey, "/v1/sessions?limit=1", "sessions")
		if code, body := s.call("GET", "/v1/runs?cursor="+url.QueryEscape(cur), adminKey, nil); code != http.StatusBadRequest || sv(obj(body, "error"), "code") != "invalid_cursor" {
			t.Errorf("a sessions cursor on /v1/runs: %d %v", code, body)
		}

		// Agents are paged by id.
		agents := pageAll(t, s, adminKey, "/v1/agents", "agents", 1)
		if got := field(agents, "agent_id"); !slices.Equal(got, []string{"echo", "echo2"}) {
			t.Fatalf("agents one per page %v", got)
		}

		// Who a key is.
		for key, want := range map[string]map[string]any{
			adminKey:    {"kind": "admin"},
			"alice-key": {"kind": "user", "user_id": "alice"},
		} {
			if code, body := s.call("GET", "/v1/whoami", key, nil); code != 200 || fmt.Sprint(body) != fmt.Sprint(want) {
				t.Errorf("whoami %s: %d %v, want %v", key, code, body, want)
			}
		}
		if code, _ := s.call("GET", "/v1/whoami", "nope", nil); code != http.StatusUnauthorized {
			t.Errorf("whoami with a bad key: %d", code)
		}

		// A user key reads its own sessions and nothing of another's: the
		// answer for bob's session is the answer for a missing one.
		for _, path := range []string{"/v1/sessions/" + sb1 + "/events", "/v1/sessions/ses_missing/events", "/v1/sessions/" + sb1 + "/messages",
			"/v1/sessions/" + sb1 + "/events?follow=1"} {
			code, body := s.call("GET", path, "alice-key", nil)
			if code != http.StatusNotFound || sv(obj(body, "error"), "code") != "session_not_found" {
				t.Errorf("alice GET %s: %d %v, want 404 session_not_found", path, code, body)
			}
		}
		if code, body := s.call("GET", "/v1/runs/"+rb1, "alice-key", nil); code != http.StatusNotFound {
			t.Errorf("alice GET bob's run: %d %v", code, body)
		}
		if code, _ := s.call("GET", "/v1/sessions/"+sa1+"/events", "alice-key", nil); code != 200 {
			t.Errorf("alice reading her own session: %d", code)
		}
		for _, path := range []string{"/v1/usage", "/v1/tools"} {
			if code, _ := s.call("GET", path, "alice-key", nil); code != http.StatusForbidden {
				t.Errorf("alice GET %s: %d, want 403", path, code)
			}
		}
		if code, _ := s.call("GET", "/v1/sessions", "", nil); code != http.StatusUnauthorized {
			t.Errorf("sessions without a key: %d", code)
		}
	})
}

// TestOperatorApprovalsAndUsage drives the demo agent (LLM calls priced by
// the demo's table, a transfer that needs approval) and reads approvals
// (paged, a user's own only) and usage.
func TestOperatorApprovalsAndUsage(t *testing.T) {
	s := startDemoOn(t, "sqlite:"+t.TempDir()+"/demo.db", nil)
	before := time.Now().UnixMilli()
	sw, _ := chat(t, s, "alice", "alice-key", "demo", "", "What's the weather in Paris?")

	// Two transfers waiting for approval: alice's and bob's.
	var ids []string
	for _, u := range []string{"alice", "bob"} {
		c := dial(t, s, u, u+"-key")
		c.send(map[string]any{"type": "agent_invoke", "request_id": "r", "agent_id": "demo", "message": map[string]any{"role": "user", "content": "Send 250 to Bob"}})
		ar := c.readUntilAll("approval_required", isType("approval_required"))
		ids = append(ids, sv(find(t, ar, "approval", isType("approval_required")), "approval_id"))
	}
	pending := pageAll(t, s, adminKey, "/v1/approvals?status=PENDING", "approvals", 1)
	if got := field(pending, "approval_id"); !slices.Equal(got, ids) {
		t.Fatalf("pending approvals one per page %v, want %v", got, ids)
	}
	if got, _ := list(t, s, adminKey, "/v1/approvals?status=PENDING&order=desc", "approvals"); !slices.Equal(field(got, "approval_id"), []string{ids[1], ids[0]}) {
		t.Fatalf("newest first %v", field(got, "approval_id"))
	}
	if got, _ := list(t, s, "alice-key", "/v1/approvals", "approvals"); !slices.Equal(field(got, "approval_id"), ids[:1]) {
		t.Fatalf("alice's approvals %v, want %v", field(got, "approval_id"), ids[:1])
	}
	if code, _ := decide(s, ids[0], "approve"); code != 200 {
		t.Fatalf("decide: %d", code)
	}
	if code, body := s.call("POST", "/v1/approvals/"+ids[1]+":decide", "bob-key", map[string]any{"decision": "approve"}); code != http.StatusForbidden {
		t.Fatalf("a user deciding over HTTP: %d %v", code, body)
	}

	// Usage: the weather run's LLM calls, summed by agent, model and user.
	waitFor(t, "the weather run's LLM calls are recorded", func() bool {
		_, body := s.call("GET", "/v1/usage?group_by=user&since="+strconv.FormatInt(before, 10), adminKey, nil)
		return num(obj(body, "total"), "llm_calls") >= 2
	})
	var weatherCalls float64
	for _, e := range s.events("/v1/sessions/" + sw + "/events") {
		if e["type"] == "llm_call_done" {
			weatherCalls++
		}
	}
	for _, by := range []string{"agent", "model", "user"} {
		code, body := s.call("GET", "/v1/usage?group_by="+by+"&since="+strconv.FormatInt(before, 10)+"&until="+strconv.FormatInt(time.Now().Add(time.Minute).UnixMilli(), 10), adminKey, nil)
		if code != 200 || sv(body, "group_by") != by {
			t.Fatalf("usage by %s: %d %v", by, code, body)
		}
		rows, _ := body["rows"].([]any)
		total := obj(body, "total")
		if len(rows) == 0 || num(total, "llm_calls") < weatherCalls || num(total, "prompt_tokens") <= 0 || num(total, "completion_tokens") <= 0 ||
			num(total, "estimated_cost") <= 0 || num(total, "total_tokens") != num(total, "prompt_tokens")+num(total, "completion_tokens") {
			t.Fatalf("usage by %s: %v", by, body)
		}
		wantKey := map[string]string{"agent": "demo", "model": "demo-llm", "user": "alice"}[by]
		keys := []string{}
		for _, r := range rows {
			keys = append(keys, sv(r.(map[string]any), "key"))
		}
		if !slices.Contains(keys, wantKey) {
			t.Fatalf("usage by %s has keys %v, want %s among them", by, keys, wantKey)
		}
	}
	// Before the period: nothing.
	if _, body := s.call("GET", "/v1/usage?until="+strconv.FormatInt(before, 10), adminKey, nil); num(obj(body, "total"), "llm_calls") != 0 {
		t.Fatalf("usage before anything ran: %v", body)
	}
}

// waitFor polls cond for up to 30 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// sseEvent is one message of a follow stream.
type sseEvent struct {
	id   string
	data map[string]any
}

// follow opens GET /v1/sessions/{id}/events?follow=1 and delivers its
// events until ctx ends or the stream breaks.
func follow(t *testing.T, ctx context.Context, s *server, key, sessionID, query, lastEventID string) (<-chan sseEvent, *http.Response) {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, "GET", s.URL+"/v1/sessions/"+sessionID+"/events?follow=1"+query, nil)
	req.Header.Set("Authorization", "Bearer "+key)
	if lastEventID != "" {
		req.Header.Set("Last-Event-ID", lastEventID)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("follow: %v", err)
	}
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("follow: %d %s %s", resp.StatusCode, resp.Header.Get("Content-Type"), b)
	}
	ch := make(chan sseEvent, 1024)
	go func() {
		defer close(ch)
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		var ev sseEvent
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "":
				if ev.data != nil {
					ch <- ev
				}
				ev = sseEvent{}
			case strings.HasPrefix(line, "id: "):
				ev.id = line[4:]
			case strings.HasPrefix(line, "data: "):
				if err := json.Unmarshal([]byte(line[6:]), &ev.data); err != nil {
					ev.data = map[string]any{"unparsable": line}
				}
			}
		}
	}()
	return ch, resp
}

func nextSSE(t *testing.T, ch <-chan sseEvent) sseEvent {
	t.Helper()
	select {
	case ev, ok := <-ch:
		if !ok {
			t.Fatal("follow stream ended")
		}
		return ev
	case <-time.After(30 * time.Second):
		t.Fatal("no event on the follow stream within 30 s")
	}
	return sseEvent{}
}

// TestSessionEventsFollow: the follow stream replays a session and then
// follows it live, each event once and in order; a client that drops and
// comes back with Last-Event-ID continues exactly where it was.
func TestSessionEventsFollow(t *testing.T) {
	eachStore(t, func(t *testing.T, dsn string) {
		s := startServer(t, dsn)
		goAgent(t, s, "echo")
		sid, _ := chat(t, s, "alice", "alice-key", "echo", "", "before anyone follows")
		stored := s.events("/v1/sessions/" + sid + "/events")

		// Replay from after_seq, then live.
		ctx, cancel := context.WithCancel(context.Background())
		ch, _ := follow(t, ctx, s, "alice-key", sid, "&after_seq=2", "")
		for i, want := range stored[2:] {
			ev := nextSSE(t, ch)
			if ev.id != strconv.Itoa(int(seqOf(want))) || seqOf(ev.data) != seqOf(want) || ev.data["event_id"] != want["event_id"] || ev.data["type"] != want["type"] {
				t.Fatalf("replayed event %d: id %s %v, want %v", i, ev.id, ev.data, want)
			}
		}
		last := seqOf(stored[len(stored)-1])
		c := dial(t, s, "alice", "alice-key")
		c.send(map[string]any{"type": "agent_invoke", "request_id": "r", "session_id": sid, "agent_id": "echo", "message": map[string]any{"role": "user", "content": "while following " + words(40)}})
		// Read a few live events, then drop the connection mid-run.
		for range 5 {
			ev := nextSSE(t, ch)
			if seqOf(ev.data) != last+1 {
				t.Fatalf("live event seq %d after %d", seqOf(ev.data), last)
			}
			last = seqOf(ev.data)
		}
		cancel()
		for range ch {
		}
		// Resume with the last id seen: the rest, each once, to run_done.
		ctx2, cancel2 := context.WithCancel(context.Background())
		defer cancel2()
		ch2, _ := follow(t, ctx2, s, adminKey, sid, "&after_seq=0", strconv.FormatInt(last, 10))
		for {
			ev := nextSSE(t, ch2)
			if seqOf(ev.data) != last+1 {
				t.Fatalf("resumed event seq %d after %d", seqOf(ev.data), last)
			}
			last = seqOf(ev.data)
			if ev.data["type"] == "run_done" {
				break
			}
		}
		all := s.events("/v1/sessions/" + sid + "/events")
		if seqOf(all[len(all)-1]) < last {
			t.Fatalf("the stream went past the log: %d > %d", last, seqOf(all[len(all)-1]))
		}
	})
}
