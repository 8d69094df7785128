package toolsvc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/agentplane/agentplane/internal/eventlog"
	"github.com/agentplane/agentplane/internal/store"
	"github.com/agentplane/agentplane/internal/tool"
)

// progressEvery bounds the tool_progress events one MCP call records: a
// server may send progress far faster than anyone needs it logged.
const progressEvery = time.Second

// callMCP runs a claimed (RUNNING) MCP call: one tools/call on the
// server's session, bound to the call's deadline (ctx) and to the call
// itself (ended elsewhere, it is cancelled on the server too). Progress the
// server reports is recorded as tool_progress events.
func (s *Service) callMCP(ctx context.Context, c *store.ToolCall, args json.RawMessage) (status string, result, errJSON json.RawMessage) {
	src := s.registry.mcpSource()
	server, name, ok := tool.SplitMCPName(c.ToolName)
	if src == nil || !ok {
		return store.ToolCallFailed, nil, errorJSON("tool_unreachable", "no MCP server serves "+c.ToolName, nil)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s.inflight.add(c.ToolCallID, c.SessionID, cancel)
	defer s.inflight.remove(c.ToolCallID)

	p := &progressRecorder{s: s, c: c}
	res, err := src.CallMCP(ctx, MCPCall{Server: server, Tool: name, Args: args, ProgressToken: c.ToolCallID, OnProgress: p.record})
	switch {
	case err == nil:
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		return store.ToolCallTimeout, nil, errorJSON("timeout", fmt.Sprintf("the MCP server did not answer within %d ms", c.TimeoutMS), nil)
	case ctx.Err() != nil:
		// The call ended while its request ran; the late outcome is dropped.
		return store.ToolCallCancelled, nil, errorJSON("cancelled", "the call ended while its MCP request ran", nil)
	case errors.Is(err, ErrMCPUnreachable):
		return store.ToolCallFailed, nil, errorJSON("tool_unreachable", err.Error(), nil)
	case errors.Is(err, ErrMCPOutcomeUnknown):
		return store.ToolCallFailed, nil, errorJSON("outcome_unknown", err.Error()+"; the tool may have run", nil)
	default:
		// The server answered the request with an error (an unknown tool, bad
		// arguments on some servers): the tool's own failure, its error the
		// detail (API.md).
		var detail json.RawMessage
		var re *MCPRPCError
		if errors.As(err, &re) {
			detail, _ = json.Marshal(re)
		}
		return store.ToolCallFailed, nil, errorJSON("tool_error", "the MCP server answered with an error: "+err.Error(), detail)
	}
	body := res.JSON()
	if res.IsError {
		return store.ToolCallFailed, nil, errorJSON("tool_error", "the MCP tool failed: "+truncate(firstText(res.Content), 512), body)
	}
	if len(body) > maxResultBytes {
		return store.ToolCallFailed, nil, errorJSON("tool_protocol_error", fmt.Sprintf("the MCP tool's answer is larger than %d bytes", maxResultBytes), nil)
	}
	return store.ToolCallSucceeded, body, nil
}

// firstText is the text of the first text block of content, for a
// failure's message.
func firstText(content json.RawMessage) string {
	var blocks []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	_ = json.Unmarshal(content, &blocks)
	for _, b := range blocks {
		if b.Type == "text" && b.Text != "" {
			return b.Text
		}
	}
	return "(no text)"
}

// progressRecorder turns a server's progress notifications into
// tool_progress events, at most one per progressEvery (the others are
// dropped), and only while the call runs: notifications may arrive after
// the answer.
type progressRecorder struct {
	s *Service
	c *store.ToolCall

	mu   sync.Mutex
	last time.Time
}

func (p *progressRecorder) record(progress, total float64, message string) {
	p.mu.Lock()
	if !p.last.IsZero() && time.Since(p.last) < progressEvery {
		p.mu.Unlock()
		return
	}
	p.last = time.Now()
	p.mu.Unlock()
	payload := map[string]any{"tool_call_id": p.c.ToolCallID, "tool_name": p.c.ToolName, "progress": progress}
	if total > 0 {
		payload["total"] = total
	}
	if message != "" {
		payload["message"] = truncate(message, 512)
	}
	_, err := p.s.commit(context.Background(), p.c.SessionID, p.c.RunID, func(st *step) error {
		if store.RunIsTerminal(st.run.Status) {
			return nil
		}
		cur, err := st.q.ToolCallGet(st.ctx, p.c.ToolCallID)
		if err != nil || cur.Status != store.ToolCallRunning {
			return err
		}
		st.event(eventlog.TypeToolProgress, payload)
		return nil
	})
	if err != nil {
		p.s.opts.Logger.Warn("record MCP progress", "tool_call_id", p.c.ToolCallID, "run_id", p.c.RunID, "session_id", p.c.SessionID, "err", err)
	}
}

// remoteEnded is the hook for sessions other processes changed: the MCP
// requests in flight here for calls of those sessions look at their call
// again and are cancelled if it has ended.
func (s *Service) remoteEnded(sessionIDs []string) {
	ids := s.inflight.inSessions(sessionIDs)
	if len(ids) == 0 {
		return
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for _, id := range ids {
			if c, err := s.st.ToolCallGet(ctx, id); err == nil && store.ToolCallTerminal(c.Status) {
				s.inflight.ended(id)
			}
		}
	}()
}
