package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

type sessionRow struct {
	SessionID   string   `json:"session_id"`
	UserID      string   `json:"user_id"`
	CreatedAt   int64    `json:"created_at"`
	LastSeq     int64    `json:"last_seq"`
	LastEventAt int64    `json:"last_event_at"`
	Status      string   `json:"status"`
	RootRuns    int      `json:"root_runs"`
	Agents      []string `json:"agents"`
}

func (c *apiClient) sessions(ctx context.Context, args []string) error {
	if len(args) == 0 {
		return usageError("agentplane sessions list|tail")
	}
	switch args[0] {
	case "list":
		return c.sessionsList(ctx, args[1:])
	case "tail":
		return c.sessionsTail(ctx, args[1:])
	}
	return usageError("agentplane sessions list|tail (not " + args[0] + ")")
}

func (c *apiClient) sessionsList(ctx context.Context, args []string) error {
	fs := newFlags(c, "sessions list")
	user := fs.String("user", "", "only this user's")
	agent := fs.String("agent", "", "only sessions where this agent ran")
	status := fs.String("status", "", "active or ended")
	prefix := fs.String("q", "", "session id prefix")
	since := fs.String("since", "", "created at or after (RFC 3339, ms, or a duration before now: 24h)")
	until := fs.String("until", "", "created before")
	limit := fs.Int("limit", 50, "at most this many (0: all)")
	if _, err := parse(fs, args); err != nil {
		return err
	}
	q := url.Values{}
	for k, v := range map[string]string{"user_id": *user, "agent_id": *agent, "status": *status, "q": *prefix} {
		if v != "" {
			q.Set(k, v)
		}
	}
	if err := timeQuery(q, "since", *since); err != nil {
		return err
	}
	if err := timeQuery(q, "until", *until); err != nil {
		return err
	}
	items, err := c.listPages(ctx, "/v1/sessions", q, "sessions", *limit)
	if err != nil {
		return err
	}
	if c.json {
		return c.printJSON(items)
	}
	tw := tabwriter.NewWriter(c.out, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SESSION\tUSER\tSTATUS\tRUNS\tEVENTS\tAGENTS\tCREATED\tLAST EVENT")
	for _, raw := range items {
		var s sessionRow
		if err := json.Unmarshal(raw, &s); err != nil {
			return err
		}
		agents := strings.Join(s.Agents, ",")
		if agents == "" {
			agents = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%s\t%s\t%s\n", s.SessionID, orDash(s.UserID), s.Status, s.RootRuns, s.LastSeq, agents, when(s.CreatedAt), when(s.LastEventAt))
	}
	return tw.Flush()
}

func timeQuery(q url.Values, name, v string) error {
	t, err := timeFlag(v, time.Now())
	if err != nil {
		return fmt.Errorf("--%s: %w", name, err)
	}
	if t != "" {
		q.Set(name, t)
	}
	return nil
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// event is one event of the log as the API shows it.
type event struct {
	EventID     string          `json:"event_id"`
	SessionID   string          `json:"session_id"`
	Seq         int64           `json:"seq"`
	RunID       string          `json:"run_id"`
	ParentRunID string          `json:"parent_run_id"`
	TS          int64           `json:"ts"`
	Type        string          `json:"type"`
	Payload     json.RawMessage `json:"payload"`
}

// Reconnect backoff of sessions tail.
const (
	tailBackoffMin = 500 * time.Millisecond
	tailBackoffMax = 5 * time.Second
)

// sessionsTail follows a session's events live (GET
// /v1/sessions/{id}/events?follow=1), one line per event, until
// interrupted. A dropped connection is resumed with Last-Event-ID, so
// every event is printed once, in order.
func (c *apiClient) sessionsTail(ctx context.Context, args []string) error {
	fs := newFlags(c, "sessions tail")
	after := fs.Int64("after-seq", 0, "start after this seq (0: the whole session)")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usageError("agentplane sessions tail SESSION [--after-seq N] [--json]")
	}
	if c.key == "" {
		return errors.New("no API key: pass --key or set AGENTPLANE_KEY (or AGENTPLANE_ADMIN_KEY)")
	}
	last := *after
	backoff := tailBackoffMin
	for {
		got, err := c.tailOnce(ctx, pos[0], &last)
		if ctx.Err() != nil {
			return nil
		}
		var ae *apiError
		if errors.As(err, &ae) && ae.Status != http.StatusServiceUnavailable && ae.Status != http.StatusBadGateway && ae.Status != http.StatusGatewayTimeout {
			return err // refused: another reconnect would be refused too
		}
		if got {
			backoff = tailBackoffMin
		}
		reason := "the stream ended"
		if err != nil {
			reason = err.Error()
		}
		fmt.Fprintf(c.errOut, "agentplane: %s; reconnecting after seq %d in %s\n", reason, last, backoff)
		select {
		case <-time.After(backoff):
		case <-ctx.Done():
			return nil
		}
		backoff = min(2*backoff, tailBackoffMax)
	}
}

// tailOnce reads one connection of the follow stream, advancing *last with
// every event printed; got reports whether any event came.
func (c *apiClient) tailOnce(ctx context.Context, sessionID string, last *int64) (got bool, err error) {
	u := strings.TrimRight(c.base, "/") + "/v1/sessions/" + url.PathEscape(sessionID) + "/events?follow=1&after_seq=" + strconv.FormatInt(*last, 10)
	req, err := http.NewRequestWithContext(ctx, "GET", u, nil)
	if err != nil {
		return false, err
	}
	req.Header.Set("Authorization", "Bearer "+c.key)
	req.Header.Set("Accept", "text/event-stream")
	if *last > 0 {
		req.Header.Set("Last-Event-ID", strconv.FormatInt(*last, 10))
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return false, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		raw, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		return false, decodeError(resp.StatusCode, raw)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	var data []byte
	for sc.Scan() {
		line := sc.Bytes()
		switch {
		case len(line) == 0:
			if data == nil {
				continue
			}
			var e event
			if err := json.Unmarshal(data, &e); err != nil {
				return got, fmt.Errorf("an event that is not JSON: %w", err)
			}
			data = nil
			if e.Seq <= *last {
				continue // already printed before a reconnect
			}
			if err := c.printEvent(&e); err != nil {
				return got, err
			}
			*last = e.Seq
			got = true
		case len(line) > 6 && string(line[:6]) == "data: ":
			data = append(data[:0:0], line[6:]...)
		}
	}
	return got, sc.Err()
}

// printEvent writes one line: the event as JSON with --json, else seq,
// time, run, type and a summary of its payload.
func (c *apiClient) printEvent(e *event) error {
	if c.json {
		b, err := json.Marshal(e)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(c.out, "%s\n", b)
		return err
	}
	ts := time.UnixMilli(e.TS).Local().Format("15:04:05.000")
	run := e.RunID
	if run == "" {
		run = "-"
	}
	_, err := fmt.Fprintf(c.out, "%6d %s %s %-20s %s\n", e.Seq, ts, run, e.Type, summarize(e))
	return err
}

// summarize is the part of an event's payload worth a line.
func summarize(e *event) string {
	var p map[string]any
	_ = json.Unmarshal(e.Payload, &p)
	s := func(k string) string {
		switch v := p[k].(type) {
		case string:
			return v
		case nil:
			return ""
		case float64:
			return strconv.FormatFloat(v, 'f', -1, 64)
		default:
			b, _ := json.Marshal(v)
			return string(b)
		}
	}
	join := func(parts ...string) string {
		var out []string
		for _, x := range parts {
			if x != "" && x != "=" && !strings.HasSuffix(x, "=") {
				out = append(out, x)
			}
		}
		return strings.Join(out, " ")
	}
	switch e.Type {
	case "user_input":
		var m struct {
			Message struct {
				Content any `json:"content"`
			} `json:"message"`
		}
		_ = json.Unmarshal(e.Payload, &m)
		return clip(fmt.Sprint(m.Message.Content))
	case "run_started":
		var m struct {
			AgentID string `json:"agent_id"`
			Message struct {
				Content any `json:"content"`
			} `json:"message"`
		}
		_ = json.Unmarshal(e.Payload, &m)
		parent := ""
		if e.ParentRunID != "" {
			parent = "parent=" + e.ParentRunID
		}
		return join("agent="+m.AgentID, parent, strconv.Quote(clip(fmt.Sprint(m.Message.Content))))
	case "agent_stream_delta":
		return strconv.Quote(s("text"))
	case "state":
		return join(s("state"), "source="+s("source"), clip(s("detail")))
	case "llm_call_done":
		return join("model="+s("model"), "prompt="+s("prompt_tokens"), "completion="+s("completion_tokens"),
			"cached="+s("cached_tokens"), "reasoning="+s("reasoning_tokens"), "cost="+s("estimated_cost"),
			"ttft_ms="+s("ttft_ms"), "latency_ms="+s("latency_ms"), "outcome="+s("outcome"))
	case "tool_call_created":
		return join(s("tool_name"), s("tool_call_id"), clip(s("args")))
	case "policy_decision":
		return join(s("tool_name"), "decision="+s("decision"), "rule="+s("rule"))
	case "approval_created":
		return join(s("approval_id"), s("tool_name"), clip(s("args_summary")))
	case "approval_decision":
		return join(s("approval_id"), s("decision"), "by="+s("decided_by"), "waited_ms="+s("waited_ms"), clip(s("reason")))
	case "tool_result":
		return join(s("tool_name"), s("state"), "duration_ms="+s("duration_ms"), clip(s("error")))
	case "run_done":
		return join("total_cost="+s("total_cost"), "llm_calls="+s("llm_calls"), clip(s("usage")))
	case "run_failed":
		return join(s("code"), clip(s("message")))
	}
	return clip(string(e.Payload))
}

func clip(s string) string {
	s = strings.ReplaceAll(s, "\n", " ")
	if len(s) > 160 {
		return s[:160] + "…"
	}
	return s
}
