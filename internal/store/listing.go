package store

// Cursor is a keyset position in a listing ordered by (Key, ID): the last
// row of the previous page. Key is the ordering timestamp (created_at or
// started_at, ms); ID breaks ties between rows of the same millisecond.
type Cursor struct {
	Key int64
	ID  string
}

// Session activity as GET /v1/sessions reports and filters it.
const (
	SessionActive = "active" // some run of the session has not ended
	SessionEnded  = "ended"  // every run has ended (or there is none)
)

// SessionSummary is a session with what an operator scans a list for.
type SessionSummary struct {
	Session
	// LastEventAt is the ts of the session's last event (0: none yet).
	LastEventAt int64 `json:"last_event_at"`
	// Status is SessionActive or SessionEnded.
	Status string `json:"status"`
	// RootRuns counts the runs users started (not agents' child runs).
	RootRuns int `json:"root_runs"`
	// Agents are the agents that ran in the session, first seen first.
	Agents []string `json:"agents"`
}

// SessionListParams filters GET /v1/sessions. Results are newest first
// (created_at, then session_id, descending); After is the last row of the
// previous page. Since/Until bound created_at (ms; 0 = open), IDPrefix
// matches the start of the session id.
type SessionListParams struct {
	UserID   string
	AgentID  string
	Status   string // "", SessionActive or SessionEnded
	IDPrefix string
	Since    int64
	Until    int64
	After    *Cursor
	Limit    int
}

// RunListParams filters GET /v1/runs. Results are newest first (started_at,
// then run_id, descending) unless Asc. Statuses keeps runs in any of them;
// RootOnly keeps runs without a parent; ParentRunID keeps that run's
// children. Since/Until bound started_at (ms; 0 = open).
type RunListParams struct {
	SessionID   string
	UserID      string
	AgentID     string
	Statuses    []string
	ParentRunID string
	RootOnly    bool
	Since       int64
	Until       int64
	Asc         bool
	After       *Cursor
	Limit       int
}

// Usage groupings (UsageParams.GroupBy).
const (
	UsageByAgent = "agent"
	UsageByModel = "model"
	UsageByUser  = "user"
)

// UsageParams sums llm_call_done events with Since <= ts < Until (0 = open)
// by GroupBy. AgentSessionPrefix names the sessions holding agents'
// run-less calls ("agent:" + agent id), so those count for their agent.
type UsageParams struct {
	GroupBy            string
	Since              int64
	Until              int64
	AgentSessionPrefix string
}

// UsageRow is one group of UsageSummary: token counts, the estimated cost
// (the sum of the events' estimated_cost) and the number of calls.
type UsageRow struct {
	Key              string  `json:"key"`
	LLMCalls         int64   `json:"llm_calls"`
	PromptTokens     int64   `json:"prompt_tokens"`
	CompletionTokens int64   `json:"completion_tokens"`
	CachedTokens     int64   `json:"cached_tokens"`
	ReasoningTokens  int64   `json:"reasoning_tokens"`
	TotalTokens      int64   `json:"total_tokens"`
	EstimatedCost    float64 `json:"estimated_cost"`
}
