package ingress

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/agentplane/agentplane/internal/agent"
	"github.com/agentplane/agentplane/internal/auth"
	"github.com/agentplane/agentplane/internal/eventlog"
	"github.com/agentplane/agentplane/internal/ids"
	"github.com/agentplane/agentplane/internal/respond"
	"github.com/agentplane/agentplane/internal/run"
	"github.com/agentplane/agentplane/internal/store"
	"github.com/agentplane/agentplane/internal/toolsvc"
	"github.com/agentplane/agentplane/internal/tracing"
)

// commandTimeout bounds one client command's work against the orchestrator.
const commandTimeout = 15 * time.Second

// handle runs one message. Every failure is an error reply with the
// offending request_id; the connection stays open.
func (c *conn) handle(data []byte) {
	cmd, bad := decodeCommand(data)
	if bad != nil {
		c.send(bad)
		return
	}
	ctx, cancel := context.WithTimeout(c.ctx, commandTimeout)
	defer cancel()
	// Each command takes a token of the user's rate limit; a refusal is
	// an error reply and the connection stays open.
	if err := c.s.keys.Limit(ctx, auth.Principal{Kind: auth.User, UserID: c.user()}); err != nil {
		c.fail(cmd.RequestID, err)
		return
	}
	switch cmd.Type {
	case "agent_invoke":
		c.invoke(ctx, cmd)
	case "subscribe":
		c.subscribe(ctx, cmd)
	case "cancel_run":
		c.cancelRun(ctx, cmd)
	case "tool_result":
		c.toolResult(ctx, cmd)
	case "approval_decision":
		c.approvalDecision(ctx, cmd)
	}
}

func (c *conn) fail(requestID string, err error) {
	if e := respond.As(err); e != nil {
		r := errorReply(requestID, e.Code, e.Message)
		r.Details = e.Details
		c.send(r)
		return
	}
	if respond.Cancelled(c.ctx, err) {
		// The connection is closing; nobody reads the answer.
		c.log.Debug("client command cancelled", "request_id", requestID, "err", err)
		return
	}
	c.log.Error("client command failed", "request_id", requestID, "err", err)
	c.send(errorReply(requestID, "internal", "internal error"))
}

func (c *conn) invoke(ctx context.Context, cmd *command) {
	// The connection counts as the session's client before the run starts:
	// an agent that calls a client tool at once must not find the session
	// without one (client_offline) in the moment before followSession.
	sessionID := cmd.SessionID
	if sessionID == "" {
		sessionID = ids.New("ses")
	}
	c.s.follow(c, sessionID, true)
	// Other processes learn of the connection through the store; the agent
	// may ask one of them for a client tool as soon as the run starts.
	c.s.presence.flushed(ctx, sessionID)
	// A traceparent sent with the message parents the run's span.
	ctx = tracing.WithTraceparent(ctx, cmd.Traceparent)
	started, err := c.s.runs.StartRun(ctx, run.StartParams{
		UserID: c.user(), SessionID: sessionID, AgentID: cmd.AgentID, RequestID: cmd.RequestID,
		Message: agent.Message{Role: "user", Content: cmd.Content}, NewIntention: cmd.NewIntention,
	})
	if err != nil {
		c.mu.Lock()
		following := c.subs[sessionID] != nil
		c.mu.Unlock()
		if !following {
			c.s.follow(c, sessionID, false)
		}
		c.fail(cmd.RequestID, err)
		return
	}
	// Follow the session from just before this run's first event, so the
	// client receives run_started and everything after through the log.
	c.followSession(started.Run.SessionID, started.Events[0].Seq-1, false)
}

