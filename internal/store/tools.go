package store

import (
	"encoding/json"
	"slices"
)

// ToolRow is a registered tool. Definition is stored as it was given (the
// bytes round-trip unchanged on both databases); package tool compiles it.
type ToolRow struct {
	Name       string          `json:"tool_name"`
	Definition json.RawMessage `json:"definition"`
	CreatedAt  int64           `json:"created_at"`
	UpdatedAt  int64           `json:"updated_at"`
}

// ToolPutParams registers a tool or replaces its definition.
type ToolPutParams struct {
	Name       string
	Definition json.RawMessage
	At         int64
}

// Tool call kinds (ToolCall.Kind).
const (
	ToolKindServer = "server"
	ToolKindClient = "client"
	// ToolKindAgent is a call_<agent_id> tool (DESIGN §11): its execution
	// is a child run, and it may run RUNNING with no deadline (TimeoutMS 0).
	ToolKindAgent = "agent"
	// ToolKindMCP calls are executed by this platform like server calls,
	// as tools/call requests to an MCP server (DESIGN §13).
	ToolKindMCP = "mcp"
)

// ToolCall statuses (DESIGN §8).
const (
	ToolCallCreated         = "CREATED"
	ToolCallPolicyChecked   = "POLICY_CHECKED"
	ToolCallBlocked         = "BLOCKED"
	ToolCallWaitingApproval = "WAITING_APPROVAL"
	ToolCallDispatched      = "DISPATCHED"
	ToolCallRunning         = "RUNNING"
	ToolCallWaitingClient   = "WAITING_CLIENT"
	ToolCallSucceeded       = "SUCCEEDED"
	ToolCallFailed          = "FAILED"
	ToolCallRejected        = "REJECTED"
	ToolCallTimeout         = "TIMEOUT"
	ToolCallExpired         = "EXPIRED"
	ToolCallCancelled       = "CANCELLED"
)

// ToolCallActiveStatuses are the non-terminal tool call states.
var ToolCallActiveStatuses = []string{
	ToolCallCreated, ToolCallPolicyChecked, ToolCallWaitingApproval,
	ToolCallDispatched, ToolCallRunning, ToolCallWaitingClient,
}

// ToolCallWaitingStatuses are the states that must carry a deadline
// (deadline_at): the approval expiry while WAITING_APPROVAL, the tool
// timeout while DISPATCHED, RUNNING or WAITING_CLIENT. The schema refuses
// such a row without one, so nothing waits forever (DESIGN §2.5) — except
// an agent call RUNNING with no timeout (TimeoutMS 0): its child run's end
// settles it, and that run ends with its parent's.
var ToolCallWaitingStatuses = []string{
	ToolCallWaitingApproval, ToolCallDispatched, ToolCallRunning, ToolCallWaitingClient,
}

// ToolCallTerminal reports whether status is a final tool call state.
func ToolCallTerminal(status string) bool {
	switch status {
	case ToolCallSucceeded, ToolCallFailed, ToolCallBlocked, ToolCallRejected,
		ToolCallTimeout, ToolCallExpired, ToolCallCancelled:
		return true
	}
	return false
}

// ToolCallTransitions is the ToolCall state machine (DESIGN §8): the states
// each state may move to. ToolCallTransition refuses a From→Status pair that
// is not listed here (a programming error, not a conflict). FAILED is
// reachable from DISPATCHED (e.g. client_offline, endpoint refused before the
// request left) and from RUNNING and WAITING_CLIENT; TIMEOUT from every state
// that runs on the tool timeout; CANCELLED from every non-terminal state.
var ToolCallTransitions = map[string][]string{
	ToolCallCreated:         {ToolCallPolicyChecked, ToolCallCancelled},
	ToolCallPolicyChecked:   {ToolCallBlocked, ToolCallWaitingApproval, ToolCallDispatched, ToolCallCancelled},
	ToolCallWaitingApproval: {ToolCallDispatched, ToolCallRejected, ToolCallExpired, ToolCallCancelled},
	ToolCallDispatched:      {ToolCallRunning, ToolCallWaitingClient, ToolCallFailed, ToolCallTimeout, ToolCallCancelled},
	ToolCallRunning:         {ToolCallSucceeded, ToolCallFailed, ToolCallTimeout, ToolCallCancelled},
	ToolCallWaitingClient:   {ToolCallSucceeded, ToolCallFailed, ToolCallTimeout, ToolCallCancelled},
}

// ToolCallCanTransition reports whether from→to is an edge of the state
// machine.
func ToolCallCanTransition(from, to string) bool {
	return slices.Contains(ToolCallTransitions[from], to)
}

