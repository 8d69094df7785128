// Package store is the persistence seam: the rows agentplane keeps, the
// parameters to change them, and the sentinels every driver maps its errors to.
// One implementation (package sqlstore) serves SQLite and PostgreSQL; the
// conformance suite in storetest runs against both.
package store

import (
	"context"
	"encoding/json"
	"errors"
)

// Sentinels. Drivers map their own errors to these in one place so callers
// never look at SQL error codes.
var (
	// ErrNotFound: no row with that id.
	ErrNotFound = errors.New("not found")
	// ErrConflict: a guarded transition matched no row (the state moved on),
	// a unique constraint refused the insert, or a version check failed.
	ErrConflict = errors.New("conflict")
	// ErrDuplicate: an insert met an existing row with the same idempotency
	// key; the existing row is returned with it so the caller can compare
	// (same request → replay, different → conflict). It is not ErrConflict.
	ErrDuplicate = errors.New("duplicate")
	// ErrUnavailable: the database cannot be reached or cannot take work
	// now (connection refused or lost, server restarting, too many
	// connections, SQLite busy past its timeout). Nothing was done; the
	// request may be retried later. HTTP answers 503 store_unavailable with
	// Retry-After (package respond).
	ErrUnavailable = errors.New("store unavailable")
	// ErrRunEnded is a transaction's failure when a run it asserted
	// active had ended (RunsActiveAsserter).
	ErrRunEnded = errors.New("a run has ended")
	// ErrRunNotQuiet is a transaction's failure when a run it ended as
	// quiet was not active, or not quiet (RunQuietEnder).
	ErrRunNotQuiet = errors.New("the run was not active or not quiet")
	// ErrSessionMoved is a transaction's failure when a session it assumed
	// as last seen had changed (SessionAssumer).
	ErrSessionMoved = errors.New("the session is not as it was seen")
)

// Store is a database: Queries run in their own implicit transaction, InTx
// groups several into one.
type Store interface {
	Queries
	// InTx runs fn in one transaction; an error from fn rolls back.
	InTx(ctx context.Context, fn func(tx Queries) error) error
	// Dialect is "sqlite" or "postgres".
	Dialect() string
	// Ping checks the database answers (readiness).
	Ping(ctx context.Context) error
	Close() error
}

// Parallel is offered by a transaction's Queries when independent work in
// it can share round trips to the database (PostgreSQL's pipelined
// transactions): fns run at the same time, each with Queries of its own,
// and the statements they wait for go out together. The fns must not
// depend on each other's writes. Use RunParallel, which falls back to one
// after the other.
type Parallel interface {
	Parallel(ctx context.Context, fns []func(tx Queries) error) error
}

// RunsActiveAsserter is offered by Queries that can check runs are still
// active without waiting for the answer (PostgreSQL's pipelined
// transactions). AssertRunsActive share-locks runIDs' rows, as RunsEnded
// does, and if one of them has ended fails the transaction with
// ErrRunEnded — from a later statement or the commit, as the check goes
// to the database with them. The event log appends runs' output so, one
// round trip fewer than asking first, and asks first when it fails.
type RunsActiveAsserter interface {
	AssertRunsActive(ctx context.Context, runIDs []string) error
}

// RunQuietEnder is offered by Queries that can end a run without waiting
// for anything (PostgreSQL's pipelined transactions), for a run expected
// to be quiet: no child run, no tool call left open, no LLM call
// (RunOutlook all false). RunEndQuiet is RunTransition to a terminal
// status, sent with the statements after it; if the run was not in
// p.From, or was not quiet, the transaction fails with ErrRunNotQuiet —
// from a later statement or the commit. The run's end sends its events
// and COMMIT with it, one round trip where reading the outlook first
// takes two, and reads first when it fails.
type RunQuietEnder interface {
	RunEndQuiet(ctx context.Context, p *RunTransitionParams, sessionID string) error
}

// SessionAssumer is offered by Queries that can check a session is as a
// process last saw it without waiting for the answer (PostgreSQL's
// pipelined transactions). AssumeSessionForRun stands in for
// SessionGetForRunLatest(sessionID, latest) where the caller knows what it
// would return: it takes the same lock on the session's row, and fails the
// transaction with ErrSessionMoved — from a later statement or the commit
// — unless the session exists, is userID's, is not being purged, and its
// newest run matching latest is runID with status. A run's start so sends
// its INSERT, events and COMMIT with it: one round trip where reading
// first takes two; it reads first when it fails.
type SessionAssumer interface {
	AssumeSessionForRun(ctx context.Context, sessionID, userID string, latest *RunLatestParams, runID, status string) error
}

