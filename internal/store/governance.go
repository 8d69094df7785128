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
