package ingress

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/agentplane/agentplane/internal/agent"
	"github.com/agentplane/agentplane/internal/eventlog"
	"github.com/agentplane/agentplane/internal/respond"
	"github.com/agentplane/agentplane/internal/run"
	"github.com/agentplane/agentplane/internal/store"
)

// commandTimeout bounds one client command's work against the orchestrator.
const commandTimeout = 15 * time.Second

// handle dispatches one message. Every failure is an error reply with the
// offending request_id; the connection stays open.
func (c *conn) handle(data []byte) {
	var m inbound
	if err := json.Unmarshal(data, &m); err != nil {
		c.send(errorReply("", "invalid_json", "message is not a JSON object: "+err.Error()))
		return
	}
	ctx, cancel := context.WithTimeout(c.ctx, commandTimeout)
	defer cancel()
	switch m.Type {
	case "agent_invoke":
		c.invoke(ctx, &m)
	case "subscribe":
		c.subscribe(ctx, &m)
	case "cancel_run":
		c.cancelRun(ctx, &m)
	case "hello":
		c.send(errorReply(m.RequestID, "invalid_message", "already authenticated"))
	case "":
		c.send(errorReply(m.RequestID, "invalid_message", "message has no type"))
	default:
		c.send(errorReply(m.RequestID, "unknown_type", "unknown message type "+quote(m.Type)))
	}
}

func quote(s string) string {
	if len(s) > 64 {
		s = s[:64] + "…"
	}
	b, _ := json.Marshal(s)
	return string(b)
}

func (c *conn) fail(requestID string, err error) {
	var e *respond.Error
	if errors.As(err, &e) {
		c.send(errorReply(requestID, e.Code, e.Message))
		return
	}
	c.log.Error("client command failed", "request_id", requestID, "err", err)
	c.send(errorReply(requestID, "internal", "internal error"))
}

func (c *conn) invoke(ctx context.Context, m *inbound) {
	if m.AgentID == "" {
		c.send(errorReply(m.RequestID, "invalid_message", "agent_invoke needs agent_id"))
		return
	}
	var msg struct {
		Role    string `json:"role"`
		Content any    `json:"content"`
	}
	if len(m.Message) == 0 || json.Unmarshal(m.Message, &msg) != nil {
		c.send(errorReply(m.RequestID, "invalid_message", "agent_invoke needs message {role, content}"))
		return
	}
	content, ok := msg.Content.(string)
	if !ok || content == "" {
		c.send(errorReply(m.RequestID, "invalid_message", "message.content must be a non-empty string"))
		return
	}
	if msg.Role == "" {
		msg.Role = "user"
	}
	if msg.Role != "user" {
		c.send(errorReply(m.RequestID, "invalid_message", "message.role must be \"user\""))
		return
	}
	started, err := c.s.runs.StartRun(ctx, run.StartParams{
		UserID: c.user(), SessionID: m.SessionID, AgentID: m.AgentID, RequestID: m.RequestID,
		Message: agent.Message{Role: msg.Role, Content: content},
	})
	if err != nil {
		c.fail(m.RequestID, err)
		return
	}
	// Follow the session from just before this run's first event, so the
	// client receives run_started and everything after through the log.
	c.followSession(started.Run.SessionID, started.Events[0].Seq-1, false)
}

func (c *conn) subscribe(ctx context.Context, m *inbound) {
	if m.SessionID == "" || m.AfterSeq == nil || *m.AfterSeq < 0 {
		c.send(errorReply(m.RequestID, "invalid_message", "subscribe needs session_id and after_seq >= 0"))
		return
	}
	sess, err := c.s.st.SessionGet(ctx, m.SessionID)
	if errors.Is(err, store.ErrNotFound) || (err == nil && sess.UserID != c.user()) {
		// Another user's session is indistinguishable from none.
		c.send(errorReply(m.RequestID, "session_not_found", "no such session"))
		return
	}
	if err != nil {
		c.fail(m.RequestID, err)
		return
	}
	c.followSession(m.SessionID, *m.AfterSeq, true)
}

func (c *conn) cancelRun(ctx context.Context, m *inbound) {
	if m.RunID == "" {
		c.send(errorReply(m.RequestID, "invalid_message", "cancel_run needs run_id"))
		return
	}
	if _, err := c.s.runs.Cancel(ctx, run.CancelParams{RunID: m.RunID, UserID: c.user(), Reason: m.Reason}); err != nil {
		c.fail(m.RequestID, err)
	}
}

// followSession starts delivering a session's events after afterSeq. An
// explicit subscribe restarts delivery from the requested seq; an invoke on
// a session already followed keeps the running delivery.
func (c *conn) followSession(sessionID string, afterSeq int64, restart bool) {
	c.mu.Lock()
	old := c.subs[sessionID]
	if old != nil && !restart {
		c.mu.Unlock()
		return
	}
	delete(c.subs, sessionID)
	c.mu.Unlock()
	if old != nil {
		old.stop()
		old.sub.Close()
		<-old.done
	}
	ctx, stop := context.WithCancel(c.ctx)
	f := &follower{sub: c.s.log.Subscribe(sessionID, afterSeq), stop: stop, done: make(chan struct{})}
	c.mu.Lock()
	c.subs[sessionID] = f
	c.mu.Unlock()
	c.s.follow(c, sessionID, true)
	go c.deliver(ctx, f)
}

func (c *conn) deliver(ctx context.Context, f *follower) {
	defer close(f.done)
	for {
		evs, err := f.sub.Next(ctx)
		if err != nil {
			if !errors.Is(err, context.Canceled) && !errors.Is(err, eventlog.ErrSubscriptionClosed) {
				c.log.Warn("subscription failed", "session_id", f.sub.SessionID(), "err", err)
				c.send(errorReply("", "subscription_failed", "event delivery failed; subscribe again with your last seq"))
			}
			return
		}
		for i := range evs {
			if b := ClientMessage(&evs[i]); b != nil && !c.write(b) {
				return
			}
		}
	}
}