// RunParallel runs fns in tx: at the same time where tx offers Parallel,
// else in order, stopping at the first error. It returns the first error
// in fns' order.
func RunParallel(ctx context.Context, tx Queries, fns []func(tx Queries) error) error {
	if p, ok := tx.(Parallel); ok && len(fns) > 1 {
		return p.Parallel(ctx, fns)
	}
	for _, fn := range fns {
		if err := fn(tx); err != nil {
			return err
		}
	}
	return nil
}

// Queries are the statements agentplane runs. Every state change is a guarded
// statement; on no match the current row is returned with ErrConflict.
type Queries interface {
	SessionCreate(ctx context.Context, p *SessionCreateParams) (*Session, error)
	SessionGet(ctx context.Context, sessionID string) (*Session, error)

	RunInsert(ctx context.Context, p *RunInsertParams) (*Run, error)
	// RunInsertOrAbort inserts a RUNNING root run (no parent, child key or
	// tool call) whose conflict — the session's active root run, another
	// answer to the run it resumes — aborts the transaction: its
	// ErrConflict may come back only from a later statement or the commit,
	// as the INSERT may be sent with them. It returns the row inserted.
	RunInsertOrAbort(ctx context.Context, p *RunInsertParams) (*Run, error)
	RunGet(ctx context.Context, runID string) (*Run, error)
	RunTransition(ctx context.Context, p *RunTransitionParams) (*Run, error)
	// RunLock reads a run and holds its row lock for the rest of the
	// transaction. Transactions that change a run's tool calls take it
	// first, so every path locks run → approval → tool call, the order the
	// run's own transitions use, and replicas cannot deadlock.
	RunLock(ctx context.Context, runID string) (*Run, error)
	// RunsEnded reports which of runIDs have ended. On PostgreSQL it takes
	// a share lock on the rows, so a concurrent transaction ending one of
	// them commits either before this read (and is seen) or after this
	// transaction (and its events come later in the session).
	RunsEnded(ctx context.Context, runIDs []string) (map[string]bool, error)
	// RunEndOutlook says what ending run has to visit besides the run
	// itself, in one read: most runs start no child, leave no tool call
	// open and make no LLM call, and their end then skips three reads.
	// Inside the transaction that ended the run, after its transition, it
	// sees what the reads it replaces would have seen.
	RunEndOutlook(ctx context.Context, run *Run) (*RunOutlook, error)
	// RunEndTransition is RunTransition then RunEndOutlook of the run (of
	// sessionID), sent to the database together where the store can; the
	// outlook is nil when the transition fails.
	RunEndTransition(ctx context.Context, p *RunTransitionParams, sessionID string) (*Run, *RunOutlook, error)
	RunListActive(ctx context.Context, p *RunListActiveParams) ([]*Run, error)
	// RunListChildren lists the runs parentRunID started, oldest first.
	RunListChildren(ctx context.Context, parentRunID string) ([]*Run, error)
	// RunListTree lists every run of the tree rooted at rootRunID, the root
	// included, by depth and then age, so callers build the tree (and the
	// cascade) without recursion in SQL.
	RunListTree(ctx context.Context, rootRunID string) ([]*Run, error)
	// RunLatest returns the newest run matching p; ErrNotFound when none.
	RunLatest(ctx context.Context, p *RunLatestParams) (*Run, error)
	// RunListIntention lists the runs of one intention, roots and
	// children, oldest first.
	RunListIntention(ctx context.Context, intentionID string) ([]*Run, error)

	// EventsAppend appends events, each session's at its next seqs. Inside
	// a transaction (InTx) the returned events' Seq may be filled in only
	// when the transaction commits (PostgreSQL sends the statement with the
	// next one it waits for): read them after InTx returns.
	EventsAppend(ctx context.Context, events []EventParams) ([]Event, error)
	EventsList(ctx context.Context, p *EventsListParams) ([]Event, error)

	MessageAppend(ctx context.Context, p *MessageAppendParams) (*Message, error)
	MessagesList(ctx context.Context, p *MessagesListParams) ([]Message, error)
	// MessagesTranscript returns, oldest first, the newest root-level
	// messages of a session (child runs' turns left out), at most limit,
	// that begin within budget bytes of content counted from the newest:
	// those that fit and the first that passes the budget, for the caller
	// to cut. It reads no content it does not return. The transcript's
	// Version is read no later than its messages (0 when the session does
	// not exist).
	MessagesTranscript(ctx context.Context, sessionID string, limit, budget int) (*Transcript, error)
	// MessagesTranscriptAfter returns, oldest first, the session's
	// root-level messages with ids above afterID, at most limit of them,
	// and the session's transcript version, in one snapshot: a caller
	// holding the transcript as of version v and newest id afterID knows
	// it is still complete when Version − v is the number of messages
	// returned (and fewer than limit). ErrNotFound when the session does
	// not exist.
	MessagesTranscriptAfter(ctx context.Context, sessionID, afterID string, limit int) (*Transcript, error)

	AgentUpsert(ctx context.Context, p *AgentUpsertParams) (*Agent, error)
	AgentGet(ctx context.Context, agentID string) (*Agent, error)
	AgentGetByKeyHash(ctx context.Context, keyHash string) (*Agent, error)
	AgentList(ctx context.Context) ([]*Agent, error)
	AgentDelete(ctx context.Context, agentID string) error
	AgentHeartbeat(ctx context.Context, agentID string, at int64) (*Agent, error)
	AgentSetStatus(ctx context.Context, agentID, status string, at int64) error

	ContextPut(ctx context.Context, p *ContextPutParams) (*ContextBlob, error)
	ContextGet(ctx context.Context, ownerID, key string, version int64) (*ContextBlob, error)

	// Tools (the registry). ToolPut reports whether the tool was created.
	ToolPut(ctx context.Context, p *ToolPutParams) (t *ToolRow, created bool, err error)
	ToolGet(ctx context.Context, name string) (*ToolRow, error)
	ToolList(ctx context.Context) ([]*ToolRow, error)
	ToolDelete(ctx context.Context, name string) error

	// MCP servers used as tool sources (DESIGN §13). MCPServerPut reports
	// whether the server was created; MCPServerDelete returns ErrNotFound
	// when there is none.
	MCPServerPut(ctx context.Context, p *MCPServerPutParams) (s *MCPServerRow, created bool, err error)
	MCPServerGet(ctx context.Context, name string) (*MCPServerRow, error)
	MCPServerList(ctx context.Context) ([]*MCPServerRow, error)
	MCPServerDelete(ctx context.Context, name string) error

	// Tool calls. ToolCallInsert returns the existing row with ErrDuplicate
	// when the run already has a call with that idempotency key.
	ToolCallInsert(ctx context.Context, p *ToolCallInsertParams) (*ToolCall, error)
	ToolCallGet(ctx context.Context, toolCallID string) (*ToolCall, error)
	// ToolCallGetByKey reads the run's call with that idempotency key
	// (ErrNotFound when none).
	ToolCallGetByKey(ctx context.Context, runID, idempotencyKey string) (*ToolCall, error)
	ToolCallTransition(ctx context.Context, p *ToolCallTransitionParams) (*ToolCall, error)
	ToolCallListDue(ctx context.Context, p *ToolCallListDueParams) ([]*ToolCall, error)
	ToolCallListActiveByRun(ctx context.Context, runID string) ([]*ToolCall, error)
	ToolCallListPendingClient(ctx context.Context, sessionID string) ([]*ToolCall, error)

	// Approvals. ApprovalDecide is guarded on PENDING (and the deadline).
	ApprovalInsert(ctx context.Context, p *ApprovalInsertParams) (*Approval, error)
	ApprovalGet(ctx context.Context, approvalID string) (*Approval, error)
	ApprovalDecide(ctx context.Context, p *ApprovalDecideParams) (*Approval, error)
	ApprovalList(ctx context.Context, p *ApprovalListParams) ([]*Approval, error)
	ApprovalListExpired(ctx context.Context, now int64, limit int) ([]*Approval, error)

	// InstanceHeartbeat records that instanceID is alive at at, whoever
	// holds it (tests; processes use InstanceClaim).
	InstanceHeartbeat(ctx context.Context, instanceID string, at int64) error
	InstanceList(ctx context.Context) ([]Instance, error)
	// InstanceGet reads one instance; ErrNotFound when it never beat.
	InstanceGet(ctx context.Context, instanceID string) (*Instance, error)
	// InstanceClaim makes p.Process the holder of p.InstanceID with a
	// heartbeat at p.At: a guarded upsert that succeeds when the id is new,
	// already held by p.Process, stale (last heartbeat before
	// p.AliveSince), or still exactly p.TakeOver. Otherwise another live
	// process holds it: the current row comes back with ErrConflict.
	InstanceClaim(ctx context.Context, p *InstanceClaimParams) (*Instance, error)
	// InstanceRelease forgets instanceID if process holds it (a clean stop),
	// so the next process with the id starts at once.
	InstanceRelease(ctx context.Context, instanceID, process string) error

	// Client presence across processes (DESIGN §8: a client tool needs a
	// connection of its session, wherever that connection lives).
	// SessionClientsSet records how many of instanceID's connections follow
	// sessionID; 0 deletes the row.
	SessionClientsSet(ctx context.Context, sessionID, instanceID string, connections int, at int64) error
	// SessionClientsDeleteInstance drops every row of instanceID: a process
	// starting (or stopping) forgets the connections of its previous life.
	SessionClientsDeleteInstance(ctx context.Context, instanceID string) error
	// SessionHasClient reports whether some process with connections
	// following sessionID has a heartbeat at or after aliveSince, so the
	// rows of a crashed process stop counting once it goes stale.
	SessionHasClient(ctx context.Context, sessionID string, aliveSince int64) (bool, error)

	// Settings are small key/value pairs kept with the database, such as
	// the credentials `serve --demo` generates once and prints at every
	// start. Names are never reused for another meaning; values never change.
	// SettingGet returns ErrNotFound for a name never set.
	SettingGet(ctx context.Context, name string) (string, error)
	// SettingPutIfAbsent stores value under name unless a value is there
	// already, and returns the stored one: value, or the one that was
	// there first (so processes starting together agree on one).
	SettingPutIfAbsent(ctx context.Context, name, value string, at int64) (string, error)

	// Governance (issue 14, DESIGN §15; rows in governance.go).
	// AuditInsert appends an audit row; AuditList pages through them,
	// newest first.
	AuditInsert(ctx context.Context, p *AuditInsertParams) (*AuditEntry, error)
	AuditList(ctx context.Context, p *AuditListParams) ([]*AuditEntry, error)
	// User keys (hashed). UserKeyInsert: ErrConflict on a taken id or hash.
	// UserKeyDelete returns the deleted key; ErrNotFound when userID has no
	// key keyID.
	UserKeyInsert(ctx context.Context, k *UserKey) error
	UserKeyList(ctx context.Context, userID string) ([]*UserKey, error)
	UserKeyDelete(ctx context.Context, userID, keyID string) (*UserKey, error)
	UserKeyGetByHash(ctx context.Context, keyHash string) (*UserKey, error)
	// AgentKeyGraceSet keeps a rotated agent key valid until p.ExpiresAt
	// (and forgets the agent's expired ones); AgentKeyGraceGet returns the
	// agent a key in its grace period belongs to, ErrNotFound otherwise;
	// AgentKeyGraceDelete forgets an agent's (deleted) keys.
	AgentKeyGraceSet(ctx context.Context, p *AgentKeyGraceParams) error
	AgentKeyGraceGet(ctx context.Context, keyHash string, now int64) (agentID string, expiresAt int64, err error)
	AgentKeyGraceDelete(ctx context.Context, agentID string) error
	// RateTake takes tokens from a shared token bucket in one atomic
	// statement (replicas share rate limits through it);
	// RateBucketsPrune deletes buckets untouched since before (they are
	// full again, the same as absent).
	RateTake(ctx context.Context, p *RateTakeParams) (*RateTaken, error)
	RateBucketsPrune(ctx context.Context, before int64) (int, error)
	// WebSocket connections per user across replicas (store.Store: each
	// runs its own transaction, serialised per user). Admit reports
	// whether the connection was counted and how many the user holds;
	// Leave uncounts one; DeleteInstance forgets a process's connections.
	UserConnectionAdmit(ctx context.Context, p *UserConnectionAdmitParams) (admitted bool, current int, err error)
	UserConnectionLeave(ctx context.Context, userID, instanceID string) error
	UserConnectionsDeleteInstance(ctx context.Context, instanceID string) error
	// Retention (store.Store: each batch is its own short statement, so a
	// purge never holds SQLite's writer long). SessionListByAge pages
	// through old sessions; SessionActivityGet says whether one may go.
	// SessionPurgeBegin decides (see its params); SessionPurgeBatch deletes
	// up to limit rows of one of the session's tables per statement, table
	// after table, and reports done when nothing is left but the session
	// row; SessionPurgeFinish deletes that row and keeps the purge record
	// as a tombstone (in the caller's transaction, with its audit row).
	// SessionPurging reports, under the session row's lock (PostgreSQL),
	// whether a purge holds the id or its tombstone does: a run's start
	// asks. SessionTombstonesPrune frees ids deleted before before.
	// SessionPurgesStale lists purges whose owner went quiet before
	// staleBefore; SessionPurgeClaim takes one over.
	SessionListByAge(ctx context.Context, p *SessionListByAgeParams) ([]*Session, error)
	SessionActivityGet(ctx context.Context, sessionID string) (*SessionActivity, error)
	SessionPurgeBegin(ctx context.Context, p *SessionPurgeBeginParams) error
	SessionPurgeBatch(ctx context.Context, sessionID string, limit int) (SessionPurgeCounts, bool, error)
	SessionPurgeFinish(ctx context.Context, sessionID string, at int64) error
	SessionTombstonesPrune(ctx context.Context, before int64) (int, error)
	SessionPurging(ctx context.Context, sessionID string) (bool, error)
	// SessionGetForRun is SessionGet and SessionPurging in one statement,
	// for a run's start: the session under its row lock (PostgreSQL) and
	// whether it is being purged. ErrNotFound when there is no session row
	// (a tombstone then needs SessionPurging).
	SessionGetForRun(ctx context.Context, sessionID string) (*Session, bool, error)
	// SessionGetForRunLatest is SessionGetForRun then RunLatest(latest),
	// read after the session's lock, sent together where the store can; the
	// run is nil when none matches or latest is nil (no second read).
	SessionGetForRunLatest(ctx context.Context, sessionID string, latest *RunLatestParams) (*Session, bool, *Run, error)
	SessionPurgesStale(ctx context.Context, staleBefore int64, limit int) ([]*SessionPurge, error)
	SessionPurgeClaim(ctx context.Context, cur *SessionPurge, owner string, at int64) error
	// EventsDeleteBefore deletes, oldest first, up to limit events of a
	// session with seq up to the last one stamped before ts (a prefix, so
	// what remains has no gaps); it returns how many went.
	EventsDeleteBefore(ctx context.Context, sessionID string, ts int64, limit int) (int, error)
	// SessionActiveRuns lists a session's runs that have not ended.
	SessionActiveRuns(ctx context.Context, sessionID string) ([]*Run, error)
	// Run caps and the queue (governance.go). UserLock and
	// RunAdmissionLock hold, until the transaction ends, the row that
	// serialises a user's starts and every start or admission under the
	// global cap (PostgreSQL; SQLite's writer serialises already).
	// RunUserActiveRoots counts a user's root runs that have not ended
	// (queued ones included), RunQueueCounts the root runs running and
	// queued; both leave out exceptRunID. RunEnqueue makes a run just
	// inserted QUEUED; RunQueueHead lists the queue, first in first;
	// RunAdmit moves a queued run to RUNNING (ErrConflict with the current
	// row otherwise); RunQueuePositionSet records a told position, guarded
	// on the queued run still having the old one.
	UserLock(ctx context.Context, userID string) error
	RunAdmissionLock(ctx context.Context) error
	RunUserActiveRoots(ctx context.Context, userID, exceptRunID string) (int, error)
	RunQueueCounts(ctx context.Context, exceptRunID string) (running, queued int, err error)
	RunEnqueue(ctx context.Context, runID string, at int64, position int) error
	RunQueueHead(ctx context.Context, limit int) ([]*QueuedRun, error)
	RunAdmit(ctx context.Context, p *RunAdmitParams) (*Run, error)
	RunQueuePositionSet(ctx context.Context, runID string, from, to int) (bool, error)

	// EventsNotify tells other processes that sessions got events. In a
	// transaction it is sent only on commit (PostgreSQL NOTIFY); on SQLite,
	// where one process owns the file, it does nothing.
	EventsNotify(ctx context.Context, origin string, sessionIDs []string) error
	// EventsAppendNotify is EventsAppend then EventsNotify(origin,
	// sessionIDs), which must name the events' sessions: the end of every
	// event-log transaction, one statement where the store can.
	EventsAppendNotify(ctx context.Context, events []EventParams, origin string, sessionIDs []string) ([]Event, error)

	// Operator listings (issue 11, listing.go): filtered, keyset-paged
	// reads for GET /v1/sessions, /v1/runs, /v1/agents, /v1/tools and
	// /v1/usage. A page is the rows after the cursor in the listing's
	// order, so rows inserted meanwhile never shift a later page.
	SessionList(ctx context.Context, p *SessionListParams) ([]*SessionSummary, error)
	RunList(ctx context.Context, p *RunListParams) ([]*Run, error)
	AgentListPage(ctx context.Context, afterID string, limit int) ([]*Agent, error)
	ToolListPage(ctx context.Context, afterName string, limit int) ([]*ToolRow, error)
	UsageSummary(ctx context.Context, p *UsageParams) ([]UsageRow, error)
}

