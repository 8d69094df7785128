package sqlstore

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/agentplane/agentplane/internal/store"
)

// EventsAppendNotify is EventsAppend followed by EventsNotify(origin,
// sessionIDs) — the last statements of every event-log transaction.
//
// On PostgreSQL, when the events are one session's and few (a tool call's
// step, a run's start or end: the sequential paths), the seq bump, the
// insert and the NOTIFY are one statement: one round trip instead of three,
// twice per tool call (issue 13). The statement keeps what the three did: the
// UPDATE of the session's counter takes its row lock before any event row is
// written, the seqs are the counter's new values in order, and the NOTIFY is
// still delivered only if the transaction commits. Anything larger takes
// the general path.
func (q *queries) EventsAppendNotify(ctx context.Context, events []store.EventParams, origin string, sessionIDs []string) ([]store.Event, error) {
	if q.d.Name == "postgres" && fusable(events, origin, sessionIDs) {
		return q.appendOne(ctx, events, origin+" "+strings.Join(sessionIDs, ","))
	}
	out, err := q.EventsAppend(ctx, events)
	if err != nil {
		return nil, err
	}
	return out, q.EventsNotify(ctx, origin, sessionIDs)
}

// fusable reports whether one statement can carry the append and its
// NOTIFY: 1 to exactChunk events of a single session (so the statement
// texts stay few: one per count) and a payload that fits one NOTIFY.
func fusable(events []store.EventParams, origin string, sessionIDs []string) bool {
	if !oneSessionFew(events) || len(sessionIDs) == 0 {
		return false
	}
	n := len(origin) + 1
	for _, id := range sessionIDs {
		n += len(id) + 1
	}
	return n <= notifyPayloadMax
}

// oneSessionFew reports whether events are 1 to exactChunk events of a
// single session: what one statement appends on PostgreSQL (appendOne), so
// the statement texts stay few (one per count).
func oneSessionFew(events []store.EventParams) bool {
	if len(events) == 0 || len(events) > exactChunk {
		return false
	}
	s := events[0].SessionID
	for i := range events {
		if events[i].SessionID != s {
			return false
		}
	}
	return true
}

// fusedAppend keys the statement texts of appendOne.
type fusedAppend struct {
	n      int
	notify bool
}

var fusedAppendTexts texts[fusedAppend]

// fusedAppendText is the one-statement append of n events of one session:
// the counter's UPDATE returns the new last seq, the INSERT numbers the
// rows from it, and the final SELECT returns it — after sending the NOTIFY
// when notify. Data-modifying WITH clauses run exactly once whether or not
// they are referenced, and a volatile function in FROM is not optimised
// away. A session that does not exist is an error of the statement itself
// (its rows get a NULL seq, which the column refuses), not an empty answer:
// inside a pipelined transaction the statements sent after it, the commit
// among them, run before anyone reads its answer, and only an error stops
// them.
func fusedAppendText(n int, notify bool) string {
	return fusedAppendTexts.get(fusedAppend{n, notify}, buildFusedAppend)
}

func buildFusedAppend(k fusedAppend) string {
	n, notify := k.n, k.notify
	var b strings.Builder
	b.WriteString(`WITH s AS (UPDATE sessions SET last_seq = last_seq + CAST(? AS BIGINT) WHERE session_id = ? RETURNING last_seq), `)
	b.WriteString(`ins AS (INSERT INTO events (` + eventCols + `) `)
	b.WriteString(`SELECT v.event_id, v.session_id, s.last_seq - CAST(? AS BIGINT) + v.k, v.run_id, v.parent_run_id, v.ts, v.type, v.payload FROM (VALUES `)
	for i := 0; i < n; i++ {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString("(CAST(? AS TEXT), CAST(? AS TEXT), CAST(? AS BIGINT), CAST(? AS TEXT), CAST(? AS TEXT), CAST(? AS BIGINT), CAST(? AS TEXT), CAST(? AS TEXT))")
	}
	b.WriteString(`) AS v (event_id, session_id, k, run_id, parent_run_id, ts, type, payload) LEFT JOIN s ON TRUE) `)
	if notify {
		b.WriteString(`SELECT s.last_seq FROM s, (SELECT pg_notify(?, ?)) AS n`)
	} else {
		b.WriteString(`SELECT s.last_seq FROM s`)
	}
	return b.String()
}

// appendOne appends oneSessionFew events in one statement on PostgreSQL,
// with the NOTIFY payload notify unless it is empty. Inside a pipelined
// transaction the events' seqs are final only once the transaction
// commits (store.Queries.EventsAppend).
func (q *queries) appendOne(ctx context.Context, events []store.EventParams, notify string) ([]store.Event, error) {
	n := int64(len(events))
	session := events[0].SessionID
	out := make([]store.Event, len(events))
	args := make([]any, 0, 3+8*len(events)+2)
	args = append(args, n, session, n)
	for i := range events {
		// Seq is k for now: the statement numbers the rows from the
		// counter, k = 1 being the first new seq; fixed up below.
		out[i] = newEvent(&events[i], int64(i+1))
		e := &out[i]
		args = append(args, e.EventID, e.SessionID, e.Seq, e.RunID, e.ParentRunID, e.TS, e.Type, string(e.Payload))
	}
	if notify != "" {
		args = append(args, store.NotifyChannel, notify)
	}
	// The seqs are needed after the commit (the event log publishes the
	// events then), so inside a pipelined transaction the statement goes
	// with the next one that is waited for, the commit at the latest, and
	// out's seqs are fixed up when its row arrives.
	err := q.rowLater(ctx, fusedAppendText(len(events), notify != ""), args, func(r *row) error {
		var last int64
		if err := r.Scan(&last); err != nil {
			if errors.Is(err, store.ErrNotFound) || q.d.IsNotNullViolation != nil && q.d.IsNotNullViolation(err) {
				return fmt.Errorf("allocate seq for session %s: %w", session, store.ErrNotFound)
			}
			return fmt.Errorf("insert %d events: %w", len(events), err)
		}
		base := last - n
		for i := range out {
			out[i].Seq += base
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}
