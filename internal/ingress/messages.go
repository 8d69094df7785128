package ingress

import (
	"bytes"
	"encoding/json"
	"strconv"

	"github.com/agentplane/agentplane/internal/eventlog"
	"github.com/agentplane/agentplane/internal/jsonstr"
	"github.com/agentplane/agentplane/internal/store"
)

// clientTypes maps log event types to the message type clients see. Types
// not listed are internal (trace only) and never sent (DESIGN §4).
var clientTypes = map[string]string{
	eventlog.TypeRunStarted:        "run_started",
	eventlog.TypeAgentStreamDelta:  "delta",
	eventlog.TypeState:             "state",
	eventlog.TypeRunDone:           "done",
	eventlog.TypeRunFailed:         "error",
	eventlog.TypeRunCancelled:      "state",
	eventlog.TypeToolRequest:       "tool_request",
	eventlog.TypeApprovalCreated:   "approval_required",
	eventlog.TypeSubAgentCallStart: "sub_agent_call_start",
	eventlog.TypeSubAgentPartial:   "sub_agent_partial",
	eventlog.TypeSubAgentComplete:  "sub_agent_complete",
	eventlog.TypeSubAgentError:     "sub_agent_error",
	eventlog.TypeInputRequired:     "input_required",
}

// childInternal are the types a child run's clients do not get: the
// sub_agent_* events stand in for its start, its deltas and its end
// (DESIGN §11). Its states, tool requests and approvals reach the client
// as a root run's do. A child's question reaches it as sub_agent_complete
// with status "input_required": its caller, not the user, answers it.
var childInternal = map[string]bool{
	eventlog.TypeRunStarted:       true,
	eventlog.TypeAgentStreamDelta: true,
	eventlog.TypeRunDone:          true,
	eventlog.TypeRunFailed:        true,
	eventlog.TypeRunCancelled:     true,
	eventlog.TypeInputRequired:    true,
}

// ClientMessage renders a logged event as the client's JSON message: the
// envelope (type, session_id, seq, event_id, ts, run_id, and parent_run_id
// for a child run) followed by the payload's own fields, spliced in without
// re-encoding. It returns nil for internal events.
func ClientMessage(e *store.Event) []byte {
	typ, ok := clientTypes[e.Type]
	if !ok || (e.ParentRunID != "" && childInternal[e.Type]) {
		return nil
	}
	// Room for the envelope's keys and numbers (≤ 118 bytes) and its ids
	// (each plain ASCII as a rule, so no escapes), so the message is built
	// in one allocation: 160 bytes in all was short of a delta's envelope.
	b := make([]byte, 0, 128+len(typ)+len(e.SessionID)+len(e.EventID)+len(e.RunID)+len(e.ParentRunID)+len(e.Payload))
	b = append(b, `{"type":`...)
	b = jsonstr.Append(b, typ)
	b = append(b, `,"session_id":`...)
	b = jsonstr.Append(b, e.SessionID)
	b = append(b, `,"seq":`...)
	b = strconv.AppendInt(b, e.Seq, 10)
	b = append(b, `,"event_id":`...)
	b = jsonstr.Append(b, e.EventID)
	b = append(b, `,"ts":`...)
	b = strconv.AppendInt(b, e.TS, 10)
	b = append(b, `,"run_id":`...)
	b = jsonstr.Append(b, e.RunID)
	if e.ParentRunID != "" {
		b = append(b, `,"parent_run_id":`...)
		b = jsonstr.Append(b, e.ParentRunID)
	}
	p := bytes.TrimSpace(e.Payload)
	if len(p) > 2 && p[0] == '{' {
		inner := bytes.TrimSpace(p[1 : len(p)-1])
		if len(inner) > 0 {
			b = append(b, ',')
			b = append(b, inner...)
		}
	}
	return append(b, '}')
}

// inbound is every field any client message may carry; Type picks which
// ones matter.
type inbound struct {
	Type string `json:"type"`
	// TS is informational: any JSON number, fractions included (Python
	// clients send time.time()*1000).
	TS        clientTS        `json:"ts"`
	RequestID string          `json:"request_id"`
	UserID    string          `json:"user_id"`
	APIKey    string          `json:"api_key"`
	SessionID string          `json:"session_id"`
	AgentID   string          `json:"agent_id"`
	Message   json.RawMessage `json:"message"`
	// agent_invoke: start a fresh intention (DESIGN §12)
	NewIntention *bool `json:"new_intention"`
	// agent_invoke: the W3C trace context the run's span continues
	Traceparent string `json:"traceparent"`
	AfterSeq    *int64 `json:"after_seq"`
	RunID       string `json:"run_id"`
	Reason      string `json:"reason"`
	// tool_result
	ToolCallID string          `json:"tool_call_id"`
	OK         *bool           `json:"ok"`
	Result     json.RawMessage `json:"result"`
	Error      json.RawMessage `json:"error"`
	// approval_decision
	ApprovalID string `json:"approval_id"`
	Decision   string `json:"decision"`
}

// reply is a message that does not come from the log (no seq).
type reply struct {
	Type      string `json:"type"`
	TS        int64  `json:"ts"`
	RequestID string `json:"request_id,omitempty"`
	UserID    string `json:"user_id,omitempty"`
	SessionID string `json:"session_id,omitempty"`
	RunID     string `json:"run_id,omitempty"`
	Code      string `json:"code,omitempty"`
	Message   string `json:"message,omitempty"`
	LastSeq   *int64 `json:"last_seq,omitempty"` // invalid_after_seq
	// Details are an error's extra fields, as HTTP merges them into its
	// error object: retry_after (seconds) on errors a retry may cure, and
	// the current state on a conflict (a tool call's state, the recorded
	// approval, a run's status — DESIGN §2.2).
	Details map[string]any `json:"-"`
}

// MarshalJSON writes the reply's fields and then its details, a detail
// never replacing a field.
func (r *reply) MarshalJSON() ([]byte, error) {
	type plain reply
	b, err := json.Marshal((*plain)(r))
	if err != nil || len(r.Details) == 0 {
		return b, err
	}
	m := map[string]json.RawMessage{}
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, err
	}
	for k, v := range r.Details {
		if _, taken := m[k]; taken {
			continue
		}
		if m[k], err = json.Marshal(v); err != nil {
			return nil, err
		}
	}
	return json.Marshal(m)
}

func errorReply(requestID, code, message string) *reply {
	return &reply{Type: "error", TS: nowMS(), RequestID: requestID, Code: code, Message: message}
}