// NotifyChannel is the PostgreSQL channel EventsNotify uses; payloads are
// "<origin> <session id>,<session id>…".
const NotifyChannel = "agentplane_events"

// NotifyToolsChanged, named among a notification's session ids, says that
// a registered tool was written (its row put or deleted), so processes
// that keep tool rows read them again. No session id can take this form
// (a session id is letters, digits and "_.:-").
const NotifyToolsChanged = "!tools"

// NotifyAgentsChanged, named among a notification's session ids, says that
// an agent was registered, changed or deleted, so processes that keep
// agent rows read them again.
const NotifyAgentsChanged = "!agents"

// Session is one conversation of one user. LastSeq is the per-session event
// counter: events get seq LastSeq+1… inside the transaction that inserts them.
type Session struct {
	SessionID string          `json:"session_id"`
	UserID    string          `json:"user_id"`
	CreatedAt int64           `json:"created_at"`
	LastSeq   int64           `json:"last_seq"`
	Metadata  json.RawMessage `json:"metadata,omitempty"`
}

// SessionCreateParams creates a session; ErrConflict when the id exists.
type SessionCreateParams struct {
	SessionID string
	UserID    string
	CreatedAt int64
	Metadata  json.RawMessage
}

// Run statuses (DESIGN §8, §15).
const (
	// RunQueued: a root run waiting for a slot under the global cap on
	// active runs; not yet started (its agent has not been invoked).
	RunQueued                = "QUEUED"
	RunRunning               = "RUNNING"
	RunPausedWaitingApproval = "PAUSED_WAITING_APPROVAL"
	RunPausedWaitingTool     = "PAUSED_WAITING_TOOL"
	RunDone                  = "DONE"
	RunFailed                = "FAILED"
	RunCancelled             = "CANCELLED"
	// RunInputRequired: the agent ended its turn asking the user (DESIGN
	// §12). Final for the run, not a failure: the answer starts a new run
	// that resumes this one.
	RunInputRequired = "INPUT_REQUIRED"
)