func (c *conn) subscribe(ctx context.Context, cmd *command) {
	sess, err := c.s.st.SessionGet(ctx, cmd.SessionID)
	if errors.Is(err, store.ErrNotFound) || (err == nil && sess.UserID != c.user()) {
		// Another user's session is indistinguishable from none.
		c.fail(cmd.RequestID, run.ErrSessionNotFound)
		return
	}
	if err != nil {
		c.fail(cmd.RequestID, err)
		return
	}
	if cmd.AfterSeq > sess.LastSeq {
		// A cursor past the end would skip the next events as already
		// seen; the client is told where the session ends instead.
		r := errorReply(cmd.RequestID, "invalid_after_seq", fmt.Sprintf("after_seq %d is past the session's last seq %d", cmd.AfterSeq, sess.LastSeq))
		r.SessionID, r.LastSeq = cmd.SessionID, &sess.LastSeq
		c.send(r)
		return
	}
	c.followSession(cmd.SessionID, cmd.AfterSeq, true)
	c.resendPending(ctx, cmd.SessionID, cmd.AfterSeq)
}

func (c *conn) toolResult(ctx context.Context, cmd *command) {
	if c.s.opts.Tools == nil {
		c.send(errorReply(cmd.RequestID, "unknown_type", "tool calls are not enabled"))
		return
	}
	_, err := c.s.opts.Tools.SubmitClientResult(ctx, toolsvc.ClientResult{
		UserID: c.user(), RunID: cmd.RunID, ToolCallID: cmd.ToolCallID, OK: cmd.OK, Result: cmd.Result, Error: cmd.Error,
	})
	if err != nil {
		c.fail(cmd.RequestID, err)
	}
}

func (c *conn) approvalDecision(ctx context.Context, cmd *command) {
	if c.s.opts.Tools == nil {
		c.send(errorReply(cmd.RequestID, "unknown_type", "approvals are not enabled"))
		return
	}
	_, err := c.s.opts.Tools.Decide(ctx, toolsvc.DecideParams{
		ApprovalID: cmd.ApprovalID, RunID: cmd.RunID, UserID: c.user(), Decision: cmd.Decision, Reason: cmd.Reason,
	})
	if err != nil {
		c.fail(cmd.RequestID, err)
	}
}

func (c *conn) cancelRun(ctx context.Context, cmd *command) {
	if _, err := c.s.runs.Cancel(ctx, run.CancelParams{RunID: cmd.RunID, UserID: c.user(), Reason: cmd.Reason}); err != nil {
		c.fail(cmd.RequestID, err)
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
		<-old.done
	}
	ctx, stop := context.WithCancel(c.ctx)
	f := newFollower(c.s.log.Subscribe(sessionID, afterSeq), stop, afterSeq)
	c.mu.Lock()
	c.subs[sessionID] = f
	c.mu.Unlock()
	c.s.follow(c, sessionID, true)
	go c.deliver(ctx, f)
}

// deliverRetryMax bounds the wait between a delivery's attempts to read the
// store while it fails.
const deliverRetryMax = 5 * time.Second

func (c *conn) deliver(ctx context.Context, f *follower) {
	defer close(f.done)
	defer func() { f.sub.Close() }() // the subscription of the moment
	backoff := time.Duration(0)
	for {
		evs, err := f.sub.Next(ctx)
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, eventlog.ErrSubscriptionClosed) {
				return
			}
			// The store could not be read: try again rather than give up.
			// A delivery that ended here stayed the session's follower —
			// its client tools dispatched, a later agent_invoke on the
			// session kept it — while nothing reached the client any more.
			if backoff == 0 {
				c.log.Warn("event delivery failed; retrying", "session_id", f.sessionID, "err", err)
			}
			backoff = min(max(2*backoff, 100*time.Millisecond), deliverRetryMax)
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
			// A fresh subscription from the cursor reads the store first:
			// the failed one may have lost the wake-up (another process's
			// events) that sent it there.
			sub := c.s.log.Subscribe(f.sessionID, f.sub.Cursor())
			f.sub.Close()
			f.sub = sub
			continue
		}
		backoff = 0
		msgs := make([][]byte, 0, len(evs))
		for i := range evs {
			if b := ClientMessage(&evs[i]); b != nil {
				msgs = append(msgs, b)
			}
		}
		if len(msgs) > 0 && !c.writeAll(msgs) {
			return
		}
		if len(evs) > 0 {
			f.sent(evs[len(evs)-1].Seq)
		}
	}
}
