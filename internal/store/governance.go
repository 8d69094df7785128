package store

import "encoding/json"

// Governance rows (issue 14, DESIGN §15): the audit log, user keys, rate
// buckets, per-user connection counts, the run queue and retention.

// AuditEntry is one administrative action. Rows are append-only.
type AuditEntry struct {
	AuditID string          `json:"audit_id"`
	Actor   string          `json:"actor"`
	Action  string          `json:"action"`
	Target  string          `json:"target"`
	TS      int64           `json:"ts"`
	Detail  json.RawMessage `json:"detail"`
}

// AuditInsertParams records an action. Empty Detail stores {}.
type AuditInsertParams struct {
	AuditID string
	Actor   string
	Action  string
	Target  string
	TS      int64
	Detail  json.RawMessage
}

// AuditListParams pages through the audit log, newest first. Since and
// Until bound ts (inclusive; 0 = unbounded). A page continues after the
// entry (BeforeTS, BeforeID): entries strictly older in (ts, audit_id)
// order.
type AuditListParams struct {
	Actor    string
	Action   string
	Since    int64
	Until    int64
	BeforeTS int64
	BeforeID string
	Limit    int
}

// UserKey is a user's API key managed over the API; only its hash is kept.
type UserKey struct {
	KeyID     string `json:"key_id"`
	UserID    string `json:"user_id"`
	KeyHash   string `json:"-"`
	CreatedAt int64  `json:"created_at"`
}

// AgentKeyGraceParams keeps a replaced agent key valid until ExpiresAt.
type AgentKeyGraceParams struct {
	KeyHash   string
	AgentID   string
	ExpiresAt int64
	At        int64
}

// RateTakeParams takes up to Want tokens from the shared token bucket Key
// (Burst tokens at most, refilled at Rate per second) at At (ms). A bucket
// seen for the first time starts full.
type RateTakeParams struct {
	Key   string
	Rate  float64
	Burst float64
	Want  float64
	At    int64
}

// RateTaken is what a take got: Granted whole tokens (0 when the bucket had
// less than one) and the Tokens left after it.
type RateTaken struct {
	Granted float64
	Tokens  float64
}

// UserConnectionAdmitParams counts one more WebSocket connection of UserID
// on InstanceID, unless the user's connections on live processes (heartbeat
// at or after AliveSince) already reach Max.
type UserConnectionAdmitParams struct {
	UserID     string
	InstanceID string
	Max        int
	AliveSince int64
	At         int64
}

// SessionActivity is what retention needs to know of a session.
type SessionActivity struct {
	SessionID string
	CreatedAt int64
	// LastActivity is the latest of its creation, its runs' starts and
	// ends, and its last event.
	LastActivity int64
	// Active: a run of it has not ended (running, paused or queued).
	Active bool
	// Agents are the agents of its runs.
	Agents []string
}

// SessionListByAgeParams pages through sessions created before Before, by
// (created_at, session_id), after the given position.
type SessionListByAgeParams struct {
	Before       int64
	AfterCreated int64
	AfterID      string
	Limit        int
}

// SessionPurgeBeginParams decides to delete a session: in one transaction
// holding the session's row, it checks that no run of it is active or
// queued and, when IdleBefore is set, that its last activity is older, and
// records the purge. ErrNotFound: no such session; ErrConflict: a run is
// active, or it was active since IdleBefore, or another purge holds it.
type SessionPurgeBeginParams struct {
	SessionID  string
	IdleBefore int64
	Owner      string
	Reason     string
	At         int64
}

// SessionPurgeCounts are the rows a purge deleted, by table.
type SessionPurgeCounts map[string]int64

// SessionPurge is a purge under way (session_purges).
type SessionPurge struct {
	SessionID string
	Owner     string
	StartedAt int64
	Reason    string
}

// QueuedRun is a run waiting in the queue, as admission and position
// updates read it.
type QueuedRun struct {
	RunID     string
	SessionID string
	AgentID   string
	UserID    string
	QueuedAt  int64
	// Position is the position its client was last told (0: none yet).
	Position int
}

// RunAdmitParams admits a queued run: QUEUED → RUNNING, owned by Owner,
// started at At.
type RunAdmitParams struct {
	RunID string
	Owner string
	At    int64
}