// RunActiveStatuses are the non-terminal run states.
var RunActiveStatuses = []string{RunQueued, RunRunning, RunPausedWaitingApproval, RunPausedWaitingTool}

// RunTerminalStatuses are the states RunIsTerminal reports as ended.
var RunTerminalStatuses = []string{RunDone, RunFailed, RunCancelled, RunInputRequired}

// RunIsTerminal reports whether status is DONE, FAILED, CANCELLED or
// INPUT_REQUIRED.
func RunIsTerminal(status string) bool {
	return status == RunDone || status == RunFailed || status == RunCancelled || status == RunInputRequired
}

// Run is one execution of an agent in a session. Owner is the instance
// (process) driving it; a dead owner's runs are failed by the sweeper.
// A child run (DESIGN §11) has a ParentRunID, the Depth of its parent plus
// one and the RootRunID of its tree (a root's is its own id).
type Run struct {
	RunID       string          `json:"run_id"`
	SessionID   string          `json:"session_id"`
	AgentID     string          `json:"agent_id"`
	ParentRunID string          `json:"parent_run_id"`
	RootRunID   string          `json:"root_run_id"`
	Depth       int             `json:"depth"`
	UserID      string          `json:"user_id"`
	Status      string          `json:"status"`
	Owner       string          `json:"-"`
	StartedAt   int64           `json:"started_at"`
	EndedAt     int64           `json:"ended_at,omitempty"`
	Error       json.RawMessage `json:"error,omitempty"`
	Usage       json.RawMessage `json:"usage,omitempty"`
	// ChildKey makes the child's start idempotent within its parent.
	ChildKey string `json:"-"`
	// ToolCallID is the call_<agent> tool call whose execution this child
	// is; empty for roots and for children started directly.
	ToolCallID string `json:"tool_call_id,omitempty"`
	// IntentionID groups the runs of one user intention (DESIGN §12): a
	// root run's own, or the one of the run it resumes; a child's is its
	// parent's. Empty for runs from before intentions existed.
	IntentionID string `json:"intention_id,omitempty"`
	// ResumesRunID is the INPUT_REQUIRED run this one answers.
	ResumesRunID string `json:"resumes_run_id,omitempty"`
	// Question and QuestionDetail are what an INPUT_REQUIRED run asked.
	Question       string          `json:"question,omitempty"`
	QuestionDetail json.RawMessage `json:"question_detail,omitempty"`
}

