package sqlstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"unsafe"

	"github.com/agentplane/agentplane/internal/ids"
	"github.com/agentplane/agentplane/internal/store"
)

const eventCols = `event_id, session_id, seq, run_id, parent_run_id, ts, type, payload`

// runIndexed is events_run's condition (migration 0043): the stream's
// deltas are left out of that index, the bulk of the log.
const runIndexed = `type NOT IN ('agent_stream_delta', 'sub_agent_partial')`

// unindexedType reports event types events_run leaves out.
func unindexedType(t string) bool { return t == "agent_stream_delta" || t == "sub_agent_partial" }

// eventInsertChunk bounds the rows of one multi-row INSERT (8 parameters
// each) well below both databases' parameter limits.
const eventInsertChunk = 256

// EventsAppend allocates each session's next seqs and inserts the events.
// On PostgreSQL the seq counter (sessions.last_seq) is bumped inside the
// same transaction as the insert, by the statement that inserts
// (appendOne, appendMany): the row lock it takes serialises writers of a
// session across processes, so seqs never gap or commit out of order.
// SQLite has one writer at a time (every transaction is BEGIN IMMEDIATE),
// so there the next seq is read from the events themselves (sqliteLastSeq)
// and no counter is written: a commit of 12 streams' deltas wrote 24.1 WAL
// pages, 3.9 of them the counters' sessions pages, and a tool call's step
// 3.6, one of them its session's (issue 13; go run ./bench/foundation
// walframes).
func (q *queries) EventsAppend(ctx context.Context, events []store.EventParams) ([]store.Event, error) {
	if len(events) == 0 {
		return nil, nil
	}
	if q.d.Name == "postgres" {
		if oneSessionFew(events) {
			// The bump and the insert in one statement: one round trip.
			return q.appendOne(ctx, events, "")
		}
		return q.appendMany(ctx, events)
	}
	// SQLite: each session's next seq, read inside the write transaction.
	seen := make(map[string]bool, 4)
	var order []string
	for i := range events {
		if s := events[i].SessionID; !seen[s] {
			seen[s] = true
			order = append(order, s)
		}
	}
	next := make(map[string]int64, len(order))
	memo := q.memo(ctx)
	ask := order
	if memo != nil {
		// Sessions whose last seq this connection committed are not asked
		// about (writememo.go).
		ask = ask[:0:0]
		for _, s := range order {
			if last, ok := memo.lastSeq(s); ok {
				next[s] = last + 1
			} else {
				ask = append(ask, s)
			}
		}
	}
	for start, size := range shapeChunks(len(ask), seqUpdateChunk) {
		if err := q.lastSeqs(ctx, ask[start:start+size], next); err != nil {
			return nil, err
		}
	}
	out := make([]store.Event, len(events))
	for i := range events {
		out[i] = newEvent(&events[i], next[events[i].SessionID])
		next[events[i].SessionID]++
	}
	if memo != nil {
		memo.setAppending(true)
		defer memo.setAppending(false)
	}
	for start, size := range shapeChunks(len(out), eventInsertChunk) {
		end := start + size
		args := make([]any, 0, (end-start)*8)
		var sessions, runs, parents, types repeats
		for i := start; i < end; i++ {
			e := &out[i]
			// The payload as a string without a copy: an appended event's
			// payload is never written again (it is also what the log
			// publishes), and both drivers copy a string when they bind it.
			args = append(args, e.EventID, sessions.box(e.SessionID), e.Seq, runs.box(e.RunID), parents.box(e.ParentRunID), e.TS,
				types.box(e.Type), unsafe.String(unsafe.SliceData(e.Payload), len(e.Payload)))
		}
		if err := q.execLater(ctx, eventInsertText(size), args...); err != nil {
			return nil, fmt.Errorf("insert %d events: %w", end-start, err)
		}
	}
	if memo != nil {
		// Staged: an insert that failed fails the transaction, whose
		// rollback drops this.
		for s, n := range next {
			memo.wroteSeq(s, n-1)
		}
	}
	return out, nil
}

var eventInsertTexts texts[int]

// eventInsertText is SQLite's INSERT of rows events (a size shapeChunks
// makes, so the texts are few).
func eventInsertText(rows int) string {
	return eventInsertTexts.get(rows, buildEventInsert)
}

