package ingress

import (
	"bytes"
	"encoding/json"
	"errors"
	"time"

	"github.com/agentplane/agentplane/internal/respond"
)

// command is a validated client message after hello.
type command struct {
	Type      string
	RequestID string
	SessionID string
	AgentID   string
	Content   string // agent_invoke
	// NewIntention (agent_invoke) starts a fresh intention instead of
	// answering the session's pending question.
	NewIntention bool
	Traceparent  string // agent_invoke: the caller's trace context, if any
	AfterSeq     int64  // subscribe
	RunID        string // cancel_run, tool_result, approval_decision
	Reason       string // cancel_run, approval_decision
	// tool_result
	ToolCallID string
	OK         bool
	Result     json.RawMessage
	Error      json.RawMessage
	// approval_decision
	ApprovalID string
	Decision   string
}

// decodeCommand parses and validates one client message. It is pure (no
// I/O), so it can be fuzzed: any input yields either a command or an error
// reply with a code, never a panic.
func decodeCommand(data []byte) (*command, *reply) {
	var m inbound
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, errorReply(requestIDOf(data), "invalid_json", "message is not a JSON object: "+respond.JSONMessage(err))
	}
	c := &command{Type: m.Type, RequestID: m.RequestID, SessionID: m.SessionID, AgentID: m.AgentID, RunID: m.RunID, Reason: m.Reason}
	bad := func(msg string) (*command, *reply) { return nil, errorReply(m.RequestID, "invalid_message", msg) }
	switch m.Type {
	case "agent_invoke":
		if m.AgentID == "" {
			return bad("agent_invoke needs agent_id")
		}
		var msg struct {
			Role    string `json:"role"`
			Content any    `json:"content"`
		}
		if len(m.Message) == 0 || json.Unmarshal(m.Message, &msg) != nil {
			return bad("agent_invoke needs message {role, content}")
		}
		content, ok := msg.Content.(string)
		if !ok || content == "" {
			return bad("message.content must be a non-empty string")
		}
		if msg.Role != "" && msg.Role != "user" {
			return bad(`message.role must be "user"`)
		}
		c.Content = content
		c.NewIntention = m.NewIntention != nil && *m.NewIntention
		c.Traceparent = m.Traceparent
	case "subscribe":
		if m.SessionID == "" || m.AfterSeq == nil || *m.AfterSeq < 0 {
			return bad("subscribe needs session_id and after_seq >= 0")
		}
		c.AfterSeq = *m.AfterSeq
	case "cancel_run":
		if m.RunID == "" {
			return bad("cancel_run needs run_id")
		}
	case "tool_result":
		if m.ToolCallID == "" || m.OK == nil {
			return bad("tool_result needs tool_call_id and ok")
		}
		c.ToolCallID, c.OK = m.ToolCallID, *m.OK
		if c.OK {
			c.Result = m.Result
		} else {
			if len(m.Error) == 0 || m.Error[0] != '{' {
				return bad("tool_result with ok:false needs error {code, message}")
			}
			c.Error = m.Error
		}
	case "approval_decision":
		if m.ApprovalID == "" {
			return bad("approval_decision needs approval_id")
		}
		if m.Decision != "approve" && m.Decision != "reject" {
			return bad(`approval_decision needs decision "approve" or "reject"`)
		}
		c.ApprovalID, c.Decision = m.ApprovalID, m.Decision
	case "hello":
		return bad("already authenticated")
	case "":
		return bad("message has no type")
	default:
		return nil, errorReply(m.RequestID, "unknown_type", "unknown message type "+quote(m.Type))
	}
	return c, nil
}

// decodeHello parses the first message; ok is false unless it is a hello
// with a user id.
func decodeHello(data []byte) (userID, apiKey, requestID string, ok bool) {
	var m inbound
	if err := json.Unmarshal(data, &m); err != nil {
		return "", "", requestIDOf(data), false
	}
	if m.Type != "hello" || m.UserID == "" {
		return "", "", m.RequestID, false
	}
	return m.UserID, m.APIKey, m.RequestID, true
}

// requestIDOf recovers the request_id of a message that did not decode as
// a whole (a field of the wrong type), so its error reply still names it
// (DESIGN §4); "" when there is none, it is not a string, or the message
// is not JSON.
func requestIDOf(data []byte) string {
	var m struct {
		RequestID json.RawMessage `json:"request_id"`
	}
	var id string
	if json.Unmarshal(data, &m) != nil || json.Unmarshal(m.RequestID, &id) != nil {
		return ""
	}
	return id
}

// requestIDOfPrefix finds the top-level request_id of a message cut short
// (the first bytes of one over the size limit), reading its fields in
// order until one is request_id or they run out: a message_too_large reply
// names the request it refuses when its request_id came before the bulk.
func requestIDOfPrefix(data []byte) string {
	dec := json.NewDecoder(bytes.NewReader(data))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return ""
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return ""
		}
		if tok == "request_id" {
			v, _ := dec.Token()
			id, _ := v.(string)
			return id
		}
		var skipped json.RawMessage
		if err := dec.Decode(&skipped); err != nil {
			return ""
		}
	}
	return ""
}

// clientTS is a client message's ts: any JSON number, or null, and nothing
// is kept. The server never reads it, so it must not refuse a number an
// int64 cannot hold, such as a fraction of a millisecond.
type clientTS struct{}

// UnmarshalJSON implements json.Unmarshaler. b is one valid JSON value.
func (*clientTS) UnmarshalJSON(b []byte) error {
	switch b[0] {
	case '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9', 'n':
		return nil
	case '"':
		return errors.New("ts: expected a number, got string")
	case 't', 'f':
		return errors.New("ts: expected a number, got bool")
	case '[':
		return errors.New("ts: expected a number, got array")
	}
	return errors.New("ts: expected a number, got object")
}

func quote(s string) string {
	if len(s) > 64 {
		s = s[:64] + "…"
	}
	b, _ := json.Marshal(s)
	return string(b)
}

func nowMS() int64 { return time.Now().UnixMilli() }