// RunInsertParams inserts a RUNNING run. A root run (no parent) in a session
// that already has an active root run is refused with ErrConflict; child
// runs never count against it. A child whose ChildKey its parent already
// used is not inserted: the existing child is returned with ErrDuplicate.
type RunInsertParams struct {
	RunID       string
	SessionID   string
	AgentID     string
	ParentRunID string
	// RootRunID is the root of the tree; empty means the run is a root
	// (it becomes RunID).
	RootRunID string
	Depth     int
	UserID    string
	Owner     string
	StartedAt int64
	// ChildKey ("" = none) and ToolCallID: see Run.
	ChildKey   string
	ToolCallID string
	// IntentionID and ResumesRunID: see Run. A run is resumed at most once:
	// a second run resuming the same one is refused with ErrConflict.
	IntentionID  string
	ResumesRunID string
}

// RunTransitionParams moves a run to Status if it is currently in one of From.
// Terminal statuses set ended_at. Error/Usage are stored when non-nil.
type RunTransitionParams struct {
	RunID  string
	From   []string
	Status string
	At     int64
	Error  json.RawMessage
	Usage  json.RawMessage
	// Question and QuestionDetail are stored when set (INPUT_REQUIRED).
	Question       string
	QuestionDetail json.RawMessage
}

// RunOutlook is what RunEndOutlook found for a run.
type RunOutlook struct {
	// Children: the run started child runs (ended or not).
	Children bool
	// OpenToolCalls: some tool call of the run has not ended.
	OpenToolCalls bool
	// LLMCalls: the run has llm_call_done events (its cost is summed).
	LLMCalls bool
}