// ToolCall is one call of a tool by a run: a durable state machine. The
// HTTP view (DESIGN §6) maps Status to its lower-case "status" and exposes
// the raw value as "state"; build that view rather than serialising this
// row, which carries internal columns.
type ToolCall struct {
	ToolCallID string `json:"tool_call_id"`
	RunID      string `json:"run_id"`
	SessionID  string `json:"session_id"`
	AgentID    string `json:"agent_id"`
	ToolName   string `json:"tool_name"`
	// Kind is ToolKindServer, ToolKindClient, ToolKindAgent or ToolKindMCP.
	Kind   string          `json:"kind"`
	Status string          `json:"status"`
	Args   json.RawMessage `json:"args"`
	Result json.RawMessage `json:"result,omitempty"`
	Error  json.RawMessage `json:"error,omitempty"`
	// IdempotencyKey is the agent's key, unique within the run ("" = none).
	IdempotencyKey string `json:"idempotency_key,omitempty"`
	// ArgsHash lets a retry with the same key tell same args (replay) from
	// different args (409).
	ArgsHash   string `json:"-"`
	ApprovalID string `json:"approval_id,omitempty"`
	// Policy is the decision record (decision, matched rule).
	Policy json.RawMessage `json:"policy,omitempty"`
	// DeadlineAt is the deadline of the current waiting state in ms, 0 when
	// none (see ToolCallWaitingStatuses). Terminal calls have none.
	DeadlineAt int64 `json:"deadline_at,omitempty"`
	// TimeoutMS is the tool timeout this call runs under; 0 (agent calls
	// only) means none.
	TimeoutMS int64 `json:"timeout_ms"`
	// Attempts counts claims to run (ToolCallTransitionParams.IncAttempts).
	Attempts  int   `json:"attempts"`
	CreatedAt int64 `json:"created_at"`
	UpdatedAt int64 `json:"updated_at"`
	EndedAt   int64 `json:"ended_at,omitempty"`
}

// ToolCallInsertParams inserts a CREATED tool call. Empty Args store {}.
type ToolCallInsertParams struct {
	ToolCallID     string
	RunID          string
	SessionID      string
	AgentID        string
	ToolName       string
	Kind           string
	Args           json.RawMessage
	IdempotencyKey string
	ArgsHash       string
	TimeoutMS      int64
	At             int64
	// Policy, when set, is the policy decision taken before the insert: the
	// call is inserted POLICY_CHECKED with it (CREATED → POLICY_CHECKED in
	// the same statement, one round trip fewer).
	Policy json.RawMessage
	// ClaimDeadlineAt, when above zero (Policy set), inserts the call
	// already dispatched and claimed by the inserter: RUNNING, attempt 1,
	// due at ClaimDeadlineAt — what POLICY_CHECKED → DISPATCHED → RUNNING
	// would leave, without the UPDATE (issue 13).
	ClaimDeadlineAt int64
}

// ToolCallTransitionParams moves tool call ID to Status if it is currently
// in one of From (every From→Status must be in ToolCallTransitions).
// Result, Error and Policy are stored when non-empty (empty keeps the
// stored value). A terminal Status sets ended_at and clears deadline_at
// whatever DeadlineAt says. Every status change sets updated_at to At.
type ToolCallTransitionParams struct {
	ID     string
	From   []string
	Status string
	At     int64
	Result json.RawMessage
	Error  json.RawMessage
	// ApprovalID: nil leaves it, a pointer sets it ("" clears).
	ApprovalID *string
	Policy     json.RawMessage
	// DeadlineAt: nil leaves it, a pointer to 0 clears it, otherwise sets it.
	DeadlineAt *int64
	// IncAttempts adds one to attempts (the claim to run).
	IncAttempts bool
	// IfDueBy, when non-zero, also requires deadline_at <= IfDueBy: the
	// sweeper's guard, so a call whose deadline moved on since it was listed
	// (for example approved and given a fresh tool timeout) is left alone.
	IfDueBy int64
	// Via, when set, is a state passed through in the same statement:
	// every From→Via and Via→Status must be edges (a dispatch and the
	// claim to run, in one UPDATE).
	Via string
}

// ToolCallListDueParams lists non-terminal calls whose deadline is at or
// before Now, earliest deadline first.
type ToolCallListDueParams struct {
	Now   int64
	Limit int
}

// Approval statuses (DESIGN §8).
const (
	ApprovalPending   = "PENDING"
	ApprovalApproved  = "APPROVED"
	ApprovalRejected  = "REJECTED"
	ApprovalExpired   = "EXPIRED"
	ApprovalCancelled = "CANCELLED"
)

// Approval is a human decision a tool call waits for.
type Approval struct {
	ApprovalID  string `json:"approval_id"`
	ToolCallID  string `json:"tool_call_id"`
	RunID       string `json:"run_id"`
	SessionID   string `json:"session_id"`
	ToolName    string `json:"tool_name"`
	Status      string `json:"status"`
	ArgsSummary string `json:"args_summary"`
	ExpiresAt   int64  `json:"expires_at"`
	DecidedBy   string `json:"decided_by,omitempty"`
	Reason      string `json:"reason,omitempty"`
	DecidedAt   int64  `json:"decided_at,omitempty"`
	CreatedAt   int64  `json:"created_at"`
}

// ApprovalInsertParams inserts a PENDING approval; ErrConflict when the id
// is taken or the tool call already has an approval.
type ApprovalInsertParams struct {
	ApprovalID  string
	ToolCallID  string
	RunID       string
	SessionID   string
	ToolName    string
	ArgsSummary string
	ExpiresAt   int64
	At          int64
}

// ApprovalDecideParams records the decision on a PENDING approval. Status is
// APPROVED, REJECTED, EXPIRED or CANCELLED. The deadline is part of the
// guard: APPROVED and REJECTED need At < expires_at, EXPIRED needs
// At >= expires_at; CANCELLED is allowed at any time.
type ApprovalDecideParams struct {
	ID        string
	Status    string
	DecidedBy string
	Reason    string
	At        int64
}

// ApprovalListParams lists approvals, oldest first (newest first with
// Desc), optionally only those in Status, of SessionID and/or of the
// sessions of UserID, after the cursor After.
type ApprovalListParams struct {
	Status    string
	SessionID string
	UserID    string
	Desc      bool
	After     *Cursor
	Limit     int
}