func buildEventInsert(rows int) string {
	var b strings.Builder
	// OR FAIL: a multi-row INSERT whose conflict action is the default
	// ABORT copies every page it first touches to a statement journal, so
	// that it can undo just itself; 10 % of the server's CPU at 1,000
	// streams (issue 13). Any error of it rolls the whole transaction back
	// anyway (the event log retries each op alone), so FAIL's "keep the
	// rows before the failing one" never commits.
	b.WriteString(`INSERT OR FAIL INTO events (` + eventCols + `) VALUES `)
	for i := range rows {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString("(?, ?, ?, ?, ?, ?, ?, ?)")
	}
	return b.String()
}

// repeats boxes a column's values for a statement's arguments, reusing the
// last box while the value repeats: a batch's events mostly share their
// type, and a run's its session and run ids — an allocation fewer for each
// (every string put in an interface is one).
type repeats struct {
	last  string
	boxed any
}

func (r *repeats) box(v string) any {
	if r.boxed == nil || v != r.last {
		r.last, r.boxed = v, v
	}
	return r.boxed
}

// newEvent is the event p appends, at seq, with a new id ({} for an empty
// payload).
func newEvent(p *store.EventParams, seq int64) store.Event {
	payload := p.Payload
	if len(payload) == 0 {
		payload = []byte("{}")
	}
	return store.Event{
		EventID: ids.New("evt"), SessionID: p.SessionID, Seq: seq,
		RunID: p.RunID, ParentRunID: p.ParentRunID, TS: p.TS, Type: p.Type, Payload: payload,
	}
}

// seqUpdateChunk bounds the sessions whose last seqs one statement reads.
const seqUpdateChunk = 256

// exactChunk: up to this many rows go in one statement of exactly that
// many (a tool call's 2–4 events, a short run's end): one statement, one
// round trip on PostgreSQL, instead of one per power of two.
const exactChunk = 16

// shapeChunks splits n rows into chunks as start → size: n itself up to
// exactChunk, else chunks whose sizes are powers of two, at most max (a
// power of two), largest first. A multi-row statement's text depends on its
// row count; with these sizes an append path has at most
// exactChunk+log2(max)+1 texts per statement instead of max, so a
// prepared-statement cache keyed by text holds them all and is not flooded
// by one text per batch size (issue 13).
func shapeChunks(n, max int) func(yield func(start, size int) bool) {
	return func(yield func(start, size int) bool) {
		if n <= exactChunk {
			if n > 0 {
				yield(0, n)
			}
			return
		}
		start := 0
		for size := max; n > 0; {
			if size > n {
				size >>= 1
				continue
			}
			if !yield(start, size) {
				return
			}
			start += size
			n -= size
		}
	}
}

// lastSeqs records in next each session's seq after its last
// (sqliteLastSeq), read inside SQLite's write transaction, where
// no other writer can append to the session before it commits. The
// inserts of this transaction's earlier appends are queued before this
// statement and run first, so a second append in one transaction numbers
// on from the first.
func (q *queries) lastSeqs(ctx context.Context, sessions []string, next map[string]int64) error {
	args := make([]any, len(sessions))
	for i, s := range sessions {
		args[i] = s
	}
	rows, err := q.queryWrite(ctx, lastSeqsTexts.get(len(sessions), buildLastSeqs), args...)
	if err != nil {
		return fmt.Errorf("allocate seqs: %w", err)
	}
	return readSeqs(rows, sessions, next)
}

// lastSeqsTexts holds lastSeqs' statements by their number of sessions (a
// size shapeChunks makes: the texts are few).
var lastSeqsTexts texts[int]

func buildLastSeqs(sessions int) string {
	var b strings.Builder
	b.WriteString(`SELECT s.session_id, ` + sqliteLastSeq + ` FROM sessions s WHERE s.session_id IN (`)
	for i := range sessions {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString("?")
	}
	b.WriteString(")")
	return b.String()
}