// RunLatestParams finds the newest run (by start) of a session matching
// every filter set.
type RunLatestParams struct {
	SessionID string
	// RootOnly keeps root runs.
	RootOnly    bool
	AgentID     string
	IntentionID string
}

// RunListActiveParams lists non-terminal runs, optionally only those of one
// owner.
type RunListActiveParams struct {
	Owner string
	Limit int
}

// Event is one row of the append-only log.
type Event struct {
	EventID     string          `json:"event_id"`
	SessionID   string          `json:"session_id"`
	Seq         int64           `json:"seq"`
	RunID       string          `json:"run_id"`
	ParentRunID string          `json:"parent_run_id"`
	TS          int64           `json:"ts"`
	Type        string          `json:"type"`
	Payload     json.RawMessage `json:"payload"`
}

// EventParams is an event to append; seq and event_id are allocated by the
// store inside the inserting transaction.
type EventParams struct {
	SessionID   string
	RunID       string
	ParentRunID string
	TS          int64
	Type        string
	Payload     json.RawMessage
	// IfRunActive drops the event, at commit, when its run has already
	// ended — possibly by another process (a cancel or a tool call's
	// failure on another replica), so an agent's late output never lands
	// after the run's terminal event. Not stored.
	IfRunActive bool `json:"-"`
}

