package toolsvc

import (
	"encoding/json"
	"strings"

	"github.com/agentplane/agentplane/internal/store"
)

// API statuses of a tool call (DESIGN §6 status mapping).
const (
	StatusPending   = "pending"
	StatusSucceeded = "succeeded"
	StatusFailed    = "failed"
)

// CallView is a tool call as agents see it (DESIGN §6): status is the
// mapped pending/succeeded/failed, state the raw state machine value.
type CallView struct {
	ToolCallID string          `json:"tool_call_id"`
	ToolName   string          `json:"tool_name"`
	RunID      string          `json:"run_id"`
	Status     string          `json:"status"`
	State      string          `json:"state"`
	Result     json.RawMessage `json:"result,omitempty"`
	Error      *CallError      `json:"error,omitempty"`
	ApprovalID string          `json:"approval_id,omitempty"`
	DeadlineAt int64           `json:"deadline_at,omitempty"`
	CreatedAt  int64           `json:"created_at"`
	UpdatedAt  int64           `json:"updated_at"`
	EndedAt    int64           `json:"ended_at,omitempty"`
}

// CallError is a failed call's error. Code is the lower-case state, except
// for FAILED, whose code names the cause when the platform knows it
// (client_offline, tool_http_error, tool_unreachable, tool_protocol_error,
// tool_error) and is "failed" otherwise. Detail holds what the tool or
// client itself reported.
type CallError struct {
	Code    string          `json:"code"`
	Message string          `json:"message"`
	Detail  json.RawMessage `json:"detail,omitempty"`
}

// storedError is the error column of a tool call.
type storedError struct {
	Code    string          `json:"code"`
	Message string          `json:"message"`
	Detail  json.RawMessage `json:"detail,omitempty"`
}

// apiStatus maps a state to its API status.
func apiStatus(state string) string {
	switch {
	case state == store.ToolCallSucceeded:
		return StatusSucceeded
	case store.ToolCallTerminal(state):
		return StatusFailed
	}
	return StatusPending
}

// View renders c for the API.
func View(c *store.ToolCall) *CallView {
	v := &CallView{
		ToolCallID: c.ToolCallID, ToolName: c.ToolName, RunID: c.RunID,
		Status: apiStatus(c.Status), State: c.Status, ApprovalID: c.ApprovalID,
		DeadlineAt: c.DeadlineAt, CreatedAt: c.CreatedAt, UpdatedAt: c.UpdatedAt, EndedAt: c.EndedAt,
	}
	switch v.Status {
	case StatusSucceeded:
		v.Result = c.Result
		if len(v.Result) == 0 {
			v.Result = json.RawMessage("null")
		}
	case StatusFailed:
		v.Error = callError(c)
	}
	return v
}

func callError(c *store.ToolCall) *CallError {
	e := &CallError{Code: strings.ToLower(c.Status)}
	var se storedError
	if len(c.Error) > 0 && json.Unmarshal(c.Error, &se) == nil {
		e.Message, e.Detail = se.Message, se.Detail
		if c.Status == store.ToolCallFailed && se.Code != "" {
			e.Code = se.Code
		}
	}
	if e.Message == "" {
		e.Message = "the tool call ended " + strings.ToLower(c.Status)
	}
	return e
}

func errorJSON(code, message string, detail json.RawMessage) json.RawMessage {
	b, _ := json.Marshal(storedError{Code: code, Message: message, Detail: detail})
	return b
}