// readSeqs reads rows of (session id, last seq) into next as each
// session's first new seq, and closes rows. A session of sessions without
// a row does not exist: ErrNotFound.
func readSeqs(rows *rows, sessions []string, next map[string]int64) error {
	defer rows.Close()
	found := 0
	var id string // scanned into: declared once, not a pair of heap cells per row
	var last int64
	for rows.Next() {
		if err := rows.Scan(&id, &last); err != nil {
			return fmt.Errorf("allocate seqs: %w", err)
		}
		next[id] = last + 1
		found++
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("allocate seqs: %w", err)
	}
	if found == len(sessions) {
		return nil
	}
	for _, s := range sessions {
		if _, ok := next[s]; !ok {
			return fmt.Errorf("allocate seq for session %s: %w", s, store.ErrNotFound)
		}
	}
	return nil
}

// EventsList pages a session's or a run's events in seq order.
func (q *queries) EventsList(ctx context.Context, p *store.EventsListParams) ([]store.Event, error) {
	limit := p.Limit
	if limit <= 0 || limit > 10000 {
		limit = 1000
	}
	var query string
	var args []any
	typed := p.Type != "" // a filter the statement takes last
	switch {
	case p.RunID != "" && p.Type != "" && !unindexedType(p.Type):
		// Through events_run, whose condition is repeated word for word.
		query = `SELECT ` + eventCols + ` FROM events WHERE run_id = ? AND ` + runIndexed + ` AND type = ? AND seq > ?`
		args = []any{p.RunID, p.Type, p.AfterSeq}
		typed = false
		if p.SessionID != "" {
			query += ` AND session_id = ?`
			args = append(args, p.SessionID)
		}
	case p.RunID != "":
		// A run's deltas are not in events_run: walk its session's events,
		// from where the caller says (a page after the first, or a run whose
		// start it saw: one statement) or from the run's first one.
		session, after := p.SessionID, p.AfterSeq
		if session == "" || after <= 0 {
			var found bool
			var err error
			if session, after, found, err = q.runWalkStart(ctx, p); err != nil {
				return nil, err
			} else if !found {
				return []store.Event{}, nil
			}
		}
		query = `SELECT ` + eventCols + ` FROM events WHERE session_id = ? AND seq > ? AND run_id = ?`
		args = []any{session, after, p.RunID}
	case p.SessionID != "":
		query = `SELECT ` + eventCols + ` FROM events WHERE session_id = ? AND seq > ?`
		args = []any{p.SessionID, p.AfterSeq}
	default:
		return nil, fmt.Errorf("list events: session or run id required")
	}
	if typed {
		query += ` AND type = ?`
		args = append(args, p.Type)
	}
	query += ` ORDER BY seq LIMIT ?`
	args = append(args, limit)
	rows, err := q.query(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("list events: %w", err)
	}
	defer rows.Close()
	out := make([]store.Event, 0, 16)
	for rows.Next() {
		var e store.Event
		if err := rows.Scan(&e.EventID, &e.SessionID, &e.Seq, &e.RunID, &e.ParentRunID, &e.TS, &e.Type, nullJSON{&e.Payload}); err != nil {
			return nil, fmt.Errorf("list events: %w", err)
		}
		out = append(out, e)
	}
	return out, rows.Err()
}

// runWalkStart is where a listing of a run's events starts walking its
// session's: the session holding the run's first event (never a delta:
// run_started or the like opens every run), which events_run finds, and
// the seq before it. Two statements rather than one: a bound computed
// inside the range statement would only filter the walk. found is false
// when nothing can match (no such run in p.SessionID, or no session).
func (q *queries) runWalkStart(ctx context.Context, p *store.EventsListParams) (session string, after int64, found bool, err error) {
	session = p.SessionID
	var at string
	var first int64
	err = q.queryRow(ctx, false, `SELECT session_id, seq FROM events WHERE run_id = ? AND `+runIndexed+` ORDER BY seq LIMIT 1`, p.RunID).Scan(&at, &first)
	switch err = mapErr(q.d, err); {
	case errors.Is(err, store.ErrNotFound): // no indexed event: walk the whole session
	case err != nil:
		return "", 0, false, fmt.Errorf("list events of run %s: %w", p.RunID, err)
	case session != "" && session != at:
		return "", 0, false, nil
	default:
		session = at
	}
	if session == "" {
		return "", 0, false, nil
	}
	return session, max(p.AfterSeq, first-1), true, nil
}