// EventsListParams pages through a session's events (SessionID) or a run's
// (RunID) in seq order, after AfterSeq.
type EventsListParams struct {
	SessionID string
	RunID     string
	AfterSeq  int64
	Limit     int
	// Type, when set, keeps only events of that type.
	Type string
}

// Message is one transcript entry. RunID, AgentID and ParentRunID say
// whose turn it is; a child run's rows have a ParentRunID. IntentionID is
// the intention of its run (DESIGN §12).
type Message struct {
	MessageID   string `json:"message_id"`
	SessionID   string `json:"session_id"`
	RunID       string `json:"run_id,omitempty"`
	AgentID     string `json:"agent_id,omitempty"`
	ParentRunID string `json:"parent_run_id,omitempty"`
	IntentionID string `json:"intention_id,omitempty"`
	Role        string `json:"role"`
	Content     string `json:"content"`
	CreatedAt   int64  `json:"created_at"`
}

// Transcript is a session's root-level messages, oldest first, with the
// session's transcript version: how many root-level messages were added to
// it (counted in the adding transaction, since migration 0046, so only
// differences mean anything). A message's id is made before its
// transaction commits, so one can commit after a newer one; the version is
// what tells a reader that nothing was added among the messages it holds.
type Transcript struct {
	Version int64
	// SessionCreatedAt tells a session deleted and made again under its id
	// (whose count starts afresh) from the one read before; 0 when the
	// session does not exist.
	SessionCreatedAt int64
	Messages         []Message
}

// MessageAppendParams appends a transcript entry.
type MessageAppendParams struct {
	MessageID   string
	SessionID   string
	RunID       string
	AgentID     string
	ParentRunID string
	IntentionID string
	Role        string
	Content     string
	CreatedAt   int64
}

// MessagesListParams returns the newest Limit messages older than Before (a
// message id; empty = newest), oldest first. RootOnly keeps the rows of
// root-level turns (no ParentRunID): what a root agent is sent.
type MessagesListParams struct {
	SessionID string
	Before    string
	Limit     int
	RootOnly  bool
}

// Agent health statuses.
const (
	AgentUnknown   = "unknown"
	AgentHealthy   = "healthy"
	AgentUnhealthy = "unhealthy"
)

// How a child run's deltas reach the session's clients (Agent.SubAgentEcho,
// DESIGN §11): sub_agent_partial events aggregated over at most 100 ms, one
// per delta, or none.
const (
	EchoAggregate   = "aggregate"
	EchoPassthrough = "passthrough"
	EchoOff         = "off"
)

// Agent protocols: how the platform invokes an agent.
const (
	ProtocolAgentplane = "agentplane" // POST {endpoint}/invoke, SSE (DESIGN §5)
	ProtocolA2A        = "a2a"        // a remote A2A agent (DESIGN §12)
)

// Agent is a registered external agent service. KeyHash is the SHA-256 of
// its API key; the key itself is never stored.
type Agent struct {
	AgentID      string          `json:"agent_id"`
	Name         string          `json:"name"`
	Description  string          `json:"description"`
	Endpoint     string          `json:"endpoint"`
	Capabilities json.RawMessage `json:"capabilities"`
	LinkedAgents json.RawMessage `json:"linked_agents"`
	// SubAgentEcho is EchoAggregate, EchoPassthrough or EchoOff.
	SubAgentEcho string `json:"sub_agent_echo"`
	KeyHash      string `json:"-"`
	// A2A: the agent is also served over A2A at /a2a/{agent_id} (DESIGN
	// §12). Protocol is how the platform speaks to it: ProtocolAgentplane
	// or ProtocolA2A (a remote A2A agent whose card is A2ACard).
	A2A             bool            `json:"a2a"`
	Protocol        string          `json:"protocol"`
	A2ACard         json.RawMessage `json:"a2a_card,omitempty"`
	Status          string          `json:"status"`
	LastHeartbeatAt int64           `json:"last_heartbeat_at,omitempty"`
	LastProbeAt     int64           `json:"last_probe_at,omitempty"`
	CreatedAt       int64           `json:"created_at"`
	UpdatedAt       int64           `json:"updated_at"`
}

// AgentUpsertParams registers or updates an agent. An empty KeyHash on update
// keeps the existing key.
type AgentUpsertParams struct {
	AgentID      string
	Name         string
	Description  string
	Endpoint     string
	Capabilities json.RawMessage
	LinkedAgents json.RawMessage
	// SubAgentEcho: empty means EchoAggregate.
	SubAgentEcho string
	KeyHash      string
	At           int64
	// A2A, Protocol (empty means ProtocolAgentplane) and A2ACard: see Agent.
	A2A      bool
	Protocol string
	A2ACard  json.RawMessage
}

// Links decodes the agent's linked_agents.
func (a *Agent) Links() []string {
	var out []string
	_ = json.Unmarshal(a.LinkedAgents, &out)
	return out
}

// ContextBlob is one version of an agent's context entry.
type ContextBlob struct {
	OwnerID   string          `json:"-"`
	Key       string          `json:"key"`
	Version   int64           `json:"version"`
	Data      json.RawMessage `json:"data"`
	CreatedAt int64           `json:"created_at"`
}

// ContextPutParams writes a new version. With IfVersion set, the write
// succeeds only if the latest version equals it (0 = must not exist yet);
// otherwise ErrConflict.
type ContextPutParams struct {
	OwnerID   string
	Key       string
	Data      json.RawMessage
	IfVersion *int64
	At        int64
}

// Instance is a running agentplane process, kept alive by heartbeats.
// Process is the random id of the process start that holds InstanceID.
type Instance struct {
	InstanceID  string
	HeartbeatAt int64
	Process     string
}

// InstanceClaimParams claims an instance id for a process (see
// Queries.InstanceClaim).
type InstanceClaimParams struct {
	InstanceID string
	Process    string
	At         int64
	// AliveSince: a holder whose heartbeat is older is dead.
	AliveSince int64
	// TakeOver, when set, is a row the caller read earlier and watched
	// long enough to know its process stopped beating: the claim also
	// succeeds if the row is still exactly that.
	TakeOver *Instance
}
